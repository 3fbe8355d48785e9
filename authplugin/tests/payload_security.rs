//! The relayed-auth payload's security properties (architecture.md §3 threat model).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use authplugin::identity::{KeyId, KeyRing, KeySecret, PerceptronKey};
use authplugin::payload::{self, Binding, DenyReason, LoginClaim};
use authplugin::replay::{ReplayError, ReplayGuard};
use authplugin::{AuthPlugin, Credential, DecodeError, Scramble, native_password};
use zeroize::Zeroizing;

const NOW_MS: u64 = 1_764_000_000_000;
const WINDOW_MS: u64 = 30_000;

fn key(id: &str, byte: u8) -> PerceptronKey {
    PerceptronKey::new(KeyId::new(id).unwrap(), KeySecret::from_bytes([byte; 32]))
}

/// The relay's timed scramble A, drawn 2 s before the payloads are signed.
fn scramble_a() -> Scramble {
    Scramble::with_clock(NOW_MS - 2_000, *b"AAAAAAAAAAAAAA")
}

fn scramble_b1() -> Scramble {
    Scramble::from_bytes(*b"BBBBBBBBBBBBBBBBBBB1")
}

fn claim(password: &[u8]) -> LoginClaim {
    LoginClaim {
        scramble_a: scramble_a(),
        answer_a: Zeroizing::new(native_password::token(password, &scramble_a())),
        client_plugin: AuthPlugin::MysqlNativePassword,
        client_addr: "203.0.113.7:51234".into(),
    }
}

fn binding(scramble_b: &Scramble) -> Binding<'_> {
    Binding {
        scramble_b,
        user: b"app",
        database: b"shop",
    }
}

struct Compute {
    ring: KeyRing,
    replay: ReplayGuard,
    credential: Credential,
}

impl Compute {
    fn new(keys: Vec<PerceptronKey>) -> Self {
        Self {
            ring: KeyRing::new(keys).unwrap(),
            replay: ReplayGuard::new(WINDOW_MS, 1_000),
            credential: Credential::from_password(b"secret"),
        }
    }

    fn verify(&mut self, bytes: &[u8], binding: &Binding<'_>, now: u64) -> Result<(), DenyReason> {
        payload::verify(
            bytes,
            binding,
            &self.ring,
            &mut self.replay,
            now,
            Some(&self.credential),
        )
        .map(|_| ())
    }
}

/// A payload signed at `issued` for a login whose scramble A was drawn 2 s earlier.
fn signed(k: &PerceptronKey, password: &[u8], issued: u64, b: &Binding<'_>) -> Vec<u8> {
    let mut c = claim(password);
    c.scramble_a = Scramble::with_clock(issued - 2_000, *b"AAAAAAAAAAAAAA");
    c.answer_a = Zeroizing::new(native_password::token(password, &c.scramble_a));
    payload::encode_signed(&c, k, issued, b).unwrap()
}

#[test]
fn accepts_a_valid_payload_and_returns_the_claim() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![k]);
    let login = payload::verify(
        &bytes,
        &binding(&b1),
        &c.ring,
        &mut c.replay,
        NOW_MS + 5,
        Some(&c.credential),
    )
    .unwrap();
    assert_eq!(login.key_id.as_str(), "k1");
    assert_eq!(login.claim.scramble_a, scramble_a());
    assert_eq!(login.claim.client_plugin, AuthPlugin::MysqlNativePassword);
    assert_eq!(login.claim.client_addr, "203.0.113.7:51234");
    assert_eq!(
        *login.claim.answer_a,
        native_password::token(b"secret", &scramble_a())
    );
}

#[test]
fn rejects_every_single_byte_flip() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    for i in 0..bytes.len() {
        for mask in [0x01, 0x80, 0xFF] {
            let mut tampered = bytes.clone();
            tampered[i] ^= mask;
            // A fresh compute each time, so a rejection can never be the replay guard's.
            let mut c = Compute::new(vec![k.clone()]);
            assert!(
                c.verify(&tampered, &binding(&b1), NOW_MS).is_err(),
                "flip {mask:#x} at byte {i} accepted"
            );
        }
    }
}

