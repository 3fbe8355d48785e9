//! Packet framing over arbitrary byte streams: never a panic, never more than the limit.
#![no_main]

use authplugin::packet::{parse_packet, write_packet};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((packet, used))) = parse_packet(rest, LIMIT) {
        assert!(used > 0 && used <= rest.len());
        assert!(packet.payload.len() <= LIMIT);
        let mut out = Vec::new();
        write_packet(&mut out, packet.sequence_id, &packet.payload);
        assert_eq!(out.len(), used);
        rest = &rest[used..];
    }
});
