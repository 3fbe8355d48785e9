//! Entry points of the relay's fuzz targets (feature `fuzzing`).
//!
//! `perceptron_login`: the whole perceptron route, P1–P8, driven in memory by arbitrary client
//! bytes and arbitrary compute bytes, on paused time, in dual or switch mode. Whatever the
//! bytes, the login must end (no hang: every wait has a deadline) without a panic, and a
//! relayed login is only ever accepted when the compute's bytes said so.
//!
//! `switch_auth`: switch mode's exchange with a stock server alone (P6–P8), from the probe
//! login on, so the fuzzer spends its inputs on the server's AuthSwitchRequest and
//! AuthMoreData rounds rather than on reaching them; it checks that no password crosses a
//! compute leg without TLS ([`switch_auth`]).

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use authplugin::{KeyId, KeyRing, KeySecret, PerceptronKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::compute_conn::{ComputeConnector, ConnectError};
use crate::config::AuthMode;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::runtime::InstanceRuntime;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one login: the client sends `client` then closes its side, the compute sends
/// `compute` then closes its side. Returns whether the relay reported a login the compute
/// accepted.
///
/// # Panics
/// Only if the tokio runtime cannot be built.
#[must_use]
#[expect(clippy::expect_used, reason = "fuzzing harness: a runtime must exist")]
pub fn perceptron_login(client: &[u8], compute: &[u8], switch_mode: bool) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let runtime = instance(if switch_mode {
            AuthMode::Switch
        } else {
            AuthMode::Dual
        });
        let (relay_end, compute_end) = tokio::io::duplex(1 << 16);
        let compute_task = tokio::spawn(play(compute_end, compute.to_vec()));
        let connector = OneCompute(Mutex::new(Some(relay_end)));
        let (relay_client, client_end) = tokio::io::duplex(1 << 16);
        let client_task = tokio::spawn(play(client_end, client.to_vec()));
        let mut stream = PacketStream::new(
            crate::tls::ClientStream::Plain(relay_client),
            MAX_LOGIN_PACKET_LEN,
        );
        let peer: SocketAddr = SocketAddr::from(([10, 0, 0, 7], 5000));
        let result =
            crate::perceptron::establish(&runtime, &mut stream, peer, &connector, None, None).await;
        drop(stream);
        // A compute stream the login never took must close too, or the compute side waits.
        drop(connector);
        let accepted = result.as_ref().is_ok_and(|e| e.verdict.accepted());
        drop(result);
        let _ = client_task.await;
        let _ = compute_task.await;
        accepted
    })
}

/// Runs the switch-mode exchange ([`crate::perceptron`]'s P6–P8 for a stock server) once: the
/// compute sends `compute` then closes its side, the client sends `client` (its answers) then
/// closes its side, on a compute leg with TLS or without. Whatever the bytes, the exchange
/// must end without a panic or a hang, and:
/// - an accepted end is the compute's own OK or ERR;
/// - on a compute leg without TLS, no answer of the client's reaches the compute after the
///   compute asked for one in clear (an AuthSwitchRequest for `mysql_clear_password` or
///   `dialog`, or caching_sha2's full authentication, AuthMoreData `01 04`): the only packet
///   the relay may send after such a request is the empty one that finishes the login.
///
/// # Panics
/// When one of those properties fails, or if the tokio runtime cannot be built.
#[expect(clippy::expect_used, reason = "fuzzing harness: a runtime must exist")]
pub fn switch_auth(client: &[u8], compute: &[u8], compute_tls: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    let (verdict, to_compute) = rt.block_on(async {
        let (relay_compute, compute_end) = tokio::io::duplex(1 << 16);
        let compute_task = tokio::spawn(play(compute_end, compute.to_vec()));
        let (relay_client, client_end) = tokio::io::duplex(1 << 16);
        let client_task = tokio::spawn(play(client_end, client.to_vec()));
        let verdict = crate::perceptron::fuzz_switch_exchange(
            relay_client,
            relay_compute,
            compute_tls,
            TIMEOUT,
        )
        .await;
        let _ = client_task.await;
        let to_compute = compute_task.await.unwrap_or_default();
        (verdict, to_compute)
    });
    if let Some(first) = verdict {
        assert!(first == 0x00 || first == 0xFF, "verdict {first:#04x}");
    }
    if compute_tls {
        return;
    }
    let asked = frames(compute);
    // The relay's packets after its probe login (sequence id 1).
    for (seq, payload) in frames(&to_compute).into_iter().skip(1) {
        let request = asked.iter().find(|(s, _)| s.wrapping_add(1) == seq);
        if let Some((_, request)) = request {
            assert!(
                !asks_for_cleartext(request) || payload.is_empty(),
                "an answer went to a plaintext compute after it asked for the password in clear"
            );
        }
    }
}

