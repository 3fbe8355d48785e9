//! The decoders for what a compute (or a stock server) sends the relay: greeting, OK, ERR,
//! AuthSwitchRequest, AuthMoreData.
#![no_main]

use authplugin::packet::{
    AuthMoreData, AuthSwitchRequest, ErrPacket, HandshakeV10, OkPacket,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = HandshakeV10::decode(data) {
        assert_eq!(g.to_bytes(), data);
        let _ = g.scramble();
    }
    if let Some((&caps_byte, rest)) = data.split_first() {
        let caps = u32::from(caps_byte) << 16;
        if let Ok(ok) = OkPacket::decode(rest, caps) {
            let mut out = Vec::new();
            ok.encode(&mut out, caps);
            assert_eq!(OkPacket::decode(&out, caps).expect("own output decodes"), ok);
        }
    }
    if let Ok(e) = ErrPacket::decode(data) {
        assert_eq!(e.to_bytes(), data);
    }
    if let Ok(s) = AuthSwitchRequest::decode(data) {
        let mut out = Vec::new();
        s.encode(&mut out);
        assert_eq!(out, data);
    }
    let _ = AuthMoreData::decode(data);
});
