//! A local process that binds the compute's address before the compute does (issue 13): it
//! greets like a MySQL server, so a readiness probe alone would trust it and hand it the
//! relayed login (scramble A and the client's answer). The process driver trusts only a
//! listener its own child holds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authplugin::Scramble;
use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::{CLIENT_CONNECT_WITH_DB, CLIENT_PROTOCOL_41};
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb};

#[test]
fn a_process_squatting_on_the_compute_address_never_receives_a_login() {
    let dir = TempDir::new("relay-impostor");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            // A compute that starts but never listens: only the impostor ever greets.
            command: Some(vec!["sleep".into(), "60".into()]),
            resume_timeout: "3s",
            ..RelayOptions::default()
        },
    );
    // The impostor: greets every connection and records what it is sent.
    let listener = TcpListener::bind(("127.0.0.1", relay.compute_port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let received = Arc::new(Mutex::new(Vec::<u8>::new()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let impostor = {
        let (received, accepted, stop) = (received.clone(), accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            let greeting = HandshakeV10::new(
                b"5.7.99-impostor".to_vec(),
                1,
                &Scramble::from_bytes(*b"IIIIIIIIIIIIIIIIIIII"),
                CLIENT_PROTOCOL_41 | CLIENT_CONNECT_WITH_DB,
                45,
                2,
                "mysql_native_password",
            )
            .to_bytes();
            while !stop.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let mut framed = Vec::new();
                authplugin::packet::write_packet(&mut framed, 0, &greeting);
                let _ = s.write_all(&framed);
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    received.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }
        })
    };

    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    stop.store(true, Ordering::Relaxed);
    impostor.join().unwrap();

    assert_ne!(out.code, Some(0), "the login must fail: {}", out.stdout);
    assert!(
        accepted.load(Ordering::Relaxed) >= 1,
        "the relay probed the address (the impostor greeted):\n{}",
        relay.log()
    );
    let got = received.lock().unwrap();
    assert!(
        got.is_empty(),
        "the impostor received {} bytes from the relay:\n{}",
        got.len(),
        relay.log()
    );
    assert!(
        relay
            .log()
            .contains("another process listens on the compute address"),
        "{}",
        relay.log()
    );
}
