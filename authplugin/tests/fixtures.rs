//! Packets captured from real MariaDB 10.11, the stock `mariadb` CLI and PyMySQL
//! (`fixtures/capture.py` regenerates them): decode, assert every field, re-encode, compare;
//! then every truncated prefix and any trailing byte must be refused.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use authplugin::hex;
use authplugin::packet::capabilities::*;
use authplugin::packet::{
    AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10, OkPacket, SslRequest,
};
use authplugin::{DecodeError, Scramble, native_password};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    hex::decode(text.trim()).unwrap_or_else(|| panic!("{path}: not hex"))
}

/// The scramble in the MariaDB greeting that both captured responses answered.
const CAPTURED_SCRAMBLE: &str = "7d46247e713e7e21273d3e5d3d577d3177285c78";

fn assert_every_prefix_rejected<T: std::fmt::Debug>(
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
) {
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n]).is_err(), "prefix of {n} bytes decoded");
    }
}

fn assert_trailing_rejected<T: std::fmt::Debug>(
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
) {
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert_eq!(decode(&longer).unwrap_err(), DecodeError::TrailingBytes(1));
}

#[test]
fn decodes_mariadb_10_11_greeting() {
    let bytes = fixture("mariadb_10_11_greeting.hex");
    let g = HandshakeV10::decode(&bytes).unwrap();
    assert_eq!(g.server_version, b"5.5.5-10.11.19-MariaDB-0+deb12u1");
    assert_eq!(g.connection_id, 12);
    assert_eq!(g.capability_flags, 0x81ff_f7fe);
    assert_eq!(
        g.capability_flags & CLIENT_MYSQL_MARIADB,
        0,
        "MariaDB clears bit 0"
    );
    assert_ne!(g.capability_flags & CLIENT_PLUGIN_AUTH, 0);
    assert_ne!(g.capability_flags & CLIENT_SECURE_CONNECTION, 0);
    assert_eq!(g.character_set, 8);
    assert_eq!(g.status_flags, SERVER_STATUS_AUTOCOMMIT);
    assert_eq!(g.reserved, [0, 0, 0, 0, 0, 0, 0x1d, 0, 0, 0]);
    assert_eq!(g.mariadb_extended_capabilities(), Some(0x1d));
    assert_eq!(g.auth_plugin_data.len(), 21);
    assert_eq!(g.auth_plugin_data.last(), Some(&0));
    assert_eq!(
        hex::encode(g.scramble().unwrap().as_bytes()),
        CAPTURED_SCRAMBLE
    );
    assert_eq!(
        g.auth_plugin_name.as_deref(),
        Some(&b"mysql_native_password"[..])
    );
    assert_eq!(g.to_bytes(), bytes);
}

#[test]
fn rejects_truncated_or_extended_greeting() {
    let bytes = fixture("mariadb_10_11_greeting.hex");
    assert_every_prefix_rejected(&bytes, HandshakeV10::decode);
    assert_trailing_rejected(&bytes, HandshakeV10::decode);
}

#[test]
fn decodes_mariadb_cli_handshake_response41() {
    let bytes = fixture("mariadb_cli_handshake_response41.hex");
    let r = HandshakeResponse41::decode(&bytes).unwrap();
    assert_eq!(r.client_flag, 0x00bf_a28c);
    assert_eq!(r.client_flag & CLIENT_SSL, 0);
    assert_ne!(r.client_flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, 0);
    assert_eq!(r.max_packet_size, 1_048_576);
    assert_eq!(r.character_set, 33);
    assert_eq!(r.mariadb_extended_capabilities(), Some(0x1d));
    assert_eq!(r.username, b"app");
    assert_eq!(r.database.as_deref(), Some(&b"shop"[..]));
    assert_eq!(
        r.client_plugin_name.as_deref(),
        Some(&b"mysql_native_password"[..])
    );
    let scramble = Scramble::from_bytes(hex::decode_array(CAPTURED_SCRAMBLE).unwrap());
    assert_eq!(
        *r.auth_response,
        native_password::token(b"secret", &scramble)
    );
    let attrs: Vec<(String, String)> = r
        .connect_attrs
        .clone()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    let keys: Vec<&str> = attrs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "_os",
            "_client_name",
            "_pid",
            "_client_version",
            "_platform",
            "program_name",
            "_server_host"
        ]
    );
    assert!(attrs.contains(&("_client_name".into(), "libmariadb".into())));
    assert!(attrs.contains(&("program_name".into(), "mysql".into())));
    assert_eq!(r.zstd_compression_level, None);
    assert_eq!(r.to_bytes(), bytes);
}

