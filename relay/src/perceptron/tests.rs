//! P1–P8 over in-memory streams: a scripted client, the relay's phases, and a scripted
//! compute behind a scripted connector. Each test asserts what the client receives and how
//! the connection ended; time-based ones run on paused time.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authplugin::compute_proof::{self, Hello, ProofError};
use authplugin::packet::capabilities::*;
use authplugin::packet::{AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10, Packet};
use authplugin::payload::{self, Binding};
use authplugin::{
    AuthPlugin, Credential, KeyId, KeyRing, PerceptronKey, ReplayGuard, Scramble, native_password,
};
use tokio::io::DuplexStream;
use zeroize::Zeroizing;

use super::*;
use crate::budgets::Budgets;
use crate::compute_conn::ConnectError;
use crate::control::driver::WakeError;
use crate::profile::{ComputeProfile, FORMAT_CHANGING};
use outcome::{Classification, ComputeError, ComputeProtocolError, ComputeStep};

const PASSWORD: &[u8] = b"app-password";
const TIMEOUT: Duration = Duration::from_secs(5);

/// Connect attempts in order: a compute-side stream, or a connect error.
struct ScriptedConnector {
    script: Mutex<VecDeque<Result<DuplexStream, io::ErrorKind>>>,
}

impl ScriptedConnector {
    fn new(script: Vec<Result<DuplexStream, io::ErrorKind>>) -> Self {
        Self {
            script: Mutex::new(script.into()),
        }
    }

    fn left(&self) -> usize {
        self.script.lock().unwrap().len()
    }
}

impl ComputeConnector for ScriptedConnector {
    type Stream = DuplexStream;

    async fn connect(&self) -> Result<DuplexStream, ConnectError> {
        let next = self.script.lock().unwrap().pop_front();
        match next.expect("connector script exhausted") {
            Ok(s) => Ok(s),
            Err(kind) => Err(ConnectError(io::Error::from(kind))),
        }
    }
}

fn runtime(auth: AuthMode) -> InstanceRuntime {
    let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    crate::in_memory::runtime(auth, KeyRing::new(vec![key]).unwrap(), TIMEOUT)
}

fn login_response(scramble_a: &Scramble, flags: u32) -> HandshakeResponse41 {
    HandshakeResponse41 {
        client_flag: CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_WITH_DB
            | flags,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: b"app".to_vec(),
        auth_response: Zeroizing::new(native_password::token(PASSWORD, scramble_a)),
        database: Some(b"shop".to_vec()),
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    }
}