/// Whether a compute's packet asks the client for its password in clear.
fn asks_for_cleartext(payload: &[u8]) -> bool {
    match payload.split_first() {
        Some((0xFE, rest)) => {
            let name = rest.split(|&b| b == 0).next().unwrap_or_default();
            name == b"mysql_clear_password" || name == b"dialog"
        }
        Some((0x01, rest)) => rest == [0x04],
        _ => false,
    }
}

/// `bytes` as (sequence id, payload) frames, up to the first incomplete or continued one
/// (the fuzz inputs the property is checked on are single-frame packets).
fn frames(mut bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let Some((header, rest)) = bytes.split_first_chunk::<4>() {
        let len =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        if len >= 0xFF_FFFF || rest.len() < len {
            break;
        }
        let (payload, tail) = rest.split_at(len);
        out.push((header[3], payload));
        bytes = tail;
    }
    out
}

/// Drives the direct route's login watch with `client` and `compute` bytes, alternately, in
/// chunks of 1–16 bytes (each chunk's length taken from its own first byte).
///
/// # Panics
/// If the watch reports more than one login or more than one verdict.
pub fn login_watch(client: &[u8], compute: &[u8]) {
    use crate::login_watch::{Event, LoginWatch};
    let (ups, downs) = (chunks(client), chunks(compute));
    let mut watch = LoginWatch::new();
    let (mut logins, mut verdicts) = (0, 0);
    for i in 0..ups.len().max(downs.len()) {
        let events = [
            ups.get(i).and_then(|c| watch.client_bytes(c)),
            downs.get(i).and_then(|c| watch.compute_bytes(c)),
        ];
        for event in events.into_iter().flatten() {
            match event {
                Event::Login { .. } => logins += 1,
                Event::Verdict(_) => verdicts += 1,
                Event::GaveUp | Event::TlsUpgrade => {}
            }
        }
    }
    assert!(logins <= 1 && verdicts <= 1 && verdicts <= logins);
}

