//! Property-based round trips: whatever a well-formed value holds, encode then decode gives
//! it back; and no input, however random, makes a decoder panic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use authplugin::identity::{KeyId, KeySecret, PerceptronKey};
use authplugin::packet::capabilities::*;
use authplugin::packet::{
    AuthMoreData, AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10, OkPacket,
    parse_packet, write_packet,
};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{AuthPlugin, Scramble};
use proptest::prelude::*;
use zeroize::Zeroizing;

fn no_nul(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(1u8..=255, 0..max)
}

fn any_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn optional_flags() -> impl Strategy<Value = u32> {
    // The flags that decide which HandshakeResponse41 fields exist.
    proptest::bits::u32::masked(
        CLIENT_CONNECT_WITH_DB
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_ATTRS
            | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CLIENT_SECURE_CONNECTION
            | CLIENT_ZSTD_COMPRESSION_ALGORITHM
            | CLIENT_MYSQL_MARIADB
            | CLIENT_SSL,
    )
}

prop_compose! {
    fn handshake_response()(
        flags in optional_flags(),
        max_packet_size in any::<u32>(),
        character_set in any::<u8>(),
        reserved in any::<[u8; 23]>(),
        username in no_nul(40),
        answer_lenenc in any_bytes(300),
        answer_short in any_bytes(255),
        answer_nul in no_nul(40),
        database in no_nul(40),
        plugin in no_nul(30),
        attrs in proptest::collection::vec((any_bytes(30), any_bytes(300)), 0..6),
        zstd in any::<u8>(),
    ) -> HandshakeResponse41 {
        let client_flag = flags | CLIENT_PROTOCOL_41;
        let auth_response = if flags & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            answer_lenenc
        } else if flags & CLIENT_SECURE_CONNECTION != 0 {
            answer_short
        } else {
            answer_nul
        };
        HandshakeResponse41 {
            client_flag,
            max_packet_size,
            character_set,
            reserved,
            username,
            auth_response: Zeroizing::new(auth_response),
            database: (flags & CLIENT_CONNECT_WITH_DB != 0).then_some(database),
            client_plugin_name: (flags & CLIENT_PLUGIN_AUTH != 0).then_some(plugin),
            connect_attrs: (flags & CLIENT_CONNECT_ATTRS != 0).then_some(attrs),
            zstd_compression_level: (flags & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0).then_some(zstd),
        }
    }
}

