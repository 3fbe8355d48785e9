//! The checked-in fuzz corpus is re-decoded on every test run, so a seed that once crashed a
//! decoder stays a regression test even where `cargo fuzz` is not installed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::fs;
use std::path::PathBuf;

use authplugin::packet::{
    AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10, parse_packet,
};
use authplugin::payload;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

#[test]
fn handshake_response41_corpus_round_trips() {
    let mut decoded = 0;
    for (path, bytes) in corpus("handshake_response41_decode") {
        if let Ok(r) = HandshakeResponse41::decode(&bytes) {
            let again = r.to_bytes();
            assert_eq!(
                HandshakeResponse41::decode(&again).unwrap(),
                r,
                "{}",
                path.display()
            );
            decoded += 1;
        }
    }
    assert!(decoded >= 2, "the real-client seeds decode");
}

#[test]
fn payload_corpus_round_trips() {
    let mut decoded = 0;
    for (path, bytes) in corpus("payload_decode") {
        if let Ok(p) = payload::decode(&bytes) {
            assert!(
                bytes.len() <= payload::MAX_PAYLOAD_LEN,
                "{}",
                path.display()
            );
            assert_eq!(&bytes[bytes.len() - 32..], &p.mac);
            decoded += 1;
        }
    }
    assert!(decoded >= 2, "the hand-made seeds decode");
}

#[test]
fn server_packet_and_framing_corpus_never_panics() {
    for (_, bytes) in corpus("server_packets_decode") {
        if let Ok(g) = HandshakeV10::decode(&bytes) {
            assert_eq!(g.to_bytes(), bytes);
        }
        if let Ok(e) = ErrPacket::decode(&bytes) {
            assert_eq!(e.to_bytes(), bytes);
        }
        let _ = AuthSwitchRequest::decode(&bytes);
    }
    for (_, bytes) in corpus("framing") {
        let mut rest = &bytes[..];
        while let Ok(Some((_, used))) = parse_packet(rest, 1 << 16) {
            rest = &rest[used..];
        }
    }
}
