//! P1/P2 and classification over in-memory streams.

use std::time::Duration;

use authplugin::packet::capabilities::*;
use authplugin::packet::{
    AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10, parse_packet, write_packet,
};
use authplugin::{AuthPlugin, Scramble, native_password};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use zeroize::Zeroizing;

use super::*;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::perceptron::outcome::Classification;
use crate::profile::ComputeProfile;

fn scramble() -> Scramble {
    Scramble::from_bytes(*b"abcdefghijklmnopqrst")
}

fn response(plugin: &str, answer: Vec<u8>, user: &str) -> HandshakeResponse41 {
    HandshakeResponse41 {
        client_flag: CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_WITH_DB,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: user.as_bytes().to_vec(),
        auth_response: Zeroizing::new(answer),
        database: Some(b"shop".to_vec()),
        client_plugin_name: Some(plugin.as_bytes().to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    }
}

/// A connection that did not produce a usable login, and the sequence id an ERR to it would
/// carry.
#[derive(Debug)]
struct NotALogin {
    class: Classification,
    next_sequence_id: u8,
}

/// Runs the login phase against a scripted client; returns the result and everything the
/// relay wrote.
async fn run<F, Fut>(client: F) -> (Result<ClientLogin, NotALogin>, Vec<u8>)
where
    F: FnOnce(DuplexStream) -> Fut,
    Fut: std::future::Future<Output = DuplexStream> + Send + 'static,
{
    let (relay_side, client_side) = tokio::io::duplex(1 << 16);
    let script = tokio::spawn(client(client_side));
    let greeting = ComputeProfile::server_shim_default().greeting(7, &scramble());
    let mut ps = PacketStream::new(ClientStream::Plain(relay_side), MAX_LOGIN_PACKET_LEN);
    let r = greet_and_read_login(
        &mut ps,
        &greeting,
        &scramble(),
        Duration::from_secs(5),
        Answers::CheckableAgainstA,
        None,
    )
    .await
    .map_err(|class| NotALogin {
        class,
        next_sequence_id: ps.next_sequence_id(),
    });
    drop(ps);
    let mut client_side = script.await.unwrap();
    let mut written = Vec::new();
    let _ = client_side.read_to_end(&mut written).await;
    (r, written)
}

async fn read_greeting(s: &mut DuplexStream) -> HandshakeV10 {
    let mut buf = Vec::new();
    loop {
        let mut b = [0u8; 256];
        let n = s.read(&mut b).await.unwrap();
        buf.extend_from_slice(&b[..n]);
        if let Some((p, _)) = parse_packet(&buf, 1 << 16).unwrap() {
            assert_eq!(p.sequence_id, 0);
            return HandshakeV10::decode(&p.payload).unwrap();
        }
    }
}

async fn send(s: &mut DuplexStream, seq: u8, payload: &[u8]) {
    let mut out = Vec::new();
    write_packet(&mut out, seq, payload);
    s.write_all(&out).await.unwrap();
}

#[tokio::test]
async fn accepts_native_login_without_switch() {
    let (r, _) = run(|mut s| async move {
        let g = read_greeting(&mut s).await;
        let answer = native_password::token(b"pw", &g.scramble().unwrap());
        send(
            &mut s,
            1,
            &response("mysql_native_password", answer, "app").to_bytes(),
        )
        .await;
        s
    })
    .await;
    let login = r.unwrap();
    assert_eq!(login.plugin, AuthPlugin::MysqlNativePassword);
    assert_eq!(login.response.username, b"app");
    assert_eq!(*login.answer, native_password::token(b"pw", &scramble()));
    assert_eq!(login.last_sequence_id, 1);
}

/// A client that claims MariaDB extended capabilities the greeting did not offer (server-shim's
/// offers none) keeps none of them: its login then cannot fail on them at the compute.
#[tokio::test]
async fn keeps_only_the_mariadb_capabilities_the_greeting_offered() {
    let (r, _) = run(|mut s| async move {
        let g = read_greeting(&mut s).await;
        let mut login = response(
            "mysql_native_password",
            native_password::token(b"pw", &g.scramble().unwrap()),
            "app",
        );
        login.client_flag &= !CLIENT_MYSQL_MARIADB;
        login.reserved[19..].copy_from_slice(&0x0000_000cu32.to_le_bytes());
        send(&mut s, 1, &login.to_bytes()).await;
        s
    })
    .await;
    let login = r.unwrap();
    assert_eq!(login.response.mariadb_extended_capabilities(), Some(0));
}

#[tokio::test]
async fn switches_once_to_native_for_other_plugins() {
    let (r, _) = run(|mut s| async move {
        let _ = read_greeting(&mut s).await;
        send(
            &mut s,
            1,
            &response("client_ed25519", vec![9; 64], "app").to_bytes(),
        )
        .await;
        // Expect the switch at seq 2, answer at seq 3.
        let mut buf = Vec::new();
        let switch = loop {
            let mut b = [0u8; 256];
            let n = s.read(&mut b).await.unwrap();
            buf.extend_from_slice(&b[..n]);
            if let Some((p, _)) = parse_packet(&buf, 1 << 16).unwrap() {
                break p;
            }
        };
        assert_eq!(switch.sequence_id, 2);
        let req = AuthSwitchRequest::decode(&switch.payload).unwrap();
        assert_eq!(req.plugin_name, b"mysql_native_password");
        let sc = req.scramble().unwrap();
        send(&mut s, 3, &native_password::token(b"pw", &sc)).await;
        s
    })
    .await;
    let login = r.unwrap();
    assert_eq!(login.plugin, AuthPlugin::MysqlNativePassword);
    assert_eq!(login.last_sequence_id, 3);
    assert_eq!(*login.answer, native_password::token(b"pw", &scramble()));
}

async fn classify(bytes: &'static [u8], close: bool) -> NotALogin {
    let (r, _) = run(move |mut s| async move {
        let _ = read_greeting(&mut s).await;
        s.write_all(bytes).await.unwrap();
        if close {
            s.shutdown().await.unwrap();
        }
        s
    })
    .await;
    r.unwrap_err()
}

#[tokio::test]
async fn classifies_what_is_not_a_login() {
    assert_eq!(
        classify(b"", true).await.class,
        Classification::ClosedSilently
    );
    assert_eq!(
        classify(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false)
            .await
            .class,
        Classification::Http
    );
    assert_eq!(
        classify(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", false)
            .await
            .class,
        Classification::TlsClientHello
    );
    assert_eq!(
        classify(b"\xff\xff\x0f\x01", false).await.class,
        Classification::Oversized
    );
    assert_eq!(
        classify(b"\x05\x00\x00\x01hello", false).await.class,
        Classification::Malformed
    );
    assert_eq!(
        classify(b"\x05\x00\x00\x07hello", false).await.class,
        Classification::OutOfOrder
    );
    assert_eq!(
        classify(b"\x20\x00\x00\x01abc", true).await.class,
        Classification::ClosedMidPacket
    );
    let mut ssl = [0u8; 36];
    ssl[..4].copy_from_slice(&[32, 0, 0, 1]);
    ssl[4..8].copy_from_slice(&(CLIENT_PROTOCOL_41 | CLIENT_SSL).to_le_bytes());
    let ssl: &'static [u8] = Box::leak(Box::new(ssl));
    let n = classify(ssl, false).await;
    assert_eq!(n.class, Classification::SslRequest);
    assert_eq!(n.next_sequence_id, 2);
}

#[tokio::test]
async fn refuses_login_without_user() {
    let (r, _) = run(|mut s| async move {
        let _ = read_greeting(&mut s).await;
        send(
            &mut s,
            1,
            &response("mysql_native_password", vec![], "").to_bytes(),
        )
        .await;
        s
    })
    .await;
    assert_eq!(r.unwrap_err().class, Classification::EmptyUser);
}

/// mysql-connector-python's `compress=True` sets `CLIENT_COMPRESS` whatever the greeting
/// offered, then compresses: refused at the login, with its reason. Before: the relay read
/// its compressed frames as packets and the client waited for an answer forever.
#[tokio::test]
async fn refuses_a_login_that_asks_for_compression_it_was_not_offered() {
    let (r, _) = run(|mut s| async move {
        let _ = read_greeting(&mut s).await;
        let mut login = response("mysql_native_password", vec![1; 20], "app");
        login.client_flag |= CLIENT_COMPRESS;
        send(&mut s, 1, &login.to_bytes()).await;
        s
    })
    .await;
    let class = r.unwrap_err().class;
    assert_eq!(class, Classification::CompressionUnoffered);
    let err = ErrPacket::decode(&class.client_error("1.1.1.1:1").unwrap().to_bytes()).unwrap();
    assert_eq!(err.error_code, 1043);
    assert!(String::from_utf8_lossy(&err.error_message).contains("compress"));
}

#[tokio::test(start_paused = true)]
async fn times_out_a_silent_client() {
    let (r, _) = run(|mut s| async move {
        let _ = read_greeting(&mut s).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        s
    })
    .await;
    let n = r.unwrap_err();
    assert_eq!(n.class, Classification::HandshakeTimeout);
    assert_eq!(n.next_sequence_id, 1);
    let err = n.class.client_error("1.1.1.1:1").unwrap();
    assert_eq!(ErrPacket::decode(&err.to_bytes()).unwrap().error_code, 1159);
}

#[test]
fn first_packet_tells_an_invited_ssl_request_from_a_login() {
    // libmariadb's SSLRequest: CLIENT_SSL among its usual flags, 16 MiB, utf8mb4, no filler.
    let ssl: [u8; 32] = [
        0x84, 0xae, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(first_packet(1, &ssl, true), Ok(FirstPacket::StartTls));
    assert_eq!(
        first_packet(1, &ssl, false),
        Err(Classification::SslRequest)
    );
    assert_eq!(first_packet(2, &ssl, true), Err(Classification::OutOfOrder));
    let mut without_ssl = ssl;
    without_ssl[1] &= !0x08;
    assert_eq!(first_packet(1, &without_ssl, true), Ok(FirstPacket::Login));
    // One byte more is a (truncated) login, not an SSLRequest.
    let mut longer = ssl.to_vec();
    longer.push(0);
    assert_eq!(first_packet(1, &longer, true), Ok(FirstPacket::Login));
}
