//! The client login decoder: the first bytes any internet client sends the relay. Whatever
//! decodes must re-encode to exactly the same bytes.
#![no_main]

use authplugin::packet::{HandshakeResponse41, SslRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The relay decodes by the flags its greeting offered; derive some from the input.
    if let Some((caps, login)) = data.split_first_chunk::<4>() {
        let caps = u32::from_le_bytes(*caps);
        if let Ok(r) = HandshakeResponse41::decode_for_server(login, caps) {
            let mut again = Vec::new();
            r.encode_for_server(&mut again, caps);
            let twice = HandshakeResponse41::decode_for_server(&again, caps).expect("own output decodes");
            assert_eq!(twice, r);
        }
    }
    let _ = SslRequest::decode(data);
    if let Ok(r) = HandshakeResponse41::decode(data) {
        let again = r.to_bytes();
        // Length-encoded integers may arrive in a longer form than the shortest one we write;
        // then only a second round trip is stable.
        if again != data {
            let twice = HandshakeResponse41::decode(&again).expect("own output decodes");
            assert_eq!(twice, r);
        }
    }
});
