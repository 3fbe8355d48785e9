//! The plugin's decision on one login, without any FFI: the challenge it sent, the reply it
//! read and what the server knows about the account go in; an acceptance or a precise refusal
//! comes out.
//!
//! The challenge is scramble B, offered under `mysql_native_password`. The reply is either
//! - a relay's Hello ([`answer_hello`]): the relay asks the plugin to prove it holds the
//!   perceptron key before it sends anything of the client's; the plugin answers with a proof
//!   bound to the Hello's nonce and B, and the relay's next reply is the payload;
//! - a relayed-auth payload (architecture.md §3): longer than a native token and starting with the
//!   payload magic — a native token is exactly 20 bytes (or none), so the two never collide;
//! - or a native answer to B from a stock client on the direct route.
//!
//! Every refusal becomes the same ER_ACCESS_DENIED_ERROR for the client (the server sends it);
//! [`Refusal`] carries the reason for the error log only.

use std::sync::{Mutex, PoisonError};

use authplugin::compute_proof::Hello;
use authplugin::native_password::NATIVE_TOKEN_LEN;
use authplugin::payload::{self, Binding, MAX_PAYLOAD_LEN};
use authplugin::ticket_store::Tickets;
use authplugin::{AuthPlugin, KeyId, KeyRing, ReplayGuard, Scramble, resume};

use crate::stored_hash;

/// How the login reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A relay answered the challenge with a relayed-auth payload.
    Relayed,
    /// A client answered the challenge itself (`mysql_native_password`).
    Direct,
}

impl Route {
    /// The route named for a log line.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Relayed => "relayed",
            Self::Direct => "direct",
        }
    }

    /// Tells the routes apart by the reply's shape.
    #[must_use]
    pub fn of_reply(reply: &[u8]) -> Self {
        if reply.len() > NATIVE_TOKEN_LEN
            && (reply.starts_with(&payload::MAGIC) || resume::is_resume(reply))
        {
            Self::Relayed
        } else {
            Self::Direct
        }
    }
}

/// One login as the plugin sees it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// Scramble B, the challenge this plugin sent.
    pub challenge: &'a Scramble,
    /// The reply to it.
    pub reply: &'a [u8],
    /// The user name of the login.
    pub user: &'a [u8],
    /// The database named in the login (empty for none); `None` when this server's layout
    /// does not let the plugin read it, which refuses relayed logins.
    pub database: Option<&'a [u8]>,
    /// The account's stored hash after `preprocess_hash`.
    pub stored: &'a [u8],
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub now_ms: u64,
}

/// The server-wide settings a decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// `perceptron_dual_require_relay`: refuse direct (native) logins.
    pub require_relay: bool,
}

/// Where tickets come from: this server's store and the user's name as text.
#[derive(Debug, Clone, Copy)]
pub struct TicketIssuer<'a> {
    /// The store (`perceptron_dual_ticket_key_file`).
    pub tickets: &'a Tickets,
}

/// A login the plugin accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Relayed or direct.
    pub route: Route,
    /// For a relayed login: the key that signed it.
    pub key_id: Option<KeyId>,
    /// For a relayed login: the client's address as the relay saw it.
    pub client_addr: Option<String>,
    /// The session's resumption ticket, for the relay, to send before the OK: issued when
    /// the relay asked for one and this server issues tickets, and on every reattach.
    pub ticket: Option<Vec<u8>>,
    /// A reattach with a ticket (docs/protocol.md, "Resumable sessions").
    pub resumed: bool,
}

/// A login the plugin refuses, and why (for the error log only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Relayed or direct.
    pub route: Route,
    /// A fixed label.
    pub kind: &'static str,
    /// The precise reason. Never a secret.
    pub detail: String,
}