/// What a scripted client does after sending its login.
#[derive(Clone, Copy)]
enum ClientScript {
    /// Reads everything until the relay closes.
    ReadAll,
    /// Answers the first packet it receives with `answer` (an auth switch or more data), then
    /// reads everything.
    AnswerOnce(&'static [u8]),
    /// Answers every AuthMoreData/AuthSwitch packet with `answer`, then reads everything.
    AnswerEach(&'static [u8]),
    /// Closes right after its login.
    Leave,
    /// Writes its login in two pieces, split before byte `k` of the framed packet, then
    /// reads everything.
    SplitLoginAt(usize),
    /// Writes its login one byte at a time, then reads everything.
    LoginByteByByte,
}

/// Logs in (native answer to scramble A, capability `flags` on top of the basics), then runs
/// `script`; returns every packet received after the greeting.
async fn client(stream: DuplexStream, flags: u32, script: ClientScript) -> Vec<Packet> {
    let mut s = PacketStream::new(stream, 1 << 20);
    let greeting = s.read_packet().await.unwrap();
    let greeting = HandshakeV10::decode(&greeting.payload).unwrap();
    let scramble_a = greeting.scramble().unwrap();
    let login = login_response(&scramble_a, flags).to_bytes();
    let cuts: Vec<usize> = match script {
        ClientScript::SplitLoginAt(k) => vec![k],
        ClientScript::LoginByteByByte => (1..login.len() + 4).collect(),
        _ => Vec::new(),
    };
    if cuts.is_empty() {
        s.write_packet(1, &login).await.unwrap();
    } else {
        use tokio::io::AsyncWriteExt as _;
        let mut framed = Vec::new();
        authplugin::packet::write_packet(&mut framed, 1, &login);
        let (mut raw, rest) = s.into_parts();
        assert!(rest.is_empty());
        let mut from = 0;
        for to in cuts.into_iter().chain([framed.len()]) {
            raw.write_all(&framed[from..to]).await.unwrap();
            // On paused time this sleep ends only once every other task is idle: the relay
            // has read this piece and waits for the rest.
            tokio::time::sleep(Duration::from_millis(1)).await;
            from = to;
        }
        s = PacketStream::new(raw, 1 << 20);
    }
    let mut received = Vec::new();
    if matches!(script, ClientScript::Leave) {
        return received;
    }
    let mut answered = false;
    while let Ok(p) = s.read_packet().await {
        let wants_answer = matches!(p.payload.first(), Some(0x01 | 0xFE))
            && p.payload.get(1..) != Some(&[0x03][..]);
        let next = p.sequence_id.wrapping_add(1);
        received.push(p);
        match script {
            ClientScript::AnswerOnce(a) if !answered => {
                answered = true;
                s.write_packet(next, a).await.unwrap();
            }
            ClientScript::AnswerEach(a) if wants_answer => {
                s.write_packet(next, a).await.unwrap();
            }
            _ => {}
        }
    }
    received
}

/// The scripted compute's side: greets with a timed scramble B and the server-shim profile,
/// proving that it holds `ring` as server-shim does (or not, as MariaDB's greeting).
struct ComputeSide {
    stream: PacketStream<DuplexStream>,
    scramble_b: Scramble,
    ring: Arc<KeyRing>,
}

impl ComputeSide {
    fn new(stream: DuplexStream, ring: Arc<KeyRing>) -> Self {
        Self {
            stream: PacketStream::new(stream, 1 << 20),
            scramble_b: Scramble::generate_timed(&mut rand::rngs::OsRng, crate::clock::now_ms()),
            ring,
        }
    }

    /// Greets as server-shim: the key proven in the server version.
    async fn greet(&mut self) {
        self.greet_with(ComputeProfile::server_shim_default()).await;
    }

    async fn greet_with(&mut self, profile: ComputeProfile) {
        let mut g = profile.greeting(42, &self.scramble_b);
        let base = String::from_utf8(g.server_version).unwrap();
        g.server_version =
            compute_proof::greeting_version(&base, &self.ring, &self.scramble_b).into_bytes();
        self.stream.write_packet(0, &g.to_bytes()).await.unwrap();
    }

    /// Greets as MariaDB: no proof in the greeting.
    async fn greet_unproven(&mut self) {
        let g = ComputeProfile::server_shim_default().greeting(42, &self.scramble_b);
        self.stream.write_packet(0, &g.to_bytes()).await.unwrap();
    }

    /// Whether the relay has sent nothing more and closed.
    async fn got_nothing_more(&mut self) -> bool {
        self.stream.read_packet().await.is_err()
    }

    async fn read_login(&mut self) -> HandshakeResponse41 {
        let p = self.stream.read_packet().await.unwrap();
        assert_eq!(p.sequence_id, 1);
        let caps = ComputeProfile::server_shim_default().capability_flags;
        HandshakeResponse41::decode_for_server(&p.payload, caps).unwrap()
    }

    async fn send(&mut self, seq: u8, payload: &[u8]) {
        self.stream.write_packet(seq, payload).await.unwrap();
    }

    /// The server's AuthSwitchRequest for `plugin` with scramble B, at sequence id `seq`.
    async fn switch_to_at(&mut self, seq: u8, plugin: AuthPlugin) {
        let mut out = Vec::new();
        AuthSwitchRequest::for_scramble(plugin, &self.scramble_b).encode(&mut out);
        self.send(seq, &out).await;
    }

    /// The server's first AuthSwitchRequest (sequence id 2).
    async fn switch_to(&mut self, plugin: AuthPlugin) {
        self.switch_to_at(2, plugin).await;
    }

    /// Verifies a dual login as server-shim would, against `ring`.
    fn verify(&self, p6: &HandshakeResponse41, ring: &KeyRing) -> bool {
        let binding = Binding {
            scramble_b: &self.scramble_b,
            user: &p6.username,
            database: p6.database.as_deref().unwrap_or_default(),
        };
        let mut replay = ReplayGuard::new(60_000, 16);
        payload::verify(
            &p6.auth_response,
            &binding,
            ring,
            &mut replay,
            crate::clock::now_ms(),
            Some(&Credential::from_password(PASSWORD)),
        )
        .is_ok()
    }
}

fn ok_packet() -> Vec<u8> {
    vec![0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]
}

fn denied() -> Vec<u8> {
    ErrPacket::new(1045, b"28000", "Access denied for user 'app'").to_bytes()
}

struct Run {
    /// The user and the compute's verdict, or how the connection ended.
    result: Result<(Vec<u8>, Verdict), PerceptronError>,
    /// Every packet the client received after the greeting.
    client_got: Vec<Packet>,
    /// Connect attempts the connector still had.
    connects_left: usize,
}

/// One connection through `establish`: the client runs `client_script`, the compute side runs
/// `compute` on the first connect that the `connects` script lets through.
async fn run<F, Fut>(
    rt: &InstanceRuntime,
    flags: u32,
    client_script: ClientScript,
    connects: Vec<Option<io::ErrorKind>>,
    compute: F,
) -> Run
where
    F: FnOnce(ComputeSide) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut compute_task = None;
    let mut script = Vec::new();
    let mut compute = Some(compute);
    for c in connects {
        match c {
            Some(kind) => script.push(Err(kind)),
            None => {
                let (relay_end, compute_end) = tokio::io::duplex(1 << 16);
                let f = compute.take().expect("one compute per run");
                let side = ComputeSide::new(compute_end, rt.ring.current());
                compute_task = Some(tokio::spawn(f(side)));
                script.push(Ok(relay_end));
            }
        }
    }
    let connector = ScriptedConnector::new(script);
    let (relay_end, client_end) = tokio::io::duplex(1 << 16);
    let client_task = tokio::spawn(client(client_end, flags, client_script));
    let mut stream = PacketStream::new(ClientStream::Plain(relay_end), MAX_LOGIN_PACKET_LEN);
    let peer: SocketAddr = "10.0.0.7:5000".parse().unwrap();
    let result = establish(rt, &mut stream, peer, &connector, None, None).await;
    drop(stream);
    // The relay's end of the compute goes too, so the scripted compute sees the close.
    let result = result.map(|e| {
        let (_, rest) = e.compute.into_parts();
        assert!(rest.is_empty(), "bytes left over after the login");
        (e.user, e.verdict)
    });
    let client_got = client_task.await.unwrap();
    if let Some(t) = compute_task {
        t.await.unwrap();
    }
    Run {
        result,
        client_got,
        connects_left: connector.left(),
    }
}

fn err_of(p: &Packet) -> ErrPacket {
    ErrPacket::decode(&p.payload).unwrap()
}

fn compute_error(r: &Run) -> &ComputeError {
    match &r.result {
        Err(PerceptronError::Compute(e)) => e,
        other => panic!("expected a compute error, got {other:?}"),
    }
}

/// The ERR every compute failure gives the client: 1053, retry.
fn assert_unavailable(r: &Run) {
    assert_eq!(r.client_got.len(), 1, "{:?}", r.client_got);
    let p = &r.client_got[0];
    assert_eq!(p.sequence_id, 2);
    let e = err_of(p);
    assert_eq!(e.error_code, 1053);
    assert_eq!(e.sql_state, Some(*b"08S01"));
    assert_eq!(e.error_message, b"Instance 't' failed during login. Retry");
}

// ---- dual mode ----

#[tokio::test]
async fn dual_login_reaches_the_client_as_the_computes_ok() {
    let rt = runtime(AuthMode::Dual);
    let ring = rt.ring.current();
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let p6 = c.read_login().await;
            assert_eq!(p6.username, b"app");
            assert_eq!(p6.database.as_deref(), Some(&b"shop"[..]));
            assert_eq!(
                p6.client_plugin_name.as_deref(),
                Some(payload::PLUGIN_NAME.as_bytes())
            );
            assert!(c.verify(&p6, &ring), "the compute must accept the payload");
            // The id the client was greeted with, from the relay's half of the id space.
            let id = p6
                .connect_attrs
                .iter()
                .flatten()
                .find(|(k, _)| k.as_slice() == compute_leg::CONNECTION_ID_ATTR.as_bytes())
                .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u32>().ok())
                .unwrap();
            assert_ne!(id & crate::runtime::RELAY_CONNECTION_IDS, 0, "{id}");
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    let (user, verdict) = r.result.as_ref().unwrap();
    assert!(verdict.accepted());
    assert_eq!(user, b"app");
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(r.client_got[0].sequence_id, 2);
    assert_eq!(r.client_got[0].payload, ok_packet());
}

#[tokio::test]
async fn dual_login_denied_by_the_compute_reaches_the_client_as_its_err() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, &denied()).await;
        },
    )
    .await;
    assert!(!r.result.as_ref().unwrap().1.accepted());
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(r.client_got[0].sequence_id, 2);
    assert_eq!(err_of(&r.client_got[0]).error_code, 1045);
}

/// The relay's login parser (P2) gets the client's login in two pieces, split at every byte
/// boundary of the framed packet (inside the header, between header and payload, inside
/// every field), and in one-byte pieces; each must be relayed and accepted exactly as an
/// unsplit one. Paused time makes each piece arrive, and be read, on its own.
#[tokio::test(start_paused = true)]
async fn a_login_split_at_every_byte_boundary_is_relayed() {
    let rt = runtime(AuthMode::Dual);
    let framed_len = {
        let login = login_response(&Scramble::from_bytes([7; 20]), 0).to_bytes();
        login.len() + 4
    };
    let scripts = (1..framed_len)
        .map(ClientScript::SplitLoginAt)
        .chain([ClientScript::LoginByteByByte]);
    for script in scripts {
        let ring = rt.ring.current();
        let r = run(&rt, 0, script, vec![None], |mut c| async move {
            c.greet().await;
            let p6 = c.read_login().await;
            assert_eq!(p6.username, b"app");
            assert_eq!(p6.database.as_deref(), Some(&b"shop"[..]));
            assert!(c.verify(&p6, &ring), "the compute must accept the payload");
            c.send(2, &ok_packet()).await;
        })
        .await;
        let cut = match script {
            ClientScript::SplitLoginAt(k) => format!("split at {k}"),
            _ => "byte by byte".to_owned(),
        };
        let (user, verdict) = r.result.as_ref().unwrap_or_else(|e| panic!("{cut}: {e}"));
        assert!(verdict.accepted(), "{cut}");
        assert_eq!(user, b"app", "{cut}");
        assert_eq!(r.client_got.len(), 1, "{cut}");
        assert_eq!(r.client_got[0].payload, ok_packet(), "{cut}");
    }
}