#[test]
fn decodes_pymysql_handshake_response41() {
    let bytes = fixture("pymysql_handshake_response41.hex");
    let r = HandshakeResponse41::decode(&bytes).unwrap();
    assert_eq!(r.client_flag, 0x003a_a20d);
    assert_eq!(r.max_packet_size, 16_777_215);
    assert_eq!(r.character_set, 45);
    assert_eq!(r.reserved, [0; 23]);
    assert_eq!(r.mariadb_extended_capabilities(), None);
    assert_eq!(r.username, b"app");
    assert_eq!(r.database.as_deref(), Some(&b"shop"[..]));
    assert_eq!(
        r.client_plugin_name.as_deref(),
        Some(&b"mysql_native_password"[..])
    );
    let scramble = Scramble::from_bytes(hex::decode_array(CAPTURED_SCRAMBLE).unwrap());
    assert_eq!(
        *r.auth_response,
        native_password::token(b"secret", &scramble)
    );
    let attrs = r.connect_attrs.clone().unwrap();
    assert_eq!(attrs.len(), 3);
    assert_eq!(attrs[0], (b"_client_name".to_vec(), b"pymysql".to_vec()));
    assert_eq!(attrs[1], (b"_client_version".to_vec(), b"1.2.4".to_vec()));
    assert_eq!(attrs[2].0, b"_pid");
    assert_eq!(r.to_bytes(), bytes);
}

#[test]
fn rejects_truncated_or_extended_handshake_responses() {
    for name in [
        "mariadb_cli_handshake_response41.hex",
        "pymysql_handshake_response41.hex",
    ] {
        let bytes = fixture(name);
        assert_every_prefix_rejected(&bytes, HandshakeResponse41::decode);
        assert_trailing_rejected(&bytes, HandshakeResponse41::decode);
    }
}

#[test]
fn rejects_pre_41_login() {
    let mut bytes = fixture("pymysql_handshake_response41.hex");
    bytes[1] &= !0x02; // clear CLIENT_PROTOCOL_41 (0x200)
    assert_eq!(
        HandshakeResponse41::decode(&bytes).unwrap_err(),
        DecodeError::InvalidValue("client_flag")
    );
}

#[test]
fn decodes_mariadb_ok_after_login() {
    let bytes = fixture("mariadb_ok_after_login.hex");
    let caps = 0x000a_a20d;
    let ok = OkPacket::decode(&bytes, caps).unwrap();
    assert_eq!(
        ok,
        OkPacket {
            affected_rows: 0,
            last_insert_id: 0,
            status_flags: SERVER_STATUS_AUTOCOMMIT,
            warnings: 0,
            info: vec![],
            session_state_info: None,
        }
    );
    let mut out = Vec::new();
    ok.encode(&mut out, caps);
    assert_eq!(out, bytes);
    // Every prefix that cuts a fixed field is refused (info is string<EOF>: none here).
    assert_every_prefix_rejected(&bytes, |b| OkPacket::decode(b, caps));
}