/// The proof that answers a relay's Hello for `challenge`, or `None` when `reply` is not a
/// Hello. The relay verifies it before sending the client's login (`compute_proof`).
///
/// # Errors
/// A [`Refusal`] (`malformed`) for bytes that claim to be a Hello and are not one.
pub fn answer_hello(
    reply: &[u8],
    challenge: &Scramble,
    ring: &KeyRing,
) -> Option<Result<Vec<u8>, Refusal>> {
    if !Hello::is_hello(reply) {
        return None;
    }
    Some(
        Hello::decode(reply)
            .map(|hello| hello.prove(challenge, ring))
            .map_err(|e| Refusal {
                route: Route::Relayed,
                kind: "malformed",
                detail: format!("malformed relay hello: {e}"),
            }),
    )
}

/// Whether the client sent a password at all, for "(using password: YES|NO)".
#[must_use]
pub fn using_password(reply: &[u8]) -> bool {
    match Route::of_reply(reply) {
        Route::Direct => !reply.is_empty(),
        Route::Relayed => payload::decode(reply).map_or(true, |p| !p.answer_a.is_empty()),
    }
}

/// Decides one login.
///
/// # Errors
/// [`Refusal`] with the first check that failed.
pub fn decide(
    attempt: &Attempt<'_>,
    policy: Policy,
    ring: &KeyRing,
    replay: &Mutex<ReplayGuard>,
    issuer: Option<TicketIssuer<'_>>,
) -> Result<Accepted, Refusal> {
    let route = Route::of_reply(attempt.reply);
    let refuse = |kind: &'static str, detail: String| Refusal {
        route,
        kind,
        detail,
    };
    let credential = stored_hash::credential(attempt.stored).map_err(|e| {
        refuse(
            "stored_hash",
            format!("account's stored hash is unusable: {e}"),
        )
    })?;
    match route {
        Route::Direct => {
            if policy.require_relay {
                return Err(refuse(
                    "relay_required",
                    "direct login refused: perceptron_dual_require_relay is ON".into(),
                ));
            }
            if !attempt.reply.is_empty() && attempt.reply.len() != NATIVE_TOKEN_LEN {
                return Err(refuse(
                    "malformed",
                    format!(
                        "reply of {} bytes is neither a native answer nor a relayed-auth payload",
                        attempt.reply.len()
                    ),
                ));
            }
            credential
                .check_answer(
                    AuthPlugin::MysqlNativePassword,
                    attempt.challenge,
                    attempt.reply,
                )
                .map_err(|e| refuse("wrong_answer", format!("client answer refused: {e}")))?;
            Ok(Accepted {
                route,
                key_id: None,
                client_addr: None,
                ticket: None,
                resumed: false,
            })
        }
        Route::Relayed => {
            let database = attempt.database.ok_or_else(|| {
                refuse(
                    "database_unreadable",
                    "relayed login refused: this server's login state does not have the \
                     layout the plugin was built for, so the database cannot be bound"
                        .into(),
                )
            })?;
            let user = core::str::from_utf8(attempt.user)
                .map_err(|_| refuse("malformed", "user name is not UTF-8".into()));
            if resume::is_resume(attempt.reply) {
                return reattach(attempt, database, ring, replay, issuer, user?);
            }
            if attempt.reply.len() > MAX_PAYLOAD_LEN {
                return Err(refuse(
                    "malformed",
                    "payload longer than the format allows".into(),
                ));
            }
            let binding = Binding {
                scramble_b: attempt.challenge,
                user: attempt.user,
                database,
            };
            let verified = {
                let mut guard = replay.lock().unwrap_or_else(PoisonError::into_inner);
                payload::verify(
                    attempt.reply,
                    &binding,
                    ring,
                    &mut guard,
                    attempt.now_ms,
                    Some(&credential),
                )
            }
            .map_err(|reason| refuse(reason.kind(), reason.to_string()))?;
            let client_addr = verified.claim.client_addr.clone();
            let ticket = match (verified.wants_ticket, issuer, user) {
                (true, Some(issuer), Ok(user)) => issuer.tickets.issue(
                    user,
                    &client_addr,
                    attempt.now_ms,
                    attempt.now_ms,
                    attempt.stored,
                ),
                _ => None,
            };
            Ok(Accepted {
                route,
                key_id: Some(verified.key_id),
                client_addr: Some(client_addr),
                ticket,
                resumed: false,
            })
        }
    }
}