#[tokio::test(start_paused = true)]
async fn retries_connect_while_the_compute_is_not_listening() {
    let rt = runtime(AuthMode::Dual);
    let refused = Some(io::ErrorKind::ConnectionRefused);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![refused, refused, None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    assert!(r.result.unwrap().1.accepted());
    assert_eq!(r.connects_left, 0);
}

#[tokio::test(start_paused = true)]
async fn never_retries_a_connect_error_that_would_repeat() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![Some(io::ErrorKind::PermissionDenied), None],
        |_| async {},
    )
    .await;
    assert!(matches!(compute_error(&r), ComputeError::Connect(_)));
    assert_eq!(r.connects_left, 1, "a second attempt was made");
    assert_unavailable(&r);
}

#[tokio::test(start_paused = true)]
async fn gives_up_connecting_at_the_deadline() {
    let rt = runtime(AuthMode::Dual);
    // More refusals than fit in compute_timeout at the readiness backoff.
    let connects = vec![Some(io::ErrorKind::ConnectionRefused); 500];
    let r = run(&rt, 0, ClientScript::ReadAll, connects, |_| async {}).await;
    assert!(matches!(compute_error(&r), ComputeError::Connect(_)));
    assert!(r.connects_left > 0);
    assert_unavailable(&r);
}

#[tokio::test]
async fn compute_closing_before_its_greeting_is_a_lost_compute() {
    let rt = runtime(AuthMode::Dual);
    let r = run(&rt, 0, ClientScript::ReadAll, vec![None], |c| async move {
        drop(c);
    })
    .await;
    assert!(matches!(compute_error(&r), ComputeError::Lost(_)));
    assert_eq!(r.result.as_ref().unwrap_err().label(), "compute_lost");
    assert_unavailable(&r);
}

#[tokio::test]
async fn garbage_greeting_is_a_protocol_error() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.send(0, b"\x09not a greeting").await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::BadGreeting(_))
    ));
    assert_eq!(r.result.as_ref().unwrap_err().label(), "compute_protocol");
    assert_unavailable(&r);
}

#[tokio::test]
async fn compute_closing_mid_reply_is_a_lost_compute() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            // A header announcing 7 bytes, then two of them, then the close.
            let (mut stream, _) = c.stream.into_parts();
            tokio::io::AsyncWriteExt::write_all(&mut stream, &[7, 0, 0, 2, 0, 0])
                .await
                .unwrap();
        },
    )
    .await;
    assert!(matches!(compute_error(&r), ComputeError::Lost(_)));
    assert_unavailable(&r);
}

#[tokio::test]
async fn reply_with_the_wrong_sequence_id_is_a_protocol_error() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.send(3, &ok_packet()).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::OutOfOrder {
            expected: 2,
            actual: 3
        })
    ));
    assert_unavailable(&r);
}

/// MariaDB greets without a proof, and its `perceptron_dual` plugin challenges with its own
/// scramble in an AuthSwitchRequest (sequence id 2). The relay's P6 and its answer to the
/// challenge (3) are a Hello; the plugin proves the key over the Hello's nonce and its
/// challenge (4); only then does the relay send the payload bound to that challenge (5), and
/// the verdict follows (6).
#[tokio::test]
async fn dual_login_answers_the_computes_own_challenge_after_its_proof() {
    let rt = runtime(AuthMode::Dual);
    let ring = rt.ring.current();
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_unproven().await;
            let p6 = c.read_login().await;
            assert!(
                Hello::decode(&p6.auth_response).is_ok(),
                "an unproven compute gets a Hello, not the client's answer"
            );
            c.scramble_b = Scramble::from_bytes(*b"CCCCCCCCCCCCCCCCCCCC");
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let hello = c.stream.read_packet().await.unwrap();
            assert_eq!(hello.sequence_id, 3);
            let hello = Hello::decode(&hello.payload).unwrap();
            assert_eq!(&hello.key_id, ring.signing_key().id());
            let proof = hello.prove(&c.scramble_b, &ring);
            c.send(4, &proof).await;
            let answer = c.stream.read_packet().await.unwrap();
            assert_eq!(answer.sequence_id, 5);
            let mut p6_for_c = p6.clone();
            p6_for_c.auth_response = zeroize::Zeroizing::new(answer.payload);
            assert!(
                c.verify(&p6_for_c, &ring),
                "the payload must be bound to the new challenge"
            );
            c.send(6, &ok_packet()).await;
        },
    )
    .await;
    let (_, verdict) = r.result.as_ref().unwrap();
    assert!(verdict.accepted());
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(r.client_got[0].sequence_id, 2);
    assert_eq!(r.client_got[0].payload, ok_packet());
}

/// A stock native plugin (the account is not on perceptron_dual, or does not exist) switches
/// with the greeting's own scramble: the relay answers with a token that cannot match, so the
/// server finishes with its ordinary 1045 instead of "bad handshake".
#[tokio::test]
async fn a_stock_native_challenge_in_dual_mode_ends_as_the_servers_denial() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_unproven().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let answer = c.stream.read_packet().await.unwrap();
            assert_eq!(answer.sequence_id, 3);
            assert_eq!(
                answer.payload.len(),
                20,
                "a native-sized token, not a payload"
            );
            assert!(!answer.payload.starts_with(&payload::MAGIC));
            c.send(4, &denied()).await;
        },
    )
    .await;
    assert!(!r.result.as_ref().unwrap().1.accepted());
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(err_of(&r.client_got[0]).error_code, 1045);
}

#[tokio::test]
async fn a_dual_challenge_for_another_plugin_is_a_protocol_error() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::CachingSha2Password).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::UnanswerableAuthSwitch)
    ));
    assert_unavailable(&r);
}

#[tokio::test]
async fn a_second_dual_challenge_is_a_protocol_error() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let _ = c.stream.read_packet().await.unwrap();
            c.switch_to_at(4, AuthPlugin::MysqlNativePassword).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::SecondAuthSwitch)
    ));
    assert_unavailable(&r);
}

/// Whatever greets without a proof and accepts the Hello gets no client: the relay never sent
/// it scramble A or the client's answer, and refuses the session it offers.
#[tokio::test]
async fn an_unproven_compute_that_accepts_the_hello_gets_no_client() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_unproven().await;
            let p6 = c.read_login().await;
            assert!(Hello::decode(&p6.auth_response).is_ok());
            c.send(2, &ok_packet()).await;
            assert!(c.got_nothing_more().await);
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::Unproven(ProofError::Missing))
    ));
    assert_eq!(compute_error(&r).label(), "compute_unproven");
    assert_unavailable(&r);
}

/// A greeting proven with a key the relay does not hold (an impostor, or a compute given
/// another key file) is refused before the relay sends anything.
#[tokio::test]
async fn a_greeting_proven_with_another_key_gets_nothing() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            let other = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
            c.ring = Arc::new(KeyRing::new(vec![other]).unwrap());
            c.greet().await;
            assert!(c.got_nothing_more().await, "no login may reach it");
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::Unproven(ProofError::BadTag))
    ));
    assert_unavailable(&r);
}

/// Before: the profile was learnt from the greeting before its proof was checked, so an
/// impostor's version string became what every later client was greeted with. Now only a
/// compute that proves the key teaches the profile, and its session is refused.
#[tokio::test]
async fn an_unproven_compute_teaches_no_profile_and_is_not_trusted() {
    let rt = runtime(AuthMode::Dual);
    let before = rt.profile();
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            let mut p = ComputeProfile::server_shim_default();
            p.server_version = b"5.7.99-impostor".to_vec();
            let g = p.greeting(42, &c.scramble_b);
            c.stream.write_packet(0, &g.to_bytes()).await.unwrap();
            let _ = c.read_login().await;
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    assert!(compute_error(&r).unproven());
    assert_eq!(rt.profile(), before, "the impostor's greeting was learnt");
    assert!(
        !rt.instance.routes_direct(),
        "an unproven compute is not routed to directly"
    );
}