#[test]
fn decodes_mariadb_access_denied() {
    let bytes = fixture("mariadb_err_access_denied.hex");
    let err = ErrPacket::decode(&bytes).unwrap();
    assert_eq!(err.error_code, 1045);
    assert_eq!(err.sql_state, Some(*b"28000"));
    assert_eq!(
        err.error_message,
        b"Access denied for user 'app'@'localhost' (using password: YES)"
    );
    assert_eq!(err.to_bytes(), bytes);
    // Prefixes that cut the header, code or SQLSTATE are refused; the message is
    // string<EOF>, so a shorter message is a different (valid) packet.
    for n in 0..9 {
        assert!(
            ErrPacket::decode(&bytes[..n]).is_err() || n == 3,
            "prefix {n}"
        );
    }
    // Three bytes is an ERR without SQLSTATE (as sent in place of a greeting).
    assert_eq!(ErrPacket::decode(&bytes[..3]).unwrap().sql_state, None);
}

#[test]
fn decodes_mariadb_auth_switch_to_ed25519() {
    let bytes = fixture("mariadb_auth_switch_request.hex");
    let sw = AuthSwitchRequest::decode(&bytes).unwrap();
    assert_eq!(sw.plugin_name, b"client_ed25519");
    assert_eq!(
        sw.plugin_data.len(),
        32,
        "ed25519 nonce has no trailing NUL"
    );
    assert_eq!(sw.scramble(), None, "not a 20-byte scramble");
    let mut out = Vec::new();
    sw.encode(&mut out);
    assert_eq!(out, bytes);
    // Every prefix that cuts the header or the plugin name is refused.
    for n in 0..=b"client_ed25519".len() + 1 {
        assert!(
            AuthSwitchRequest::decode(&bytes[..n]).is_err(),
            "prefix {n}"
        );
    }
}

#[test]
fn encodes_native_switch_with_exactly_21_bytes_of_data() {
    let scramble = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
    let sw =
        AuthSwitchRequest::for_scramble(authplugin::AuthPlugin::MysqlNativePassword, &scramble);
    let mut out = Vec::new();
    sw.encode(&mut out);
    assert_eq!(
        out,
        [
            &[0xFE][..],
            b"mysql_native_password\0",
            b"abcdefghijklmnopqrst\0"
        ]
        .concat()
    );
    assert_eq!(
        AuthSwitchRequest::decode(&out).unwrap().scramble(),
        Some(scramble)
    );
}

#[test]
fn ssl_request_is_told_apart_from_a_login() {
    let login = fixture("mariadb_cli_handshake_response41.hex");
    // An SSLRequest is the login's first 32 bytes with CLIENT_SSL set.
    let mut ssl = login[..32].to_vec();
    ssl[1] |= 0x08;
    let req = SslRequest::decode(&ssl).unwrap();
    assert_ne!(req.client_flag & CLIENT_SSL, 0);
    assert_eq!(req.character_set, 33);
    let mut out = Vec::new();
    req.encode(&mut out);
    assert_eq!(out, ssl);
    assert!(!SslRequest::matches(&login));
    assert!(!SslRequest::matches(&login[..32]), "no CLIENT_SSL");
    assert_every_prefix_rejected(&ssl, SslRequest::decode);
    assert_trailing_rejected(&ssl, SslRequest::decode);
}