#[test]
fn rejects_payload_bound_to_another_scramble_b() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let b2 = Scramble::from_bytes(*b"BBBBBBBBBBBBBBBBBBB2");
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![k]);
    assert_eq!(
        c.verify(&bytes, &binding(&b2), NOW_MS),
        Err(DenyReason::BadMac)
    );
}

#[test]
fn rejects_wrong_user_or_database() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![k]);
    let other_user = Binding {
        user: b"root",
        ..binding(&b1)
    };
    let other_db = Binding {
        database: b"mysql",
        ..binding(&b1)
    };
    // Moving bytes between user and database must not keep the MAC valid either.
    let shifted = Binding {
        user: b"appshop",
        database: b"",
        ..binding(&b1)
    };
    for b in [other_user, other_db, shifted] {
        assert_eq!(c.verify(&bytes, &b, NOW_MS), Err(DenyReason::BadMac));
    }
}

#[test]
fn rejects_unknown_key_id() {
    let b1 = scramble_b1();
    let bytes = signed(&key("rogue", 9), b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![key("k1", 1)]);
    assert_eq!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::UnknownKeyId(KeyId::new("rogue").unwrap()))
    );
}

#[test]
fn rejects_known_key_id_signed_with_another_secret() {
    let b1 = scramble_b1();
    let bytes = signed(&key("k1", 9), b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![key("k1", 1)]);
    assert_eq!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::BadMac)
    );
}

#[test]
fn rejects_payload_outside_window() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![k.clone()]);
    let stale = signed(&k, b"secret", NOW_MS - WINDOW_MS - 1, &binding(&b1));
    assert_eq!(
        c.verify(&stale, &binding(&b1), NOW_MS),
        Err(DenyReason::Replay(ReplayError::OutsideWindow {
            age_ms: i128::from(WINDOW_MS) + 1
        }))
    );
    let future = signed(&k, b"secret", NOW_MS + WINDOW_MS + 1, &binding(&b1));
    assert!(matches!(
        c.verify(&future, &binding(&b1), NOW_MS),
        Err(DenyReason::Replay(ReplayError::OutsideWindow { .. }))
    ));
    let edge = signed(&k, b"secret", NOW_MS - WINDOW_MS, &binding(&b1));
    assert_eq!(c.verify(&edge, &binding(&b1), NOW_MS), Ok(()));
}

#[test]
fn accepts_once_and_rejects_replay() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    let mut c = Compute::new(vec![k]);
    assert_eq!(c.verify(&bytes, &binding(&b1), NOW_MS), Ok(()));
    assert_eq!(
        c.verify(&bytes, &binding(&b1), NOW_MS + 1),
        Err(DenyReason::Replay(ReplayError::Replayed))
    );
}

#[test]
fn a_stolen_ring_and_a_sniffed_login_give_one_login_in_total() {
    // During a rotation the ring holds two keys: a thief holding both who sniffed one login
    // (scramble A and the client's answer) signs it once under each id, each on a fresh
    // connection of its own (its own scramble B). Only the first is accepted: the guard
    // remembers what was sniffed, scramble A, whatever key signed it.
    let old = key("2026-10", 1);
    let new = key("2026-11", 2);
    let mut c = Compute::new(vec![old.clone(), new.clone()]);
    let b1 = scramble_b1();
    let b2 = Scramble::from_bytes(*b"BBBBBBBBBBBBBBBBBBB2");
    let by_new = payload::encode_signed(&claim(b"secret"), &new, NOW_MS, &binding(&b1)).unwrap();
    let by_old = payload::encode_signed(&claim(b"secret"), &old, NOW_MS, &binding(&b2)).unwrap();
    assert_eq!(c.verify(&by_new, &binding(&b1), NOW_MS), Ok(()));
    assert_eq!(
        c.verify(&by_old, &binding(&b2), NOW_MS + 1),
        Err(DenyReason::Replay(ReplayError::Replayed))
    );
}