/// A compute that proves the key in its greeting teaches the profile, and new connections
/// may go straight to it.
#[tokio::test]
async fn a_proven_compute_teaches_the_profile_and_opens_the_direct_route() {
    let rt = runtime(AuthMode::Dual);
    assert!(rt.instance.ensure_running().await.is_ok());
    assert!(!rt.instance.routes_direct(), "not before a proof");
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            let mut p = ComputeProfile::server_shim_default();
            p.server_version = b"8.0.99-shim".to_vec();
            c.greet_with(p).await;
            let _ = c.read_login().await;
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    assert!(r.result.unwrap().1.accepted());
    assert_eq!(rt.profile().server_version, b"8.0.99-shim");
    assert!(rt.instance.routes_direct());
}

/// A greeting recorded from the real compute and replayed by whatever holds the compute's
/// address later is refused: each proven greeting is accepted once.
#[tokio::test]
async fn a_replayed_greeting_gets_nothing() {
    let rt = runtime(AuthMode::Dual);
    let recorded = Scramble::generate_timed(&mut rand::rngs::OsRng, crate::clock::now_ms());
    let b = recorded.clone();
    let first = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.scramble_b = b;
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    assert!(first.result.unwrap().1.accepted());
    let replay = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.scramble_b = recorded;
            c.greet().await;
            assert!(c.got_nothing_more().await, "no login may reach it");
        },
    )
    .await;
    assert!(matches!(
        compute_error(&replay),
        ComputeError::Protocol(ComputeProtocolError::Unproven(ProofError::Replayed))
    ));
    assert_unavailable(&replay);
}

/// A challenging compute that answers the Hello with a proof made with another key gets no
/// payload.
#[tokio::test]
async fn a_challenge_proof_with_another_key_gets_no_payload() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_unproven().await;
            let _ = c.read_login().await;
            c.scramble_b = Scramble::from_bytes(*b"CCCCCCCCCCCCCCCCCCCC");
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let hello = Hello::decode(&c.stream.read_packet().await.unwrap().payload).unwrap();
            let other = PerceptronKey::new(
                hello.key_id.clone(),
                authplugin::KeySecret::from_bytes([1; 32]),
            );
            let proof = hello.prove(&c.scramble_b, &KeyRing::new(vec![other]).unwrap());
            c.send(4, &proof).await;
            assert!(c.got_nothing_more().await, "no payload may reach it");
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::Unproven(ProofError::BadTag))
    ));
    assert_unavailable(&r);
}

/// A plugin that predates the proof reads the Hello as a malformed payload and refuses: the
/// client gets that ERR, as for any refused login.
#[tokio::test]
async fn a_compute_refusing_the_hello_reaches_the_client_as_its_err() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_unproven().await;
            let _ = c.read_login().await;
            c.scramble_b = Scramble::from_bytes(*b"CCCCCCCCCCCCCCCCCCCC");
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let _ = c.stream.read_packet().await.unwrap();
            c.send(4, &denied()).await;
        },
    )
    .await;
    assert!(!r.result.as_ref().unwrap().1.accepted());
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(err_of(&r.client_got[0]).error_code, 1045);
}

#[tokio::test(start_paused = true)]
async fn compute_that_never_greets_times_out() {
    let rt = runtime(AuthMode::Dual);
    let r = run(&rt, 0, ClientScript::ReadAll, vec![None], |c| async move {
        // Holds the connection open, silent, past compute_timeout.
        tokio::time::sleep(TIMEOUT * 2).await;
        drop(c);
    })
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Timeout(ComputeStep::Greeting)
    ));
    assert_unavailable(&r);
}

#[tokio::test(start_paused = true)]
async fn compute_that_never_answers_the_login_times_out() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            tokio::time::sleep(TIMEOUT * 2).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Timeout(ComputeStep::Login)
    ));
    assert_unavailable(&r);
}

/// A compute that has not proven the key (MariaDB proves it only in a login; a squatter
/// never) teaches only the capabilities it lacks: not its version string, and not so much
/// that no later login could reach its proof.
#[tokio::test]
async fn capability_mismatch_from_an_unproven_greeting_forgets_only_the_missing_capability() {
    let rt = runtime(AuthMode::Dual);
    let mut stale = ComputeProfile::server_shim_default();
    stale.capability_flags |= CLIENT_DEPRECATE_EOF;
    *rt.profile.write().unwrap() = stale.clone();
    let r = run(
        &rt,
        CLIENT_DEPRECATE_EOF,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            let mut p = ComputeProfile::server_shim_default();
            p.capability_flags &= !CLIENT_DEPRECATE_EOF;
            p.server_version = b"5.7.99-impostor".to_vec();
            let g = p.greeting(42, &c.scramble_b);
            c.stream.write_packet(0, &g.to_bytes()).await.unwrap();
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::CapabilityMismatch { .. }
    ));
    let mut expected = stale;
    expected.capability_flags &= !CLIENT_DEPRECATE_EOF;
    assert_eq!(rt.profile(), expected);
}

#[tokio::test]
async fn capability_mismatch_is_refused_and_the_profile_relearnt() {
    let rt = runtime(AuthMode::Dual);
    // The relay greets with a profile offering DEPRECATE_EOF; the compute no longer has it.
    let mut stale = ComputeProfile::server_shim_default();
    stale.capability_flags |= CLIENT_DEPRECATE_EOF;
    *rt.profile.write().unwrap() = stale;
    let mut current = ComputeProfile::server_shim_default();
    current.capability_flags &= !CLIENT_DEPRECATE_EOF;
    let greeted_with = current.clone();
    let r = run(
        &rt,
        CLIENT_DEPRECATE_EOF,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet_with(greeted_with).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::CapabilityMismatch { flags: bits, .. } if *bits & FORMAT_CHANGING == CLIENT_DEPRECATE_EOF
    ));
    assert_eq!(rt.profile(), current, "the compute's profile is learnt");
    let e = err_of(&r.client_got[0]);
    assert_eq!(e.error_code, 1053);
    assert_eq!(
        e.error_message,
        b"Instance 't' changed its capabilities; reconnect"
    );
}

#[tokio::test]
async fn client_leaving_before_the_verdict_is_client_gone_and_gets_nothing() {
    let rt = runtime(AuthMode::Dual);
    let r = run(
        &rt,
        0,
        ClientScript::Leave,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, &ok_packet()).await;
        },
    )
    .await;
    assert!(matches!(r.result, Err(PerceptronError::ClientGone)));
    assert!(r.client_got.is_empty());
}

