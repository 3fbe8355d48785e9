//! The compute's proof of the key, given in the auth switch (docs/protocol.md, "In the auth
//! switch (server-shim)"): the greeting's version stays the plain one every client reads.
//!
//! A relay that wants the proof logs in with plugin `perceptron_dual_auth` and a Hello as its
//! answer. opensrv switches plugins only for an empty answer, so the reader hands opensrv
//! that login without it ([`without_hello`]) and keeps the Hello; the shim's
//! `auth_plugin_for_username` then asks for `mysql_native_password`, and the writer appends
//! the proof, bound to the Hello's nonce and the scramble, to opensrv's AuthSwitchRequest
//! ([`switch_with_proof`]). The relay answers the switch with its payload. Stock clients
//! never send a Hello and see nothing of this.

use authplugin::compute_proof::Hello;
use authplugin::payload::PLUGIN_NAME;
use zeroize::Zeroizing;

use crate::auth::{SERVER_CAPABILITIES, decode_handshake};

/// For a first packet that is a relayed login answered with a Hello: the login without its
/// answer (for opensrv) and the Hello. `None` for any other packet, which goes on as it is.
pub fn without_hello(payload: &[u8]) -> Option<(Zeroizing<Vec<u8>>, Vec<u8>)> {
    let mut login = decode_handshake(payload).ok()?;
    if login.client_plugin_name.as_deref() != Some(PLUGIN_NAME.as_bytes())
        || !Hello::is_hello(&login.auth_response)
    {
        return None;
    }
    let hello = login.auth_response.to_vec();
    login.auth_response = Zeroizing::new(Vec::new());
    let mut out = Zeroizing::new(Vec::with_capacity(payload.len()));
    login.encode_for_server(&mut out, SERVER_CAPABILITIES);
    Some((out, hello))
}

/// opensrv's AuthSwitchRequest `payload` (`0xFE`, plugin name, NUL, scramble, NUL) with
/// `proof` after it; `None` for any other packet.
pub(super) fn switch_with_proof(payload: &[u8], proof: &[u8]) -> Option<Vec<u8>> {
    if payload.first() != Some(&0xFE) {
        return None;
    }
    Some([payload, proof].concat())
}

#[cfg(test)]
mod tests {
    use authplugin::packet::HandshakeResponse41;
    use authplugin::packet::capabilities::{
        CLIENT_CONNECT_ATTRS, CLIENT_PLUGIN_AUTH, CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
        CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    };
    use authplugin::{KeyId, Scramble};

    use super::*;

    fn login(plugin: &str, answer: Vec<u8>) -> Vec<u8> {
        HandshakeResponse41 {
            client_flag: CLIENT_PROTOCOL_41
                | CLIENT_SECURE_CONNECTION
                | CLIENT_PLUGIN_AUTH
                | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
                | CLIENT_CONNECT_ATTRS,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: b"app".to_vec(),
            auth_response: Zeroizing::new(answer),
            database: None,
            client_plugin_name: Some(plugin.as_bytes().to_vec()),
            connect_attrs: Some(vec![(b"k".to_vec(), b"v".to_vec())]),
            zstd_compression_level: None,
        }
        .to_bytes()
    }

    #[test]
    fn a_relayed_login_with_a_hello_goes_on_without_it_and_nothing_else_changes() {
        let hello = Hello::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng).encode();
        let (stripped, kept) = without_hello(&login(PLUGIN_NAME, hello.clone())).unwrap();
        assert_eq!(kept, hello);
        let stripped = decode_handshake(&stripped).unwrap();
        assert!(stripped.auth_response.is_empty());
        assert_eq!(stripped.username, b"app");
        assert_eq!(
            stripped.connect_attrs,
            Some(vec![(b"k".to_vec(), b"v".to_vec())])
        );
        // A payload, a stock client's answer, garbage: untouched.
        assert!(without_hello(&login(PLUGIN_NAME, b"PCPT\x02\x02rest".to_vec())).is_none());
        assert!(without_hello(&login("mysql_native_password", hello)).is_none());
        assert!(without_hello(b"\x01\x02").is_none());
    }

    /// The reader hands opensrv the relay's login without its Hello, keeps the Hello, and
    /// hands on what followed the login untouched.
    #[tokio::test]
    async fn the_reader_hands_opensrv_the_login_without_the_hello() {
        use std::sync::Arc;

        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio_util::sync::CancellationToken;

        use crate::stream::test_support::{T, packet};
        use crate::stream::{AuthReader, ConnShared};

        let hello = Hello::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng).encode();
        let (mut relay, server) = tokio::io::duplex(4096);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let mut sent = packet(1, &login(PLUGIN_NAME, hello.clone()));
        sent.extend(packet(3, b"next"));
        relay.write_all(&sent).await.unwrap();
        let (stripped, _) = without_hello(&login(PLUGIN_NAME, hello.clone())).unwrap();
        let mut want = packet(1, &stripped);
        want.extend(packet(3, b"next"));
        let mut got = vec![0; want.len()];
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(got, want);
        assert_eq!(shared.hello(), Some(hello));
        assert_eq!(shared.first_packet().as_deref(), Some(&stripped[..]));
    }

    #[test]
    fn the_proof_follows_the_switch_and_nothing_else() {
        let scramble = Scramble::from_bytes([7; 20]);
        let mut switch = b"\xFEmysql_native_password\0".to_vec();
        switch.extend_from_slice(scramble.as_bytes());
        switch.push(0);
        assert_eq!(
            switch_with_proof(&switch, b"proof"),
            Some([&switch[..], b"proof"].concat())
        );
        assert_eq!(switch_with_proof(b"\x00\x00\x00", b"proof"), None);
    }
}