#[test]
fn rejects_wrong_answer_and_unknown_user() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![k.clone()]);
    let wrong = signed(&k, b"not-the-password", NOW_MS, &binding(&b1));
    assert!(matches!(
        c.verify(&wrong, &binding(&b1), NOW_MS),
        Err(DenyReason::WrongAnswer(_))
    ));
    let mut other = claim(b"secret");
    other.scramble_a = Scramble::with_clock(NOW_MS, [b'Z'; 14]);
    let bytes = payload::encode_signed(&other, &k, NOW_MS, &binding(&b1)).unwrap();
    let r = payload::verify(&bytes, &binding(&b1), &c.ring, &mut c.replay, NOW_MS, None);
    assert_eq!(r.unwrap_err(), DenyReason::UnknownUser);
}

#[test]
fn a_stolen_key_alone_does_not_log_in() {
    // The attacker has the key but not the password: it can sign any answer it likes, and
    // the compute still checks that answer against the user's hash.
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![k.clone()]);
    let mut forged = claim(b"");
    forged.answer_a = Zeroizing::new(vec![0; 20]);
    let bytes = payload::encode_signed(&forged, &k, NOW_MS, &binding(&b1)).unwrap();
    assert!(matches!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::WrongAnswer(_))
    ));
}

#[test]
fn after_rotation_both_keys_verify_and_the_newest_signs() {
    let old = key("2026-10", 1);
    let new = key("2026-11", 2);
    let ring = KeyRing::new(vec![old.clone(), new.clone()]).unwrap();
    assert_eq!(ring.signing_key().id().as_str(), "2026-11");
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![old.clone(), new.clone()]);
    let by_old = signed(&old, b"secret", NOW_MS, &binding(&b1));
    let mut second = claim(b"secret");
    second.scramble_a = Scramble::with_clock(NOW_MS, [b'C'; 14]);
    second.answer_a = Zeroizing::new(native_password::token(b"secret", &second.scramble_a));
    let by_new =
        payload::encode_signed(&second, ring.signing_key(), NOW_MS, &binding(&b1)).unwrap();
    assert_eq!(c.verify(&by_old, &binding(&b1), NOW_MS), Ok(()));
    assert_eq!(c.verify(&by_new, &binding(&b1), NOW_MS), Ok(()));
    // A compute that has retired the old key refuses it.
    let mut retired = Compute::new(vec![new]);
    assert!(matches!(
        retired.verify(&by_old, &binding(&b1), NOW_MS),
        Err(DenyReason::UnknownKeyId(_))
    ));
}

#[test]
fn rejects_every_truncated_prefix_and_trailing_bytes() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let bytes = signed(&k, b"secret", NOW_MS, &binding(&b1));
    assert!(payload::decode(&bytes).is_ok());
    for n in 0..bytes.len() {
        assert!(payload::decode(&bytes[..n]).is_err(), "prefix {n}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        payload::decode(&longer).unwrap_err(),
        DecodeError::TrailingBytes(1)
    );
    let mut c = Compute::new(vec![k]);
    assert!(matches!(
        c.verify(&longer, &binding(&b1), NOW_MS),
        Err(DenyReason::Malformed(DecodeError::TrailingBytes(1)))
    ));
}

#[test]
fn decodes_the_documented_layout() {
    // A fixed payload written out by hand from architecture.md §3, so the format cannot drift silently.
    let k = key("k1", 0x42);
    let b1 = scramble_b1();
    let c = LoginClaim {
        scramble_a: scramble_a(),
        answer_a: Zeroizing::new(vec![0xAB; 20]),
        client_plugin: AuthPlugin::MysqlNativePassword,
        client_addr: "1.2.3.4:5".into(),
    };
    let bytes = payload::encode_signed(&c, &k, 0x0102_0304_0506_0708, &binding(&b1)).unwrap();
    let mut expected = Vec::new();
    expected.extend_from_slice(b"PCPT\x02");
    expected.extend_from_slice(b"\x02k1");
    expected.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
    expected.extend_from_slice(scramble_a().as_bytes());
    expected.push(20);
    expected.extend_from_slice(&[0xAB; 20]);
    expected.push(21);
    expected.extend_from_slice(b"mysql_native_password");
    expected.push(9);
    expected.extend_from_slice(b"1.2.3.4:5");
    let mac = authplugin::identity::hmac_sha256(
        &[0x42; 32],
        &[
            b"perceptron-dual-auth-v2",
            b"BBBBBBBBBBBBBBBBBBB1",
            b"app\0shop\0",
            &expected,
        ],
    );
    expected.extend_from_slice(&mac);
    assert_eq!(bytes, expected);
}