/// Drives a [`Conversation`](crate::conversation::Conversation) with `client` and `server`
/// bytes, alternately, in chunks of 1–16 bytes; `capabilities` picks the EOF style (bit 0) and
/// compression (bit 1).
///
/// # Panics
/// If feeding the same chunks one byte at a time ends in another phase, other status flags,
/// or finds commands or prepare replies elsewhere: where a chunk ends must not matter.
pub fn conversation(capabilities: u8, client: &[u8], server: &[u8]) {
    use crate::conversation::Conversation;
    use authplugin::packet::capabilities::{
        CLIENT_COMPRESS, CLIENT_DEPRECATE_EOF, CLIENT_PROTOCOL_41,
    };
    let mut caps = CLIENT_PROTOCOL_41;
    if capabilities & 1 != 0 {
        caps |= CLIENT_DEPRECATE_EOF;
    }
    if capabilities & 2 != 0 {
        caps |= CLIENT_COMPRESS;
    }
    let (ups, downs) = (chunks(client), chunks(server));
    let mut whole = Conversation::new(caps, 0, 2);
    let mut bytewise = Conversation::new(caps, 0, 2);
    // Where commands and prepare replies begin, as absolute offsets in each direction: the
    // same whichever way the bytes were cut (`statement_ids` rewrites there).
    #[derive(Default)]
    struct Direction {
        whole: Vec<(usize, u32)>,
        bytewise: Vec<(usize, u32)>,
        offset: usize,
    }
    fn feed(c: &mut Conversation, from_client: bool, bytes: &[u8]) -> Vec<(usize, u32)> {
        let mut found = Vec::new();
        if from_client {
            c.client_bytes_marking(bytes, Some(&mut found));
        } else {
            c.server_bytes_marking(bytes, Some(&mut found));
        }
        found.iter().map(|m| (m.at, m.len)).collect()
    }
    let (mut up, mut down) = (Direction::default(), Direction::default());
    for i in 0..ups.len().max(downs.len()) {
        for (from_client, chunk, d) in [
            (true, ups.get(i), &mut up),
            (false, downs.get(i), &mut down),
        ] {
            let Some(chunk) = chunk else { continue };
            let base = d.offset;
            d.whole.extend(
                feed(&mut whole, from_client, chunk)
                    .into_iter()
                    .map(|(at, len)| (base + at, len)),
            );
            for (j, b) in chunk.iter().enumerate() {
                let found = feed(&mut bytewise, from_client, &[*b]);
                d.bytewise
                    .extend(found.into_iter().map(|(at, len)| (base + j + at, len)));
            }
            d.offset += chunk.len();
        }
        assert_eq!(whole.phase(), bytewise.phase());
        assert_eq!(whole.status_flags(), bytewise.status_flags());
        assert_eq!(up.whole, up.bytewise, "commands");
        assert_eq!(down.whole, down.bytewise, "prepare replies");
    }
    // The server's last bytes as the kernel splice keeps them (its last 32), read for the
    // last packet: never a panic, and a reading of flags only from an OK or EOF.
    let tail = server
        .get(server.len().saturating_sub(32)..)
        .unwrap_or_default();
    if let crate::conversation::LastPacket::Ended(_) = crate::conversation::last_packet(tail) {
        assert!(tail.len() >= 9, "{tail:?}");
    }
}

/// `bytes` cut into chunks of 1–16 bytes, each chunk's length taken from its first byte.
fn chunks(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some(&first) = bytes.first() {
        let (head, tail) = bytes.split_at(usize::from(first % 16 + 1).min(bytes.len()));
        out.push(head);
        bytes = tail;
    }
    out
}

/// Writes `bytes`, closes the write side, reads until the other side closes; returns what it
/// read.
async fn play(mut stream: DuplexStream, bytes: Vec<u8>) -> Vec<u8> {
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
    let mut sink = Vec::new();
    let _ = stream.read_to_end(&mut sink).await;
    sink
}

struct OneCompute(Mutex<Option<DuplexStream>>);

impl ComputeConnector for OneCompute {
    type Stream = DuplexStream;

    async fn connect(&self) -> Result<DuplexStream, ConnectError> {
        let next = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        next.ok_or_else(|| ConnectError(std::io::ErrorKind::ConnectionRefused.into()))
    }
}

#[expect(clippy::expect_used, reason = "constant, valid key id")]
fn instance(auth: AuthMode) -> InstanceRuntime {
    let key = PerceptronKey::new(
        KeyId::new("fuzz").expect("valid id"),
        KeySecret::from_bytes([7; 32]),
    );
    crate::in_memory::runtime(auth, KeyRing::new(vec![key]).expect("one key"), TIMEOUT)
}