prop_compose! {
    fn greeting()(
        server_version in no_nul(60),
        connection_id in any::<u32>(),
        scramble in any::<[u8; 20]>(),
        flags in any::<u32>(),
        character_set in any::<u8>(),
        status_flags in any::<u16>(),
        plugin in "[a-z_]{1,30}",
    ) -> HandshakeV10 {
        HandshakeV10::new(
            server_version,
            connection_id,
            &Scramble::from_bytes(scramble),
            flags,
            character_set,
            status_flags,
            &plugin,
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn round_trips_handshake_response41(r in handshake_response()) {
        let bytes = r.to_bytes();
        prop_assert_eq!(HandshakeResponse41::decode(&bytes).unwrap(), r);
        // And every prefix of it is refused.
        for n in 0..bytes.len() {
            prop_assert!(HandshakeResponse41::decode(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn round_trips_handshake_v10(g in greeting()) {
        let bytes = g.to_bytes();
        let decoded = HandshakeV10::decode(&bytes).unwrap();
        prop_assert_eq!(decoded.scramble(), g.scramble());
        prop_assert_eq!(&decoded, &g);
        for n in 0..bytes.len() {
            prop_assert!(HandshakeV10::decode(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn round_trips_ok_packet(
        affected_rows in any::<u64>(),
        last_insert_id in any::<u64>(),
        status_flags in any::<u16>(),
        warnings in any::<u16>(),
        info in any_bytes(300),
        state in any_bytes(50),
        session_track in any::<bool>(),
    ) {
        let caps = if session_track { CLIENT_SESSION_TRACK } else { 0 };
        let has_state = session_track && status_flags & SERVER_SESSION_STATE_CHANGED != 0;
        let ok = OkPacket {
            affected_rows,
            last_insert_id,
            status_flags,
            warnings,
            info,
            session_state_info: has_state.then_some(state),
        };
        let mut out = Vec::new();
        ok.encode(&mut out, caps);
        prop_assert_eq!(OkPacket::decode(&out, caps).unwrap(), ok);
    }

    #[test]
    fn round_trips_err_packet(code in any::<u16>(), state in "[0-9A-Z]{5}", msg in "[^#].{0,200}") {
        let err = ErrPacket::new(code, state.as_bytes().try_into().unwrap(), &msg);
        prop_assert_eq!(ErrPacket::decode(&err.to_bytes()).unwrap(), err);
    }

    #[test]
    fn round_trips_auth_switch_and_more_data(name in no_nul(40), data in any_bytes(100)) {
        let sw = AuthSwitchRequest { plugin_name: name, plugin_data: data.clone() };
        let mut out = Vec::new();
        sw.encode(&mut out);
        prop_assert_eq!(AuthSwitchRequest::decode(&out).unwrap(), sw);
        let more = AuthMoreData { data };
        let mut out = Vec::new();
        more.encode(&mut out);
        prop_assert_eq!(AuthMoreData::decode(&out).unwrap(), more);
    }

    #[test]
    fn round_trips_framing(payload in any_bytes(2000), seq in any::<u8>()) {
        let mut out = Vec::new();
        write_packet(&mut out, seq, &payload);
        let (p, used) = parse_packet(&out, 4096).unwrap().unwrap();
        prop_assert_eq!(used, out.len());
        prop_assert_eq!(p.sequence_id, seq);
        prop_assert_eq!(p.payload, payload);
    }

    #[test]
    fn round_trips_payload(
        id in "[A-Za-z0-9._-]{1,32}",
        secret in any::<[u8; 32]>(),
        issued in any::<u64>(),
        scramble_a in any::<[u8; 20]>(),
        scramble_b in any::<[u8; 20]>(),
        answer in any_bytes(255),
        sha2 in any::<bool>(),
        addr in "[0-9a-f:.\\[\\]]{0,60}",
        user in no_nul(40),
        database in no_nul(40),
        flags in proptest::option::of(any::<u8>()),
    ) {
        let key = PerceptronKey::new(KeyId::new(&id).unwrap(), KeySecret::from_bytes(secret));
        let claim = LoginClaim {
            scramble_a: Scramble::from_bytes(scramble_a),
            answer_a: Zeroizing::new(answer),
            client_plugin: if sha2 { AuthPlugin::CachingSha2Password } else { AuthPlugin::MysqlNativePassword },
            client_addr: addr,
        };
        let sb = Scramble::from_bytes(scramble_b);
        let binding = Binding { scramble_b: &sb, user: &user, database: &database };
        let bytes = payload::encode_signed_with(&claim, &key, issued, &binding, flags).unwrap();
        let d = payload::decode(&bytes).unwrap();
        prop_assert_eq!(d.flags, flags.unwrap_or(0));
        prop_assert_eq!(d.key_id, key.id().clone());
        prop_assert_eq!(d.issued_at_ms, issued);
        prop_assert_eq!(d.scramble_a, claim.scramble_a);
        prop_assert_eq!(d.answer_a, claim.answer_a);
        prop_assert_eq!(d.client_plugin, claim.client_plugin);
        prop_assert_eq!(d.client_addr, claim.client_addr);
        prop_assert!(bytes.len() <= payload::MAX_PAYLOAD_LEN);
    }

    #[test]
    fn decoders_never_panic_on_random_input(bytes in any_bytes(400), caps in any::<u32>()) {
        let _ = HandshakeV10::decode(&bytes);
        let _ = HandshakeResponse41::decode(&bytes);
        let _ = OkPacket::decode(&bytes, caps);
        let _ = ErrPacket::decode(&bytes);
        let _ = AuthSwitchRequest::decode(&bytes);
        let _ = payload::decode(&bytes);
        let _ = authplugin::resume::decode(&bytes);
        let _ = authplugin::ticket::decode(&bytes);
        let _ = parse_packet(&bytes, 1 << 20);
    }
}
