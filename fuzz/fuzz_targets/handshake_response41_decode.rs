//! The client login decoder: the first bytes any internet client sends the relay. Whatever
//! decodes must re-encode to exactly the same bytes.
#![no_main]

use authplugin::packet::{HandshakeResponse41, SslRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
