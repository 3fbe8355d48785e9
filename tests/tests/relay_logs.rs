//! Log injection: a user name with a newline and ESC used to forge a whole relay
//! log line. Client-supplied text is now escaped onto the connection's own line.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::time::Duration;

use authplugin::native_password;
use authplugin::packet::HandshakeResponse41;
use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::{
    CLIENT_LONG_PASSWORD, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use tests::relay::{Relay, RelayOptions};
use tests::{TempDir, raw};
use zeroize::Zeroizing;

/// What the attacker wants the operator to read as the relay's own line.
const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO relay: relayed login accepted; forwarding instance=demo user=root";

#[test]
fn a_user_name_with_newline_and_esc_cannot_forge_a_log_line() {
    let dir = TempDir::new("logs-injection");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let user = format!("mallory\n{FORGED}\x1b[2K\r");
    let mut s = raw::connect(relay.port).unwrap();
    let (_, greeting) = raw::read_packet(&mut s).unwrap();
    let scramble_a = HandshakeV10::decode(&greeting).unwrap().scramble().unwrap();
    let response = HandshakeResponse41 {
        client_flag: CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: user.as_bytes().to_vec(),
        auth_response: Zeroizing::new(native_password::token(b"guess", &scramble_a)),
        database: None,
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    raw::write_packet(&mut s, 1, &response.to_bytes()).unwrap();
    let (_, reply) = raw::read_packet(&mut s).unwrap();
    assert_eq!(raw::err_of(&reply).0, 1045, "the compute refuses the login");
    drop(s);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay
            .log_count("compute denied the login")
            == 1),
        "{}",
        relay.log()
    );
    let log = relay.log();
    assert!(!log.contains('\x1b'), "an ESC reached the log:\n{log}");
    assert!(
        !log.lines().any(|l| l.starts_with(FORGED)),
        "a forged line:\n{log}"
    );
    let denied = log
        .lines()
        .find(|l| l.contains("compute denied the login"))
        .unwrap();
    assert!(
        denied.contains(&format!("user=mallory\\n{FORGED}\\u{{1b}}[2K\\r")),
        "{denied}"
    );
}