/// A reattach: the relay's identity over this challenge, then this server's ticket, redeemed
/// once against the account's stored hash as it is now (a changed password refuses it).
fn reattach(
    attempt: &Attempt<'_>,
    database: &[u8],
    ring: &KeyRing,
    replay: &Mutex<ReplayGuard>,
    issuer: Option<TicketIssuer<'_>>,
    user: &str,
) -> Result<Accepted, Refusal> {
    let refuse = |kind: &'static str, detail: String| Refusal {
        route: Route::Relayed,
        kind,
        detail,
    };
    let issuer = issuer.ok_or_else(|| {
        refuse(
            "no_ticket_key",
            "reattach refused: perceptron_dual_ticket_key_file is not set".into(),
        )
    })?;
    let binding = Binding {
        scramble_b: attempt.challenge,
        user: attempt.user,
        database,
    };
    let reattached = issuer
        .tickets
        .reattach(
            attempt.reply,
            &binding,
            ring,
            replay,
            user,
            Some(attempt.stored),
            attempt.now_ms,
        )
        .map_err(|r| refuse(r.kind, r.detail))?;
    Ok(Accepted {
        route: Route::Relayed,
        key_id: Some(reattached.relay_key_id),
        client_addr: Some(reattached.client_addr),
        ticket: reattached.next_ticket,
        resumed: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use authplugin::payload::LoginClaim;
    use authplugin::{PerceptronKey, native_password};
    use zeroize::Zeroizing;

    const NOW: u64 = 1_796_097_600_000;

    fn ring(ids: &[&str]) -> KeyRing {
        KeyRing::new(
            ids.iter()
                .map(|id| {
                    // A secret per id, so two rings agree exactly on the ids they share.
                    let mut secret = [0u8; 32];
                    secret[..id.len()].copy_from_slice(id.as_bytes());
                    PerceptronKey::new(
                        KeyId::new(id).unwrap(),
                        authplugin::KeySecret::from_bytes(secret),
                    )
                })
                .collect(),
        )
        .unwrap()
    }

    fn guard() -> Mutex<ReplayGuard> {
        Mutex::new(ReplayGuard::new(60_000, 1_000))
    }

    fn stored(password: &[u8]) -> Vec<u8> {
        stored_hash::preprocess(stored_hash::hash_password(password).as_bytes()).unwrap()
    }

    struct Relayed {
        scramble_a: Scramble,
        payload: Vec<u8>,
    }

    fn relayed(
        signer: &KeyRing,
        b: &Scramble,
        user: &[u8],
        db: &[u8],
        password: &[u8],
        issued: u64,
    ) -> Relayed {
        let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, issued);
        let claim = LoginClaim {
            scramble_a: scramble_a.clone(),
            answer_a: Zeroizing::new(native_password::token(password, &scramble_a)),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "10.0.0.7:51234".into(),
        };
        let binding = Binding {
            scramble_b: b,
            user,
            database: db,
        };
        let payload =
            payload::encode_signed(&claim, signer.signing_key(), issued, &binding).unwrap();
        Relayed {
            scramble_a,
            payload,
        }
    }

    fn attempt<'a>(b: &'a Scramble, reply: &'a [u8], stored: &'a [u8]) -> Attempt<'a> {
        Attempt {
            challenge: b,
            reply,
            user: b"app",
            database: Some(b"shop"),
            stored,
            now_ms: NOW,
        }
    }

    const OPEN: Policy = Policy {
        require_relay: false,
    };

    /// A relay that asks gets a ticket with the login; the ticket reattaches once, and a
    /// changed password (another stored hash) refuses it.
    #[test]
    fn issues_a_ticket_and_redeems_it_once() {
        let keys = ring(&["k1"]);
        let dir = std::env::temp_dir().join(format!("plugin-tickets-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let tickets =
            Tickets::open(ring(&["t1"]).clone(), "demo".into(), 60_000, &dir, NOW).unwrap();
        let issuer = Some(TicketIssuer { tickets: &tickets });
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let pw = stored(b"pw");
        let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, NOW - 5);
        let claim = LoginClaim {
            scramble_a: scramble_a.clone(),
            answer_a: Zeroizing::new(native_password::token(b"pw", &scramble_a)),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "10.0.0.7:51234".into(),
        };
        let binding = Binding {
            scramble_b: &b,
            user: b"app",
            database: b"shop",
        };
        let login = payload::encode_signed_with(
            &claim,
            keys.signing_key(),
            NOW - 5,
            &binding,
            Some(payload::FLAG_WANTS_TICKET),
        )
        .unwrap();
        let ok = decide(&attempt(&b, &login, &pw), OPEN, &keys, &guard(), issuer).unwrap();
        let ticket = ok.ticket.unwrap();
        assert!(!ok.resumed);

        let b2 = Scramble::generate(&mut rand::rngs::OsRng);
        let binding2 = Binding {
            scramble_b: &b2,
            ..binding
        };
        let resume = resume::encode_signed(
            keys.signing_key(),
            NOW,
            "10.0.0.7:51234",
            &ticket,
            &binding2,
        )
        .unwrap();
        let changed = stored(b"new");
        let no = decide(
            &attempt(&b2, &resume, &changed),
            OPEN,
            &keys,
            &guard(),
            issuer,
        )
        .unwrap_err();
        assert_eq!(no.kind, "ticket_credential_changed");
        let ok = decide(&attempt(&b2, &resume, &pw), OPEN, &keys, &guard(), issuer).unwrap();
        assert!(ok.resumed && ok.ticket.is_some());
        assert_eq!(ok.route, Route::Relayed);
        let again = decide(&attempt(&b2, &resume, &pw), OPEN, &keys, &guard(), issuer).unwrap_err();
        assert_eq!(again.kind, "ticket_used");
        // Without a ticket key the plugin refuses every reattach.
        let none = decide(&attempt(&b2, &resume, &pw), OPEN, &keys, &guard(), None).unwrap_err();
        assert_eq!(none.kind, "no_ticket_key");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn accepts_a_relayed_login_once() {
        let keys = ring(&["k1"]);
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let pw = stored(b"pw");
        let r = relayed(&keys, &b, b"app", b"shop", b"pw", NOW - 5);
        let replay = guard();
        let ok = decide(&attempt(&b, &r.payload, &pw), OPEN, &keys, &replay, None).unwrap();
        assert_eq!(ok.route, Route::Relayed);
        assert_eq!(ok.key_id.unwrap().as_str(), "k1");
        assert_eq!(ok.client_addr.as_deref(), Some("10.0.0.7:51234"));
        let again = decide(&attempt(&b, &r.payload, &pw), OPEN, &keys, &replay, None).unwrap_err();
        assert_eq!(again.kind, "replayed");
        assert!(r.scramble_a.as_bytes().len() == 20);
    }

    #[test]
    fn a_sniffed_login_signed_under_each_key_of_the_ring_is_accepted_once() {
        // A stolen ring of two keys (a rotation) and one sniffed login: the same scramble A
        // and answer, signed once per key id, each bound to a connection of its own.
        let keys = ring(&["k1", "k2"]);
        let pw = stored(b"pw");
        let replay = guard();
        let first = Scramble::generate(&mut rand::rngs::OsRng);
        let r = relayed(&keys, &first, b"app", b"shop", b"pw", NOW - 5);
        let ok = decide(
            &attempt(&first, &r.payload, &pw),
            OPEN,
            &keys,
            &replay,
            None,
        )
        .unwrap();
        assert_eq!(ok.key_id.unwrap().as_str(), "k2", "the newest key signs");
        let claim = LoginClaim {
            scramble_a: r.scramble_a.clone(),
            answer_a: Zeroizing::new(native_password::token(b"pw", &r.scramble_a)),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "10.0.0.7:51234".into(),
        };
        let second = Scramble::generate(&mut rand::rngs::OsRng);
        let older = keys.get(&KeyId::new("k1").unwrap()).unwrap();
        let binding = Binding {
            scramble_b: &second,
            user: b"app",
            database: b"shop",
        };
        let resigned = payload::encode_signed(&claim, older, NOW - 5, &binding).unwrap();
        let again = decide(
            &attempt(&second, &resigned, &pw),
            OPEN,
            &keys,
            &replay,
            None,
        )
        .unwrap_err();
        assert_eq!(again.kind, "replayed");
    }

    #[test]
    fn refuses_each_kind_of_bad_relayed_login_with_its_reason() {
        let keys = ring(&["k1"]);
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let pw = stored(b"pw");
        let check = |payload: &[u8], a: Attempt<'_>, ring: &KeyRing, kind: &str| {
            let a = Attempt {
                reply: payload,
                ..a
            };
            let refusal = decide(&a, OPEN, ring, &guard(), None).unwrap_err();
            assert_eq!(refusal.kind, kind, "{}", refusal.detail);
            assert_eq!(refusal.route, Route::Relayed);
        };
        let base = attempt(&b, b"", &pw);
        // Signed by a key this server does not have.
        let unknown = relayed(&ring(&["k1", "zz"]), &b, b"app", b"shop", b"pw", NOW);
        check(&unknown.payload, base, &keys, "unknown_key_id");
        // Forged: the right key id, another secret.
        let mut forged = relayed(&ring(&["k2"]), &b, b"app", b"shop", b"pw", NOW).payload;
        // magic (4), version (1), key id length (1), key id.
        assert_eq!(&forged[6..8], b"k2");
        forged[6..8].copy_from_slice(b"k1");
        check(&forged, base, &keys, "bad_mac");
        let mut tampered = relayed(&keys, &b, b"app", b"shop", b"pw", NOW).payload;
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        check(&tampered, base, &keys, "bad_mac");
        // Made for another user, another database, another connection (scramble B).
        let for_bob = relayed(&keys, &b, b"bob", b"shop", b"pw", NOW).payload;
        check(&for_bob, base, &keys, "bad_mac");
        let for_other_db = relayed(&keys, &b, b"app", b"mysql", b"pw", NOW).payload;
        check(&for_other_db, base, &keys, "bad_mac");
        let other_b = Scramble::generate(&mut rand::rngs::OsRng);
        let for_other_conn = relayed(&keys, &other_b, b"app", b"shop", b"pw", NOW).payload;
        check(&for_other_conn, base, &keys, "bad_mac");
        // Expired, and from the future.
        let old = relayed(&keys, &b, b"app", b"shop", b"pw", NOW - 61_000).payload;
        check(&old, base, &keys, "outside_window");
        let future = relayed(&keys, &b, b"app", b"shop", b"pw", NOW + 61_000).payload;
        check(&future, base, &keys, "outside_window");
        // The client's own answer is wrong.
        let wrong = relayed(&keys, &b, b"app", b"shop", b"nope", NOW).payload;
        check(&wrong, base, &keys, "wrong_answer");
        // Truncated.
        let good = relayed(&keys, &b, b"app", b"shop", b"pw", NOW).payload;
        check(&good[..good.len() - 1], base, &keys, "malformed");
        // No readable database on this server.
        check(
            &good,
            Attempt {
                database: None,
                ..base
            },
            &keys,
            "database_unreadable",
        );
    }

    #[test]
    fn a_key_from_the_ring_rotation_is_accepted() {
        let compute = ring(&["old", "new"]);
        let relay_old = ring(&["old"]);
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let pw = stored(b"pw");
        let r = relayed(&relay_old, &b, b"app", b"shop", b"pw", NOW);
        let ok = decide(
            &attempt(&b, &r.payload, &pw),
            OPEN,
            &compute,
            &guard(),
            None,
        )
        .unwrap();
        assert_eq!(ok.key_id.unwrap().as_str(), "old");
    }

    #[test]
    fn direct_logins_use_the_native_answer_unless_relays_are_required() {
        let keys = ring(&["k1"]);
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let pw = stored(b"pw");
        let answer = native_password::token(b"pw", &b);
        let ok = decide(&attempt(&b, &answer, &pw), OPEN, &keys, &guard(), None).unwrap();
        assert_eq!(ok.route, Route::Direct);
        let wrong = native_password::token(b"pX", &b);
        let no = decide(&attempt(&b, &wrong, &pw), OPEN, &keys, &guard(), None).unwrap_err();
        assert_eq!((no.kind, no.route), ("wrong_answer", Route::Direct));
        let strict = Policy {
            require_relay: true,
        };
        let no = decide(&attempt(&b, &answer, &pw), strict, &keys, &guard(), None).unwrap_err();
        assert_eq!(no.kind, "relay_required");
        // Relayed logins still pass under the strict policy.
        let r = relayed(&keys, &b, b"app", b"shop", b"pw", NOW);
        assert!(decide(&attempt(&b, &r.payload, &pw), strict, &keys, &guard(), None).is_ok());
    }

    #[test]
    fn empty_passwords_and_odd_replies() {
        let keys = ring(&["k1"]);
        let b = Scramble::generate(&mut rand::rngs::OsRng);
        let empty = stored(b"");
        assert!(decide(&attempt(&b, b"", &empty), OPEN, &keys, &guard(), None).is_ok());
        let pw = stored(b"pw");
        assert_eq!(
            decide(&attempt(&b, b"", &pw), OPEN, &keys, &guard(), None)
                .unwrap_err()
                .kind,
            "wrong_answer"
        );
        assert_eq!(
            decide(&attempt(&b, &[7; 33], &pw), OPEN, &keys, &guard(), None)
                .unwrap_err()
                .kind,
            "malformed"
        );
        assert_eq!(
            decide(&attempt(&b, b"x", &[1, 2, 3]), OPEN, &keys, &guard(), None)
                .unwrap_err()
                .kind,
            "stored_hash"
        );
    }

    #[test]
    fn tells_routes_apart_by_shape() {
        assert_eq!(Route::of_reply(b""), Route::Direct);
        assert_eq!(Route::of_reply(b"PCPT0123456789012345"), Route::Direct);
        assert_eq!(Route::of_reply(b"PCPT01234567890123456"), Route::Relayed);
        assert!(!using_password(b""));
        assert!(using_password(&[1; 20]));
    }

    #[test]
    fn a_hello_is_answered_with_a_proof_and_anything_else_is_not() {
        let ring = ring(&["k1"]);
        let b = Scramble::from_bytes([0x42; 20]);
        let hello = authplugin::compute_proof::Hello::generate(
            KeyId::new("k1").unwrap(),
            &mut rand::rngs::OsRng,
        );
        let proof = answer_hello(&hello.encode(), &b, &ring).unwrap().unwrap();
        assert_eq!(
            hello.verify_proof(&proof, &b, &ring),
            Ok(KeyId::new("k1").unwrap())
        );
        // Native answers and payloads are not Hellos.
        assert!(answer_hello(&[0x11; 20], &b, &ring).is_none());
        assert!(answer_hello(b"", &b, &ring).is_none());
        assert!(answer_hello(b"PCPT\x02\x02k1", &b, &ring).is_none());
        // A truncated Hello is refused as malformed.
        let bytes = hello.encode();
        let refusal = answer_hello(&bytes[..bytes.len() - 1], &b, &ring)
            .unwrap()
            .unwrap_err();
        assert_eq!((refusal.route, refusal.kind), (Route::Relayed, "malformed"));
    }
}