#[test]
fn decodes_login_by_the_flags_both_sides_have() {
    // libmariadb keeps CLIENT_CONNECT_ATTRS in client_flag but sends no attributes to a server
    // that lacks the flag (server-shim): fields follow client_flag & server capabilities.
    let bytes = fixture("mariadb_cli_handshake_response41_lean_server.hex");
    let server_caps = CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | CLIENT_CONNECT_WITH_DB
        | CLIENT_DEPRECATE_EOF;
    assert!(HandshakeResponse41::decode(&bytes).is_err());
    let r = HandshakeResponse41::decode_for_server(&bytes, server_caps).unwrap();
    assert_eq!(r.client_flag, 0x00bf_a284, "client_flag is kept as sent");
    assert_ne!(r.client_flag & CLIENT_CONNECT_ATTRS, 0);
    assert_eq!(r.effective_flags(server_caps) & CLIENT_CONNECT_ATTRS, 0);
    assert_eq!(r.connect_attrs, None);
    assert_eq!(r.database, None);
    assert_eq!(r.username, b"app");
    let scramble = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
    assert_eq!(
        *r.auth_response,
        native_password::token(b"secret", &scramble)
    );
    let mut out = Vec::new();
    r.encode_for_server(&mut out, server_caps);
    assert_eq!(out, bytes);
    assert_every_prefix_rejected(&bytes, |b| {
        HandshakeResponse41::decode_for_server(b, server_caps)
    });
    // The client set CLIENT_CONNECT_ATTRS, so one attribute block after the plugin name is
    // tolerated (see the mysql-connector-python fixture); anything more is refused.
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0, 0]);
    assert_eq!(
        HandshakeResponse41::decode_for_server(&longer, server_caps).unwrap_err(),
        DecodeError::TrailingBytes(1)
    );
}

#[test]
fn tolerates_connect_attrs_the_server_did_not_offer() {
    // mysql-connector-python sends its attributes even to a server without
    // CLIENT_CONNECT_ATTRS (captured against a server-shim greeting).
    let bytes = fixture("mysql_connector_python_handshake_response41_unoffered_attrs.hex");
    let server_caps = CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | CLIENT_CONNECT_WITH_DB
        | CLIENT_DEPRECATE_EOF;
    let r = HandshakeResponse41::decode_for_server(&bytes, server_caps).unwrap();
    assert_eq!(r.client_flag, 0x003b_a20d);
    assert_eq!(r.username, b"app");
    assert_eq!(r.database.as_deref(), Some(&b""[..]));
    let attrs = r.connect_attrs.clone().unwrap();
    assert!(attrs.contains(&(b"_client_name".to_vec(), b"mysql-connector-python".to_vec())));
    let scramble = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
    assert_eq!(
        *r.auth_response,
        native_password::token(b"secret", &scramble)
    );
    // Cutting anywhere inside the fields the flags call for, or inside the attribute block,
    // is still refused; only the cut exactly before the (unoffered) block decodes.
    let before_attrs = bytes.len() - 1 - 141;
    for n in (0..bytes.len()).filter(|&n| n != before_attrs) {
        assert!(
            HandshakeResponse41::decode_for_server(&bytes[..n], server_caps).is_err(),
            "prefix {n}"
        );
    }
    assert_trailing_rejected(&bytes, |b| {
        HandshakeResponse41::decode_for_server(b, server_caps)
    });
}

/// Found by fuzzing (`handshake_response41_decode`, 2026-12-01): a client that sets
/// CLIENT_CONNECT_ATTRS to a server without it (the mysql-connector-python quirk) while zstd
/// compression is negotiated. The quirk used to read the zstd level byte as an attribute
/// block, and the re-encoded login did not decode.
#[test]
fn connect_attrs_quirk_leaves_the_zstd_level_alone() {
    let server: u32 = 0xff68_fe0d;
    let login: [u8; 37] = [
        0xf6, 0xff, 0xff, 0xff, 0xff, 0x8c, 0xa2, 0xfb, 0x00, 0xbf, 0x00, 0x00, 0x10, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xdf,
        0x00, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let r = HandshakeResponse41::decode_for_server(&login, server).unwrap();
    assert_eq!(r.connect_attrs, Some(Vec::new()));
    assert_eq!(r.zstd_compression_level, Some(0));
    let mut again = Vec::new();
    r.encode_for_server(&mut again, server);
    assert_eq!(again, login);
    assert_eq!(
        HandshakeResponse41::decode_for_server(&again, server).unwrap(),
        r
    );
    // With only the zstd level left, there is no attribute block to read.
    let short = &login[..login.len() - 1];
    let r = HandshakeResponse41::decode_for_server(short, server).unwrap();
    assert_eq!((r.connect_attrs, r.zstd_compression_level), (None, Some(0)));
}