// ---- payload v2: scramble A's clock ----

#[test]
fn a_stolen_key_and_an_old_sniffed_login_cannot_be_re_signed() {
    // The attacker sniffed a genuine (scramble A, answer) pair 11 minutes ago and holds the
    // relay's key: it signs a fresh payload with today's issued_at for a new connection.
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut old = claim(b"secret");
    old.scramble_a = Scramble::with_clock(NOW_MS - 11 * 60_000, *b"AAAAAAAAAAAAAA");
    old.answer_a = Zeroizing::new(native_password::token(b"secret", &old.scramble_a));
    let bytes = payload::encode_signed(&old, &k, NOW_MS, &binding(&b1)).unwrap();
    let mut c = Compute::new(vec![k.clone()]);
    assert!(matches!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::LoginAge(payload::LoginAgeError::TooOld { .. }))
    ));
    // Held the longest a relay may hold a login: still accepted.
    let mut held = claim(b"secret");
    held.scramble_a = Scramble::with_clock(NOW_MS - payload::MAX_LOGIN_AGE_MS, *b"AAAAAAAAAAAAAA");
    held.answer_a = Zeroizing::new(native_password::token(b"secret", &held.scramble_a));
    let bytes = payload::encode_signed(&held, &k, NOW_MS, &binding(&b1)).unwrap();
    assert_eq!(c.verify(&bytes, &binding(&b1), NOW_MS), Ok(()));
}

#[test]
fn a_pair_is_remembered_for_as_long_as_a_re_signed_copy_could_pass() {
    // Accepted once; five minutes later (far past the 30 s window, within the login age) the
    // same pair re-signed with a fresh issued_at is still refused as a replay.
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![k.clone()]);
    let first = payload::encode_signed(&claim(b"secret"), &k, NOW_MS, &binding(&b1)).unwrap();
    assert_eq!(c.verify(&first, &binding(&b1), NOW_MS), Ok(()));
    let later = NOW_MS + 5 * 60_000;
    let again = payload::encode_signed(&claim(b"secret"), &k, later, &binding(&b1)).unwrap();
    assert_eq!(
        c.verify(&again, &binding(&b1), later),
        Err(DenyReason::Replay(ReplayError::Replayed))
    );
}

#[test]
fn untimed_and_future_scrambles_and_v1_payloads_are_refused() {
    let k = key("k1", 1);
    let b1 = scramble_b1();
    let mut c = Compute::new(vec![k.clone()]);
    let mut untimed = claim(b"secret");
    untimed.scramble_a = Scramble::from_bytes([b'$'; 20]);
    let bytes = payload::encode_signed(&untimed, &k, NOW_MS, &binding(&b1)).unwrap();
    assert_eq!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::LoginAge(payload::LoginAgeError::Untimed))
    );
    let mut future = claim(b"secret");
    future.scramble_a = Scramble::with_clock(NOW_MS + 5_000, *b"AAAAAAAAAAAAAA");
    let bytes = payload::encode_signed(&future, &k, NOW_MS, &binding(&b1)).unwrap();
    assert!(matches!(
        c.verify(&bytes, &binding(&b1), NOW_MS),
        Err(DenyReason::LoginAge(
            payload::LoginAgeError::AfterIssue { .. }
        ))
    ));
    let mut v1 = signed(&k, b"secret", NOW_MS, &binding(&b1));
    v1[4] = 1;
    assert_eq!(
        c.verify(&v1, &binding(&b1), NOW_MS),
        Err(DenyReason::Malformed(DecodeError::InvalidValue("version")))
    );
}