#[tokio::test]
async fn shutdown_during_the_wake_tells_the_client() {
    let rt = runtime(AuthMode::Dual);
    rt.shutdown.cancel();
    // The ready driver would win a race with shutdown; a cancelled relay must not wake.
    let r = run(&rt, 0, ClientScript::ReadAll, vec![], |_| async {}).await;
    match &r.result {
        Err(PerceptronError::ShuttingDown | PerceptronError::Wake(WakeError::ShuttingDown)) => {}
        Err(PerceptronError::Compute(ComputeError::Connect(_))) | Ok(_) => {
            panic!("connected to a compute during shutdown")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(err_of(&r.client_got[0]).error_code, 1053);
}

// ---- switch mode ----

#[tokio::test]
async fn switch_login_relays_the_servers_challenge_and_verdict() {
    let rt = runtime(AuthMode::Switch);
    let answer: &'static [u8] = b"the-clients-answer-to-B";
    let r = run(
        &rt,
        0,
        ClientScript::AnswerOnce(answer),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let probe = c.read_login().await;
            assert_eq!(
                probe.client_plugin_name.as_deref(),
                Some(switch_auth::PROBE_PLUGIN.as_bytes())
            );
            assert!(
                probe.auth_response.is_empty(),
                "the probe carries no answer"
            );
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let got = c.stream.read_packet().await.unwrap();
            assert_eq!(got.sequence_id, 3);
            assert_eq!(got.payload, answer);
            c.send(4, &ok_packet()).await;
        },
    )
    .await;
    assert!(r.result.unwrap().1.accepted());
    let seqs: Vec<_> = r.client_got.iter().map(|p| p.sequence_id).collect();
    assert_eq!(seqs, [2, 4], "renumbered for the client");
    assert_eq!(r.client_got[0].payload[0], 0xFE);
    assert_eq!(r.client_got[1].payload, ok_packet());
}

#[tokio::test]
async fn switch_login_relays_caching_sha2_fast_path_success() {
    let rt = runtime(AuthMode::Switch);
    let answer: &'static [u8] = b"more";
    let r = run(
        &rt,
        0,
        ClientScript::AnswerEach(answer),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::CachingSha2Password).await;
            assert_eq!(c.stream.read_packet().await.unwrap().sequence_id, 3);
            // Fast-path success needs no answer; the OK follows at once.
            c.send(4, &[0x01, 0x03]).await;
            c.send(5, &ok_packet()).await;
        },
    )
    .await;
    assert!(r.result.unwrap().1.accepted());
    let seqs: Vec<_> = r.client_got.iter().map(|p| p.sequence_id).collect();
    assert_eq!(seqs, [2, 4, 5]);
}

/// On a compute leg without TLS, AuthMoreData other than the fast path's `01 03` is refused:
/// a full authentication padded past its second byte (clients read only that byte, and a TLS
/// client would send its password), and a public key (which an attacker on the leg could
/// replace with one of its own).
#[tokio::test]
async fn more_auth_data_than_the_fast_path_is_refused_on_a_compute_leg_without_tls() {
    for more in [
        &b"\x01\x04\x00"[..],
        b"\x01\x04\xff\xff",
        b"\x01-----BEGIN PUBLIC KEY-----",
    ] {
        let rt = runtime(AuthMode::Switch);
        let r = run(
            &rt,
            0,
            ClientScript::AnswerEach(b"my-password\0"),
            vec![None],
            |mut c| async move {
                c.greet().await;
                let _ = c.read_login().await;
                c.switch_to(AuthPlugin::CachingSha2Password).await;
                assert_eq!(c.stream.read_packet().await.unwrap().sequence_id, 3);
                c.send(4, more).await;
                let finish = c.stream.read_packet().await.unwrap();
                assert_eq!((finish.sequence_id, finish.payload.len()), (5, 0));
                c.send(6, &denied()).await;
                assert!(c.got_nothing_more().await);
            },
        )
        .await;
        assert_eq!(r.client_got.len(), 2, "{more:?}");
        assert_refused_for_cleartext(&r, 4);
    }
}

/// The refusal a compute leg without TLS gets when the server asks for the password itself.
fn assert_refused_for_cleartext(r: &Run, client_errs_at: u8) {
    assert!(
        matches!(
            compute_error(r),
            ComputeError::Protocol(ComputeProtocolError::PasswordOnPlaintextLeg(_))
        ),
        "{:?}",
        r.result
    );
    let last = r.client_got.last().unwrap();
    assert_eq!(last.sequence_id, client_errs_at);
    let err = err_of(last);
    assert_eq!(
        (err.error_code, err.sql_state),
        (1251, Some(*b"08004")),
        "ER_NOT_SUPPORTED_AUTH_MODE"
    );
}

#[tokio::test]
async fn caching_sha2_full_authentication_is_refused_on_a_compute_leg_without_tls() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::AnswerEach(b"my-password\0"),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::CachingSha2Password).await;
            assert_eq!(c.stream.read_packet().await.unwrap().sequence_id, 3);
            // "perform full authentication": a client on TLS would now send its password.
            c.send(4, &[0x01, 0x04]).await;
            // The relay abandons with an empty answer; the password never comes.
            let finish = c.stream.read_packet().await.unwrap();
            assert_eq!((finish.sequence_id, finish.payload.len()), (5, 0));
            c.send(6, &denied()).await;
            assert!(c.got_nothing_more().await);
        },
    )
    .await;
    // The switch reached the client; the full-authentication request did not.
    assert_eq!(r.client_got.len(), 2);
    assert_eq!(r.client_got[0].payload[0], 0xFE);
    assert_refused_for_cleartext(&r, 4);
}

#[tokio::test]
async fn a_clear_text_plugin_switch_is_refused_on_a_compute_leg_without_tls() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            let mut out = Vec::new();
            AuthSwitchRequest {
                plugin_name: b"mysql_clear_password".to_vec(),
                plugin_data: Vec::new(),
            }
            .encode(&mut out);
            c.send(2, &out).await;
            let finish = c.stream.read_packet().await.unwrap();
            assert_eq!((finish.sequence_id, finish.payload.len()), (3, 0));
            c.send(4, &denied()).await;
            assert!(c.got_nothing_more().await);
        },
    )
    .await;
    // The client never saw the switch, only the relay's ERR.
    assert_eq!(r.client_got.len(), 1);
    assert_refused_for_cleartext(&r, 2);
}

/// On a compute leg without TLS, only a challenge-response plugin may be switched to (an
/// allow-list): `sha256_password`, which a client on TLS answers with its password in clear,
/// a PAM dialog, and a plugin the relay has never heard of are refused alike, the client seeing
/// only the relay's ERR and the server only an empty answer.
#[tokio::test]
async fn only_challenge_response_plugins_are_relayed_on_a_compute_leg_without_tls() {
    for plugin in [
        &b"sha256_password"[..],
        b"dialog",
        b"auth_gssapi_client",
        b"x\0y",
    ] {
        let rt = runtime(AuthMode::Switch);
        let r = run(
            &rt,
            0,
            ClientScript::ReadAll,
            vec![None],
            |mut c| async move {
                c.greet().await;
                let _ = c.read_login().await;
                let mut out = Vec::new();
                AuthSwitchRequest {
                    plugin_name: plugin.to_vec(),
                    plugin_data: b"01234567890123456789".to_vec(),
                }
                .encode(&mut out);
                c.send(2, &out).await;
                let finish = c.stream.read_packet().await.unwrap();
                assert_eq!((finish.sequence_id, finish.payload.len()), (3, 0));
                c.send(4, &denied()).await;
                assert!(c.got_nothing_more().await);
            },
        )
        .await;
        assert_eq!(r.client_got.len(), 1, "{plugin:?}");
        assert_refused_for_cleartext(&r, 2);
    }
}

#[tokio::test]
async fn switch_login_forwards_the_servers_err() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::AnswerOnce(b"wrong"),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let _ = c.stream.read_packet().await.unwrap();
            c.send(4, &denied()).await;
        },
    )
    .await;
    assert!(!r.result.unwrap().1.accepted());
    assert_eq!(r.client_got.len(), 2);
    assert_eq!(r.client_got[1].sequence_id, 4);
    assert_eq!(err_of(&r.client_got[1]).error_code, 1045);
}

#[tokio::test]
async fn a_second_switch_is_refused_and_the_server_login_finished() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::AnswerOnce(b"answer"),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let _ = c.stream.read_packet().await.unwrap();
            c.switch_to_at(4, AuthPlugin::MysqlNativePassword).await;
            // The relay abandons: an empty answer, so the server logs a failed login.
            let finish = c.stream.read_packet().await.unwrap();
            assert_eq!((finish.sequence_id, finish.payload.len()), (5, 0));
            c.send(6, &denied()).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::SecondAuthSwitch)
    ));
    // The first switch, then the relay's own ERR (1053) at the next client sequence id.
    assert_eq!(r.client_got.len(), 2);
    assert_eq!(r.client_got[1].sequence_id, 4);
    assert_eq!(err_of(&r.client_got[1]).error_code, 1053);
}