/// Statement-id translation after a reattach: `pairs` (8 bytes each: client id, compute id)
/// make the translation, then each chunk of `rest` (1–16 bytes) goes through as a client
/// command or, when `server` bit i is set, as the compute's reply to a prepare.
///
/// # Panics
/// If a translation changes anything but the 4 id bytes after the first byte, or changes a
/// chunk it refused.
pub fn statement_ids(pairs: &[u8], server: u64, rest: &[u8]) {
    use crate::statement_ids::StatementIds;
    let ids: Vec<(u32, u32)> = pairs
        .chunks_exact(8)
        .map(|p| {
            let (a, b) = p.split_at(4);
            let word = |w: &[u8]| u32::from_le_bytes(w.try_into().unwrap_or_default());
            (word(a), word(b))
        })
        .collect();
    let Some(mut ids) = StatementIds::after_reattach(&ids) else {
        return;
    };
    for (i, chunk) in chunks(rest).into_iter().enumerate() {
        let mut bytes = chunk.to_vec();
        let len = chunk.len() + usize::from(chunk.first().copied().unwrap_or(0) & 3);
        let result = if server >> (i % 64) & 1 == 1 {
            ids.prepared(&mut bytes)
        } else {
            ids.command(&mut bytes, len)
        };
        assert_eq!(bytes.len(), chunk.len());
        if result.is_err() {
            assert_eq!(bytes, chunk, "a refused chunk is left as it was");
        }
        let unchanged = |r: std::ops::Range<usize>| bytes.get(r.clone()) == chunk.get(r);
        assert!(unchanged(0..1.min(chunk.len())) && unchanged(5.min(chunk.len())..chunk.len()));
    }
}

/// `kill_ids`: a client's command payload searched for the session a `KILL` names, and
/// `id` written over it.
///
/// # Panics
/// If a rewrite changes the payload's length or anything but the id's bytes, or leaves other
/// than `id` there.
pub fn kill_ids(payload: &[u8], id: u32) {
    use crate::kill_ids::{killed_id, rewrite};
    let Some(target) = killed_id(payload) else {
        return;
    };
    let mut bytes = payload.to_vec();
    if !rewrite(&mut bytes, &target, id) {
        assert_eq!(
            bytes, payload,
            "a rewrite that does not fit changes nothing"
        );
        return;
    }
    assert_eq!(bytes.len(), payload.len());
    assert_eq!(bytes.get(..target.at.start), payload.get(..target.at.start));
    assert_eq!(bytes.get(target.at.end..), payload.get(target.at.end..));
    assert_eq!(
        killed_id(&bytes).map(|t| t.id),
        Some(id),
        "the id now named"
    );
}