#[tokio::test]
async fn client_leaving_mid_switch_finishes_the_server_login() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::Leave,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let finish = c.stream.read_packet().await.unwrap();
            assert_eq!((finish.sequence_id, finish.payload.len()), (3, 0));
            c.send(4, &denied()).await;
        },
    )
    .await;
    assert!(matches!(r.result, Err(PerceptronError::ClientGone)));
}

#[tokio::test(start_paused = true)]
async fn server_stalling_mid_switch_times_out() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::AnswerOnce(b"answer"),
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.switch_to(AuthPlugin::MysqlNativePassword).await;
            let _ = c.stream.read_packet().await.unwrap();
            tokio::time::sleep(TIMEOUT * 2).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Timeout(ComputeStep::Login)
    ));
    assert_eq!(err_of(r.client_got.last().unwrap()).error_code, 1053);
}

#[tokio::test]
async fn server_sending_garbage_mid_switch_is_a_protocol_error() {
    let rt = runtime(AuthMode::Switch);
    let r = run(
        &rt,
        0,
        ClientScript::ReadAll,
        vec![None],
        |mut c| async move {
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, b"\x42garbage").await;
            // The relay finishes the login with an empty answer.
            let finish = c.stream.read_packet().await.unwrap();
            assert_eq!(finish.payload.len(), 0);
            c.send(4, &denied()).await;
        },
    )
    .await;
    assert!(matches!(
        compute_error(&r),
        ComputeError::Protocol(ComputeProtocolError::Unexpected(0x42))
    ));
    assert_unavailable(&r);
}

#[test]
fn only_a_compute_that_is_not_listening_is_retried() {
    let refused = ComputeError::Connect(ConnectError(io::ErrorKind::ConnectionRefused.into()));
    assert!(refused.retryable());
    for e in [
        ComputeError::Timeout(ComputeStep::Login),
        ComputeError::Protocol(ComputeProtocolError::Empty),
        ComputeError::CapabilityMismatch {
            flags: CLIENT_DEPRECATE_EOF,
            mariadb: 0,
        },
        ComputeError::Connect(ConnectError(io::ErrorKind::PermissionDenied.into())),
    ] {
        assert!(!e.retryable(), "{e}");
    }
    assert!(PerceptronError::Compute(refused).retryable());
    assert!(!PerceptronError::NotALogin(Classification::Http).retryable());
}

/// A runtime whose budgets are `config`.
fn runtime_with_budgets(config: crate::config::BudgetSettings) -> InstanceRuntime {
    let mut rt = runtime(AuthMode::Dual);
    rt.budgets = Arc::new(Budgets::new(config));
    rt
}

#[tokio::test]
async fn failed_logins_past_the_source_budget_are_refused_without_a_wake() {
    let rt = runtime_with_budgets(crate::config::BudgetSettings {
        failed_logins_per_source: 2,
        ..crate::config::BudgetSettings::default()
    });
    for _ in 0..2 {
        let r = run(
            &rt,
            0,
            ClientScript::ReadAll,
            vec![None],
            |mut c| async move {
                c.greet().await;
                let _ = c.read_login().await;
                c.send(2, &denied()).await;
            },
        )
        .await;
        assert!(!r.result.as_ref().unwrap().1.accepted());
        rt.instance.pause(true, "test").await.unwrap();
    }
    assert_eq!(rt.instance.status().wakes, 2);
    // The third login: no connect (the script is empty), no wake, ERR 1129.
    let r = run(&rt, 0, ClientScript::ReadAll, vec![], |_| async {}).await;
    let Err(e) = &r.result else {
        panic!("refusal expected");
    };
    assert_eq!(e.label(), "source_failed_logins");
    assert!(!e.retryable());
    assert_eq!(rt.instance.status().wakes, 2);
    assert_eq!(rt.instance.phase(), Phase::Paused);
    assert_eq!(r.client_got.len(), 1);
    assert_eq!(r.client_got[0].sequence_id, 2);
    let err = err_of(&r.client_got[0]);
    assert_eq!((err.error_code, err.sql_state), (1129, Some(*b"HY000")));
    assert!(
        String::from_utf8_lossy(&err.error_message)
            .starts_with("Host '10.0.0.7' is blocked because of many failed logins"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_successful_login_counts_no_failure_and_a_wake_budget_refuses_only_wakes() {
    let rt = runtime_with_budgets(crate::config::BudgetSettings {
        wakes_per_user: 1,
        ..crate::config::BudgetSettings::default()
    });
    let accept = |mut c: ComputeSide| async move {
        c.greet().await;
        let _ = c.read_login().await;
        c.send(2, &ok_packet()).await;
    };
    let r = run(&rt, 0, ClientScript::ReadAll, vec![None], accept).await;
    assert!(r.result.as_ref().unwrap().1.accepted());
    // Running: the spent wake budget does not stand in the way.
    let r = run(&rt, 0, ClientScript::ReadAll, vec![None], accept).await;
    assert!(r.result.as_ref().unwrap().1.accepted());
    rt.instance.pause(true, "test").await.unwrap();
    let r = run(&rt, 0, ClientScript::ReadAll, vec![], |_| async {}).await;
    assert_eq!(r.result.as_ref().unwrap_err().label(), "user_wakes");
    let err = err_of(&r.client_got[0]);
    assert_eq!((err.error_code, err.sql_state), (1226, Some(*b"42000")));
    assert_eq!(
        err.error_message,
        b"User 'app' has exceeded the 'wakes' resource (current value: 1)"
    );
    assert_eq!(rt.instance.status().wakes, 1);
}

/// HAProxy's `option mysql-check user haproxy` (post-41): a HandshakeResponse41 without
/// `CLIENT_PLUGIN_AUTH` and with an empty answer, and a COM_QUIT in the same write.
fn haproxy_check_bytes(user: &[u8]) -> Vec<u8> {
    let mut login = Vec::new();
    login.extend_from_slice(&0x0000_a200u32.to_le_bytes());
    login.extend_from_slice(&0x0100_0000u32.to_le_bytes());
    login.push(0x21);
    login.extend_from_slice(&[0; 23]);
    login.extend_from_slice(user);
    login.extend_from_slice(&[0, 0]);
    let mut out = Vec::new();
    authplugin::packet::write_packet(&mut out, 1, &login);
    authplugin::packet::write_packet(&mut out, 0, &[0x01]);
    out
}

#[tokio::test]
async fn a_haproxy_mysql_check_is_answered_ok_without_a_wake() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rt = runtime(AuthMode::Dual);
    let connector = ScriptedConnector::new(Vec::new());
    let (relay_end, mut client_end) = tokio::io::duplex(1 << 16);
    let checker = tokio::spawn(async move {
        let mut s = PacketStream::new(&mut client_end, 1 << 20);
        let greeting = s.read_packet().await.unwrap();
        assert_eq!(greeting.payload.first(), Some(&10));
        drop(s);
        client_end
            .write_all(&haproxy_check_bytes(b"haproxy"))
            .await
            .unwrap();
        let mut rest = Vec::new();
        client_end.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let mut stream = PacketStream::new(ClientStream::Plain(relay_end), MAX_LOGIN_PACKET_LEN);
    let peer: SocketAddr = "10.0.0.9:5000".parse().unwrap();
    let result = establish(&rt, &mut stream, peer, &connector, None, None).await;
    drop(stream);
    assert_eq!(result.unwrap_err().label(), "health_check");
    let rest = checker.await.unwrap();
    // One OK at sequence id 2 (4.1 layout, autocommit), then the close.
    assert_eq!(rest, [7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(rt.instance.status().wakes, 0);
    assert_eq!(rt.instance.phase(), Phase::Paused);
}

#[tokio::test]
async fn a_health_check_user_with_a_password_or_another_user_is_a_login() {
    use tokio::io::AsyncWriteExt as _;
    for user in [&b"root"[..], b"haproxy2"] {
        let rt = runtime(AuthMode::Dual);
        let (relay_end, compute_end) = tokio::io::duplex(1 << 16);
        let ring = rt.ring.current();
        let compute = tokio::spawn(async move {
            let mut c = ComputeSide::new(compute_end, ring);
            c.greet().await;
            let _ = c.read_login().await;
            c.send(2, &denied()).await;
        });
        let connector = ScriptedConnector::new(vec![Ok(relay_end)]);
        let (relay_end, mut client_end) = tokio::io::duplex(1 << 16);
        let user_owned = user.to_vec();
        let checker = tokio::spawn(async move {
            let mut s = PacketStream::new(&mut client_end, 1 << 20);
            let _ = s.read_packet().await.unwrap();
            drop(s);
            client_end
                .write_all(&haproxy_check_bytes(&user_owned))
                .await
                .unwrap();
            client_end
        });
        let mut stream = PacketStream::new(ClientStream::Plain(relay_end), MAX_LOGIN_PACKET_LEN);
        let peer: SocketAddr = "10.0.0.9:5000".parse().unwrap();
        let result = establish(&rt, &mut stream, peer, &connector, None, None).await;
        assert!(!result.unwrap().verdict.accepted());
        assert_eq!(rt.instance.status().wakes, 1);
        compute.await.unwrap();
        drop(checker.await.unwrap());
    }
}

// ---- TLS on the client leg ----

mod tls {
    use authplugin::packet::SslRequest;
    use tokio::io::AsyncWriteExt as _;

    use super::*;
    use crate::tls::TlsFailure;
    use crate::tls::tests::Pki;

    fn tls_runtime(settings: crate::config::TlsSettings, require: bool) -> InstanceRuntime {
        let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
        crate::in_memory::runtime_with(
            AuthMode::Dual,
            KeyRing::new(vec![key]).unwrap(),
            TIMEOUT,
            |c| {
                c.tls = Some(settings);
                c.require_secure_transport = require;
            },
        )
    }

    /// What the client does: TLS with `config` (after an SSLRequest), or plaintext.
    enum Client {
        Tls(Arc<rustls::ClientConfig>),
        Plain,
        /// Sends the SSLRequest, then nothing.
        StallAfterSslRequest,
    }

    /// Logs in as the scripted client of these tests; returns the packets received after
    /// the login, or the TLS error the client saw.
    async fn tls_client(stream: DuplexStream, how: Client) -> Result<Vec<Packet>, io::Error> {
        let mut s = PacketStream::new(stream, 1 << 20);
        let greeting = HandshakeV10::decode(&s.read_packet().await.unwrap().payload).unwrap();
        assert_ne!(greeting.capability_flags & CLIENT_SSL, 0, "TLS is offered");
        let scramble_a = greeting.scramble().unwrap();
        let config = match how {
            Client::Plain => {
                s.write_packet(1, &login_response(&scramble_a, 0).to_bytes())
                    .await
                    .unwrap();
                let mut got = Vec::new();
                while let Ok(p) = s.read_packet().await {
                    got.push(p);
                }
                return Ok(got);
            }
            Client::Tls(config) => Some(config),
            Client::StallAfterSslRequest => None,
        };
        let ssl = SslRequest {
            client_flag: CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_SSL,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
        };
        let mut payload = Vec::new();
        ssl.encode(&mut payload);
        s.write_packet(1, &payload).await.unwrap();
        let (raw, rest) = s.into_parts();
        assert!(rest.is_empty());
        let Some(config) = config else {
            // Hold the socket open, silent, until the relay gives up.
            let mut raw = raw;
            let _ = tokio::io::AsyncReadExt::read(&mut raw, &mut [0u8; 1]).await;
            return Ok(Vec::new());
        };
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, raw)
            .await?;
        let mut s = PacketStream::new(tls, 1 << 20);
        s.write_packet(2, &login_response(&scramble_a, CLIENT_SSL).to_bytes())
            .await?;
        let mut got = Vec::new();
        loop {
            match s.read_packet().await {
                Ok(p) => got.push(p),
                Err(crate::packet_io::ReadError::Io(e)) if got.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        let (mut tls, _) = s.into_parts();
        let _ = tls.shutdown().await;
        Ok(got)
    }

    struct TlsRun {
        result: Result<Established<DuplexStream>, PerceptronError>,
        client: Result<Vec<Packet>, io::Error>,
        connects_left: usize,
    }

    /// One connection through `establish` with a TLS-capable instance; the compute (if the
    /// login gets that far) greets, checks the relayed login and says OK.
    async fn run_tls(rt: &InstanceRuntime, how: Client) -> TlsRun {
        let (relay_end, compute_end) = tokio::io::duplex(1 << 16);
        let ring = rt.ring.current();
        let compute = tokio::spawn(async move {
            let mut c = ComputeSide::new(compute_end, Arc::clone(&ring));
            c.greet().await;
            let Ok(p) = c.stream.read_packet().await else {
                return;
            };
            let caps = ComputeProfile::server_shim_default().capability_flags;
            let p6 = HandshakeResponse41::decode_for_server(&p.payload, caps).unwrap();
            assert_eq!(
                p6.client_flag & CLIENT_SSL,
                0,
                "the compute leg is plaintext"
            );
            assert!(c.verify(&p6, &ring));
            c.send(2, &ok_packet()).await;
        });
        let connector = ScriptedConnector::new(vec![Ok(relay_end)]);
        let (relay_client, client_end) = tokio::io::duplex(1 << 16);
        let client = tokio::spawn(tls_client(client_end, how));
        let mut stream = PacketStream::new(ClientStream::Plain(relay_client), MAX_LOGIN_PACKET_LEN);
        let peer: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let result = establish(rt, &mut stream, peer, &connector, None, None).await;
        drop(stream);
        let connects_left = connector.left();
        drop(connector);
        let result = result.map(|mut e| {
            e.compute = PacketStream::new(tokio::io::duplex(1).0, 1);
            e
        });
        let client = client.await.unwrap();
        compute.abort();
        TlsRun {
            result,
            client,
            connects_left,
        }
    }

    #[tokio::test]
    async fn a_login_inside_tls_is_relayed_and_answered_inside_tls() {
        let pki = Pki::new("relayed");
        let rt = tls_runtime(pki.settings.clone(), true);
        let r = run_tls(&rt, Client::Tls(Pki::client_config(&pki.ca_der, None))).await;
        let established = r.result.unwrap();
        assert!(established.verdict.accepted());
        let got = r.client.unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        // After SSLRequest (1) and the login (2), the OK is 3.
        assert_eq!(got[0].sequence_id, 3);
        assert_eq!(got[0].payload, ok_packet());
        assert_eq!(r.connects_left, 0);
    }

    #[tokio::test]
    async fn a_plaintext_login_gets_3159_without_a_wake_when_tls_is_required() {
        let pki = Pki::new("required");
        let rt = tls_runtime(pki.settings.clone(), true);
        let r = run_tls(&rt, Client::Plain).await;
        assert!(matches!(
            r.result,
            Err(PerceptronError::NotALogin(
                Classification::InsecureTransport
            ))
        ));
        let got = r.client.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].sequence_id, 2);
        let e = err_of(&got[0]);
        assert_eq!((e.error_code, e.sql_state), (3159, Some(*b"HY000")));
        assert_eq!(r.connects_left, 1, "nothing woke or connected");
        assert_eq!(rt.instance.phase(), Phase::Paused);
    }

    #[tokio::test]
    async fn a_plaintext_login_still_works_when_tls_is_optional() {
        let pki = Pki::new("optional");
        let rt = tls_runtime(pki.settings.clone(), false);
        let r = run_tls(&rt, Client::Plain).await;
        assert!(r.result.unwrap().verdict.accepted());
        assert_eq!(r.client.unwrap()[0].sequence_id, 2);
    }

    #[tokio::test]
    async fn a_client_that_distrusts_the_certificate_wakes_nothing() {
        let pki = Pki::new("distrust");
        let rt = tls_runtime(pki.settings.clone(), false);
        let r = run_tls(
            &rt,
            Client::Tls(Pki::client_config(&Pki::stranger_ca(), None)),
        )
        .await;
        assert!(
            r.client.is_err(),
            "the client refuses the relay's certificate"
        );
        assert!(matches!(
            r.result,
            Err(PerceptronError::NotALogin(Classification::Tls(
                TlsFailure::RefusedByClient
            )))
        ));
        assert_eq!(r.connects_left, 1);
    }

    #[tokio::test]
    async fn mutual_tls_refuses_an_unknown_client_certificate_without_a_wake() {
        let pki = Pki::new("mutual");
        let rt = tls_runtime(pki.mutual(), false);
        let stranger = Pki::client_config(&pki.ca_der, Some(Pki::stranger_client()));
        let r = run_tls(&rt, Client::Tls(stranger)).await;
        assert!(matches!(
            r.result,
            Err(PerceptronError::NotALogin(Classification::Tls(
                TlsFailure::ClientCertRefused
            )))
        ));
        assert_eq!(r.connects_left, 1);
        let known = Pki::client_config(&pki.ca_der, Some(pki.client()));
        let r = run_tls(&rt, Client::Tls(known)).await;
        assert!(r.result.unwrap().verdict.accepted());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_tls_handshake_times_out_as_its_own_class() {
        let pki = Pki::new("stall");
        let rt = tls_runtime(pki.settings.clone(), false);
        let r = run_tls(&rt, Client::StallAfterSslRequest).await;
        assert!(matches!(
            r.result,
            Err(PerceptronError::NotALogin(Classification::Tls(
                TlsFailure::TimedOut
            )))
        ));
        assert_eq!(r.connects_left, 1);
    }
}

/// MariaDB's extended capabilities: the relay's login to the compute asks for what the client
/// asked for of those the relay carries, and a compute that lacks one the client negotiated
/// (a stale profile) refuses the login rather than send results the client would misread.
#[test]
fn the_computes_login_carries_the_mariadb_capabilities_the_client_negotiated() {
    use authplugin::packet::capabilities::{
        CLIENT_MYSQL_MARIADB, MARIADB_CLIENT_CACHE_METADATA, MARIADB_CLIENT_EXTENDED_METADATA,
        MARIADB_CLIENT_PROGRESS, MARIADB_CLIENT_STMT_BULK_OPERATIONS,
    };
    let scramble_b = Scramble::from_bytes([0x42; 20]);
    let greeted = |offered: u32| {
        let (compute, _) = tokio::io::duplex(64);
        let mut greeting = HandshakeV10::new(
            b"10.11.6-MariaDB".to_vec(),
            7,
            &scramble_b,
            CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH,
            45,
            2,
            "mysql_native_password",
        );
        greeting.reserved[6..].copy_from_slice(&offered.to_le_bytes());
        compute_leg::GreetedCompute {
            stream: PacketStream::new(compute, MAX_LOGIN_PACKET_LEN),
            greeting,
            scramble_b: scramble_b.clone(),
            tls: false,
        }
    };
    let mut response = login_response(&Scramble::from_bytes([0x41; 20]), 0);
    response.client_flag &= !CLIENT_MYSQL_MARIADB;
    let asked = MARIADB_CLIENT_EXTENDED_METADATA | MARIADB_CLIENT_CACHE_METADATA;
    response.reserved[19..].copy_from_slice(&asked.to_le_bytes());
    let login = login::ClientLogin {
        effective_flag: response.client_flag,
        response,
        plugin: AuthPlugin::MysqlNativePassword,
        answer: Zeroizing::new(Vec::new()),
        last_sequence_id: 1,
        tls: false,
        connection_id: 7,
    };
    let all = MARIADB_CLIENT_PROGRESS
        | MARIADB_CLIENT_STMT_BULK_OPERATIONS
        | MARIADB_CLIENT_EXTENDED_METADATA
        | MARIADB_CLIENT_CACHE_METADATA;
    let compute = greeted(all);
    compute_leg::check_capabilities(&login, &compute.greeting).unwrap();
    let sent = compute_leg::response_for(&login, &compute, "x", Zeroizing::new(Vec::new()));
    assert_eq!(sent.client_flag & CLIENT_MYSQL_MARIADB, 0);
    assert_eq!(
        sent.mariadb_extended_capabilities(),
        Some(MARIADB_CLIENT_EXTENDED_METADATA),
        "never cached metadata, and nothing the client did not ask for"
    );
    let stale = greeted(MARIADB_CLIENT_PROGRESS);
    assert!(matches!(
        compute_leg::check_capabilities(&login, &stale.greeting),
        Err(ComputeError::CapabilityMismatch {
            flags: 0,
            mariadb: MARIADB_CLIENT_EXTENDED_METADATA
        })
    ));
}

/// The login the relay sends the compute always carries the client's connection id as a
/// connect attribute, in place of any the client sent under that name, and keeps the
/// client's other attributes.
#[test]
fn the_computes_login_carries_the_clients_connection_id_and_not_a_forged_one() {
    let scramble_b = Scramble::from_bytes([0x42; 20]);
    let (compute, _) = tokio::io::duplex(64);
    let flags = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    let greeted = compute_leg::GreetedCompute {
        stream: PacketStream::new(compute, MAX_LOGIN_PACKET_LEN),
        greeting: HandshakeV10::new(
            b"8.0.40".to_vec(),
            7,
            &scramble_b,
            flags,
            45,
            0,
            "mysql_native_password",
        ),
        scramble_b,
        tls: false,
    };
    let mut response = login_response(&Scramble::from_bytes([0x41; 20]), CLIENT_CONNECT_ATTRS);
    response.connect_attrs = Some(vec![
        (b"_client_name".to_vec(), b"libmariadb".to_vec()),
        (
            compute_leg::CONNECTION_ID_ATTR.as_bytes().to_vec(),
            b"1".to_vec(),
        ),
    ]);
    let login = login::ClientLogin {
        effective_flag: response.client_flag,
        response,
        plugin: AuthPlugin::MysqlNativePassword,
        answer: Zeroizing::new(Vec::new()),
        last_sequence_id: 1,
        tls: false,
        connection_id: 0x8000_0007,
    };
    let sent = compute_leg::response_for(&login, &greeted, "x", Zeroizing::new(Vec::new()));
    assert_ne!(sent.client_flag & CLIENT_CONNECT_ATTRS, 0);
    assert_eq!(
        sent.connect_attrs,
        Some(vec![
            (b"_client_name".to_vec(), b"libmariadb".to_vec()),
            (
                compute_leg::CONNECTION_ID_ATTR.as_bytes().to_vec(),
                b"2147483655".to_vec()
            ),
        ])
    );
}