/// `session_state`: a session's state as the relay reads it from a compute, and the first two
/// responses as a spliced session's evidence (`session_state::evidence`) (four responses,
/// one after another, as MySQL packets: 3-byte length, sequence id, payload; the first byte
/// picks `CLIENT_DEPRECATE_EOF`). Whatever the compute sends, nothing panics, and every
/// statement a reattach would send is one the relay wrote: outside hexadecimal strings and
/// backquoted names, nothing but names, numbers and the statement's own punctuation — no
/// quote, comment, semicolon or backslash a value could have brought in.
pub fn session_state(bytes: &[u8]) {
    use crate::session_state::{self as state, SessionState, UserVariables};
    use authplugin::packet::text_result::{Progress, TextResult};
    let Some((&mode, mut rest)) = bytes.split_first() else {
        return;
    };
    let mut payloads = std::iter::from_fn(|| {
        let (&[a, b, c, _], tail) = rest.split_first_chunk::<4>()?;
        let len = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
        let (payload, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        Some(payload)
    });
    let mut results = Vec::new();
    for _ in 0..4 {
        let mut result = TextResult::new(mode & 1 == 1, state::MAX_STATE_BYTES);
        let rows = loop {
            let Some(payload) = payloads.next() else {
                break None;
            };
            match result.feed(payload) {
                Ok(Progress::More) => {}
                Ok(Progress::Done) => break result.finish().ok(),
                Err(_) => break None,
            }
        };
        results.push(rows.unwrap_or_default());
    }
    let [session, system, listed, exact] = results.as_slice() else {
        return;
    };
    // The first two responses read as a spliced session's evidence, before and after.
    if let (Ok(before), Ok(after)) = (
        state::evidence::Evidence::read(session),
        state::evidence::Evidence::read(system),
    ) {
        let _ = (
            after.left_since(before.mark(), u64::from(mode)),
            after.holds(),
            after.in_transaction(),
        );
    }
    let (Ok(session), Ok(system), Ok(listed)) = (
        state::session(session),
        state::system_variables(system),
        UserVariables::listed(listed),
    ) else {
        return;
    };
    if let Some(query) = listed.exact_query() {
        assert_generated(&query);
    }
    let Ok(user) = listed.exact(exact) else {
        return;
    };
    let fresh = system.clone();
    if let Ok(state) = SessionState::new(session, None, (b"app", None), system, user) {
        for restore in state
            .restore(None, &[])
            .into_iter()
            .chain(state.restore(Some(b"r"), &fresh))
        {
            assert_generated(restore.payload.get(1..).unwrap_or_default());
        }
    }
}

/// Panics unless `sql`, hexadecimal strings and backquoted names left out, is made of names,
/// numbers and `@ , . = ( ) + - < >` only.
fn assert_generated(sql: &[u8]) {
    assert_eq!(foreign_byte(sql), None, "in a generated statement: {sql:?}");
}

/// Where `sql` has a byte [`assert_generated`] does not allow, if anywhere.
fn foreign_byte(sql: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(&c) = sql.get(i) {
        match c {
            b'`' => loop {
                i += 1;
                // An unterminated name is foreign too.
                let Some(b) = sql.get(i) else {
                    return Some(i);
                };
                match (b, sql.get(i + 1)) {
                    (b'`', Some(b'`')) => i += 1,
                    (b'`', _) => break,
                    _ => {}
                }
            },
            b'X' if sql.get(i + 1) == Some(&b'\'') => {
                i += 2;
                while sql.get(i).is_some_and(u8::is_ascii_hexdigit) {
                    i += 1;
                }
                if sql.get(i) != Some(&b'\'') {
                    return Some(i);
                }
            }
            c if c.is_ascii_alphanumeric() || b" _@,.=()+-<>".contains(&c) => {}
            _ => return Some(i),
        }
        i += 1;
    }
    None
}

/// `offload_metadata`: what an offload keeps in the store and beside the data, read back: a
/// manifest (`bytes` with their own digest, so the fuzzer reaches past the digest check) and a
/// lazy restore's sidecar. Whatever decodes must encode to something that decodes the same.
pub fn offload_metadata(bytes: &[u8]) {
    use crate::offload::manifest::{Manifest, hex_sha256};
    use lazy_vfs::sidecar::Sidecar;
    if let Ok(m) = Manifest::decode(bytes, "fuzz", &hex_sha256(bytes)) {
        let again = m.encode();
        assert_eq!(
            Manifest::decode(&again, "fuzz", &hex_sha256(&again)).ok(),
            Some(m)
        );
    }
    if let Ok(s) = Sidecar::decode(bytes) {
        assert_eq!(Sidecar::decode(&s.encode()).ok(), Some(s));
    }
}

/// `range_request`: what the relay's range socket reads from a compute, and what a compute
/// reads back from the relay (`lazy_vfs::range`). Whatever decodes must encode to the same
/// bytes; an answer's head is taken only at the length asked.
pub fn range_request(bytes: &[u8]) {
    use lazy_vfs::range::{HEAD_LEN, Head, Request};
    if let Ok(r) = Request::decode(bytes) {
        let again = r.encode().ok();
        assert_eq!(again.as_ref().map(|a| a.as_slice()), Some(bytes));
    }
    let asked = Request {
        id: "0".repeat(64),
        offset: 0,
        len: 16384,
    };
    if let Some(head) = bytes
        .get(..HEAD_LEN)
        .and_then(|h| <[u8; HEAD_LEN]>::try_from(h).ok())
        && let Ok(decoded) = Head::decode(head, &asked)
    {
        assert_eq!(decoded.encode(), head);
        if let Head::Bytes(n) = decoded {
            assert_eq!(n, asked.len);
        }
    }
}

/// `fleet_seal`: an instance definition read from a fleet's store (anyone who reaches the
/// store can write one). Nothing panics; whatever unseals is a prefix of what was stored, and
/// sealing it again under the same name unseals to it.
pub fn fleet_seal(bytes: &[u8]) {
    use crate::fleet::seal::{seal, unseal};
    let (Ok(ring), Ok(stored)) = (
        authplugin::identity::KeyRing::parse(&format!("fuzz-1 {}", "ab".repeat(32))),
        std::str::from_utf8(bytes),
    ) else {
        return;
    };
    let _ = unseal(None, "shop", stored);
    if let Ok(text) = unseal(Some(&ring), "shop", stored) {
        assert!(stored.starts_with(text));
    }
    let text = stored.split('\n').next().unwrap_or_default();
    let sealed = seal(&ring, "shop", text);
    assert_eq!(
        unseal(Some(&ring), "shop", &sealed).map(str::trim_end),
        Ok(text.trim_end())
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_definition_takes_any_text() {
        for stored in [
            "",
            "a = 1\n",
            "a = 1\n# perceptron-seal v1 fuzz-1 00\n",
            "# perceptron-seal v1 \n\n\r",
            "\n\n# perceptron-seal v1 x y z\n",
        ] {
            fleet_seal(stored.as_bytes());
        }
        fleet_seal(&[0xff, 0xfe]);
    }

    #[test]
    fn the_range_protocol_takes_any_bytes() {
        range_request(b"");
        range_request(&[0; 5]);
        let mut request = b"PLR1".to_vec();
        request.extend_from_slice(&[b'a'; 64]);
        request.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0x40, 0]);
        range_request(&request);
    }

    #[test]
    fn the_login_watch_takes_any_bytes() {
        login_watch(b"", b"");
        login_watch(&[0xff; 64], &[0; 64]);
        let mut client = vec![40, 0, 0, 1, 0x85, 0xa6, 0x0a, 0];
        client.extend_from_slice(&[0; 28]);
        client.extend_from_slice(b"app\0\0");
        login_watch(&client, &[7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn the_conversation_takes_any_bytes_in_any_chunks() {
        conversation(0, b"", b"");
        conversation(1, &[0xff; 64], &[0; 64]);
        // SELECT 1 and its result set, without CLIENT_DEPRECATE_EOF.
        let query = b"\x09\x00\x00\x00\x03SELECT 1";
        let result = b"\x01\x00\x00\x01\x01\x01\x00\x00\x02\x41\x05\x00\x00\x03\xfe\x00\x00\x02\x00\x02\x00\x00\x04\x011\x05\x00\x00\x05\xfe\x00\x00\x02\x00";
        conversation(0, query, result);
        conversation(2, query, result);
    }

    #[test]
    fn garbage_and_silence_end_without_an_accepted_login() {
        assert!(!perceptron_login(b"", b"", false));
        assert!(!perceptron_login(b"GET / HTTP/1.1\r\n\r\n", b"", false));
        assert!(!perceptron_login(&[1, 0, 0, 1, 0], &[0, 0, 0, 0], true));
    }

    /// `[flags][client length u16 LE][client][compute]`, as the `switch_auth` target reads it.
    fn split_switch_input(data: &[u8]) -> Option<(&[u8], &[u8], bool)> {
        let (&flags, rest) = data.split_first()?;
        let (len, rest) = rest.split_first_chunk::<2>()?;
        let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
        let (client, compute) = rest.split_at(split);
        Some((client, compute, flags & 1 == 1))
    }

    fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_le_bytes();
        let mut out = vec![len[0], len[1], len[2], seq];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn a_plaintext_compute_asking_for_the_password_gets_none() {
        let answer = frame(3, b"the-password\0");
        for request in [
            &b"\xfemysql_clear_password\0"[..],
            b"\xfedialog\0\x04Password: ",
        ] {
            let mut compute = frame(2, request);
            compute.extend(frame(4, &[0x00, 0, 0, 2, 0, 0, 0]));
            switch_auth(&answer, &compute, false);
            switch_auth(&answer, &compute, true);
        }
        let mut sha2 = b"\xfecaching_sha2_password\0".to_vec();
        sha2.extend([0x11; 20]);
        sha2.push(0);
        let mut compute = frame(2, &sha2);
        compute.extend(frame(4, &[0x01, 0x04]));
        compute.extend(frame(6, &[0x00, 0, 0, 2, 0, 0, 0]));
        let mut client = frame(3, &[0x22; 32]);
        client.extend(frame(5, b"the-password\0"));
        switch_auth(&client, &compute, false);
        switch_auth(&client, &compute, true);
        switch_auth(b"", b"", false);
    }

    #[test]
    fn a_session_state_from_any_compute_restores_only_what_the_relay_wrote() {
        fn packet(payload: &[u8]) -> Vec<u8> {
            let mut out = vec![payload.len() as u8, 0, 0, 0];
            out.extend_from_slice(payload);
            out
        }
        fn result(rows: &[&[&[u8]]]) -> Vec<u8> {
            let columns = rows.first().map_or(1, |r| r.len());
            let mut out = packet(&[columns as u8]);
            for _ in 0..columns {
                out.extend(packet(b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x00\x00\x00\x00\xfd\x00\x00\x00\x00\x00"));
            }
            out.extend(packet(b"\xfe\x00\x00\x02\x00"));
            for row in rows {
                let mut payload = Vec::new();
                for cell in *row {
                    payload.push(cell.len() as u8);
                    payload.extend_from_slice(cell);
                }
                out.extend(packet(&payload));
            }
            out.extend(packet(b"\xfe\x00\x00\x02\x00"));
            out
        }
        // A hostile compute: names and values full of quotes, comments and semicolons.
        let mut input = vec![0];
        input.extend(result(&[&[b"db`; DROP TABLE t; --", b"app@%"]]));
        input.extend(result(&[&[
            b"SQL_MODE",
            b"SESSION",
            b"SET",
            b"'; DROP TABLE t; -- \\",
            b"",
        ]]));
        input.extend(result(&[
            &[b"x`y; --", b"INT", b"1"],
            &[b"s", b"VARCHAR", b"'"],
        ]));
        input.extend(result(&[&[b"1", b"2", b"2727", b"latin1_bin"]]));
        session_state(&input);
        session_state(&[]);
        session_state(&[1, 200, 0, 0, 0]);
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/session_state");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            session_state(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n >= 3, "corpus at {}", dir.display());
    }

    #[test]
    fn the_switch_auth_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/switch_auth");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            if let Some((client, compute, tls)) = split_switch_input(&data) {
                switch_auth(client, compute, tls);
                n += 1;
            }
        }
        assert!(n >= 20, "corpus at {}", dir.display());
    }

    /// The fuzz target's corpus, replayed as `fuzz_targets/perceptron_login.rs` splits it: a
    /// smoke run that needs neither nightly nor cargo-fuzz.
    #[test]
    fn the_fuzz_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/perceptron_login");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let Some((&mode, rest)) = data.split_first() else {
                continue;
            };
            let Some((len, rest)) = rest.split_first_chunk::<2>() else {
                continue;
            };
            let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
            let (client, compute) = rest.split_at(split);
            let _ = perceptron_login(client, compute, mode & 1 == 1);
            n += 1;
        }
        assert!(n >= 20, "corpus at {}", dir.display());
    }
}
