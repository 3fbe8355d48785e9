//! Dual verification (architecture.md §3, P7) and direct logins, as one decision: [`decide`] takes
//! what opensrv hands the `authenticate` hook plus the client's HandshakeResponse41 (teed by
//! [`crate::stream`]) and returns a [`Login`] or a [`Denial`].
//!
//! - Relayed login: client plugin `perceptron_dual_auth`; the auth data is the relayed-auth
//!   payload, verified with `authplugin::payload::verify` (key ring, MAC over scramble B, user
//!   and database, freshness, replay, then answer A against the stored hash).
//! - Direct login: `mysql_native_password`, or the `caching_sha2_password` fast path when the
//!   client answered with that plugin, checked against the stored hash with this
//!   connection's scramble.
//!
//! Every refusal gets the same client-facing ERR 1045 (28000) `Access denied for user
//! 'u'@'host' (using password: YES|NO)`; the precise reason goes to the log only.

use std::net::IpAddr;
use std::sync::{Mutex, OnceLock, PoisonError};

use authplugin::packet::capabilities::{
    CLIENT_COMPRESS, CLIENT_CONNECT_WITH_DB, CLIENT_DEPRECATE_EOF, CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use authplugin::packet::{ErrPacket, HandshakeResponse41};
use authplugin::payload::{self, Binding, MAX_PAYLOAD_LEN, PLUGIN_NAME};
use authplugin::resume;
use authplugin::{AuthPlugin, Credential, KeyRing, ReplayGuard, Scramble};

use crate::accounts::{AccountStore, Role};
use crate::tickets::Tickets;

/// How the client reached the shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Straight to the shim (or through the relay's raw L4 route).
    Direct,
    /// Through the relay's perceptron route, with a relayed-auth payload.
    Relayed,
}

impl Route {
    /// A fixed label for logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Relayed => "relayed",
        }
    }
}

/// A login that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// The account name.
    pub user: String,
    /// The client's host, as `USER()` shows it: the peer address, or for a relayed login
    /// the client address the relay vouched for.
    pub host: String,
    /// The account's role.
    pub role: Role,
    /// Direct or relayed.
    pub route: Route,
    /// The plugin the client's answer was made with.
    pub plugin: AuthPlugin,
    /// The database named in the login, if any.
    pub database: Option<String>,
    /// The session's resumption ticket, for the relay (sent before the login's OK): issued
    /// when the relay asked for one, and on every reattach.
    pub ticket: Option<Vec<u8>>,
    /// This login reattached a session with a ticket (the client's answer was checked at
    /// its first login).
    pub resumed: bool,
    /// A relayed login: the connection id the relay greeted its client with (the relay's
    /// `_perceptron_connection_id` attribute), for the session to take as its own.
    pub client_connection_id: Option<u32>,
    /// The TLS version the connection negotiated with the shim (`Ssl_version`: `TLSv1.3`),
    /// none in plaintext; set by the server once the login is accepted.
    pub tls_version: Option<&'static str>,
}

/// A refused login: what to log, and what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// A fixed label (metrics and log field).
    pub kind: &'static str,
    /// The precise reason, for the log only. Never holds a secret.
    pub detail: String,
    /// The user name as the client sent it (sanitised for logs and the message).
    pub user: String,
    /// Whether the client sent a non-empty answer.
    pub using_password: bool,
    /// Direct or relayed.
    pub route: Route,
}

/// [`Denial::kind`] of a login that asks for the compressed protocol, which the shim does not
/// offer ([`SERVER_CAPABILITIES`]): mysql-connector-python's and node-mysql2's `compress`
/// compress whatever the greeting offered, and the connection would hang.
pub const COMPRESSION_UNOFFERED: &str = "compression_unoffered";

impl Denial {
    /// The ERR payload the client gets: 1045 mimicking MySQL's message, or 1043 for a login
    /// that asks for compression.
    #[must_use]
    pub fn err_payload(&self, peer_ip: IpAddr) -> Vec<u8> {
        if self.kind == COMPRESSION_UNOFFERED {
            let (code, state) = authplugin::packet::err::codes::ER_HANDSHAKE_ERROR;
            return ErrPacket::new(
                code,
                state,
                "Bad handshake: the compressed protocol is not offered here; connect without \
                 compression",
            )
            .to_bytes();
        }
        let (code, state) = authplugin::packet::err::codes::ER_ACCESS_DENIED_ERROR;
        ErrPacket::new(
            code,
            state,
            &format!(
                "Access denied for user '{}'@'{}' (using password: {})",
                self.user,
                peer_ip,
                if self.using_password { "YES" } else { "NO" }
            ),
        )
        .to_bytes()
    }
}

/// The server-wide inputs of a decision.
#[derive(Debug)]
pub struct Verifier<'a> {
    /// The account store.
    pub accounts: &'a AccountStore,
    /// The perceptron key ring; `None` refuses every relayed login.
    pub key_ring: Option<&'a KeyRing>,
    /// The process-wide replay window.
    pub replay: &'a Mutex<ReplayGuard>,
    /// This compute's tickets; `None` refuses every reattach.
    pub tickets: Option<&'a Tickets>,
}

/// What opensrv passes `authenticate`, plus the teed handshake.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The client's first packet (its HandshakeResponse41), if it was captured.
    pub handshake: Option<&'a [u8]>,
    /// The plugin opensrv authenticates with (the one the shim chose for this client).
    pub plugin: &'a str,
    /// The user name opensrv parsed.
    pub username: &'a [u8],
    /// This connection's scramble (B, for a relayed login).
    pub scramble: &'a Scramble,
    /// The answer (or the relayed-auth payload).
    pub auth_data: &'a [u8],
    /// The TCP peer.
    pub peer_ip: IpAddr,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub now_ms: u64,
}

/// The capabilities opensrv-mysql 0.7 advertises in its greeting (it does not let a shim
/// change them).
pub const SERVER_CAPABILITIES: u32 = CLIENT_PROTOCOL_41
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_DEPRECATE_EOF;

/// Decodes a client's HandshakeResponse41 strictly, with the capabilities both sides have
/// (`authplugin`'s [`HandshakeResponse41::decode_for_server`]). Clients announce flags the
/// server did not offer (the `mariadb` CLI sets `CLIENT_CONNECT_ATTRS`) but only write the
/// fields of the flags in common, as MySQL's protocol says; the decoder also tolerates
/// mysql-connector-python's connect attributes sent although the server did not offer them.
/// The answer it copies is wiped when the result is dropped.
///
/// # Errors
/// The decoder's error for a malformed packet.
pub fn decode_handshake(payload: &[u8]) -> Result<HandshakeResponse41, authplugin::DecodeError> {
    HandshakeResponse41::decode_for_server(payload, SERVER_CAPABILITIES)
}

/// The plugin the shim authenticates a client with: the one it named, when the shim can
/// check it (so opensrv never switches plugins for these), else `mysql_native_password`
/// (opensrv then sends an AuthSwitchRequest if the client's answer was empty).
#[must_use]
pub fn plugin_for_client(handshake: Option<&[u8]>) -> &'static str {
    let named = handshake
        .and_then(|h| decode_handshake(h).ok())
        .and_then(|h| h.client_plugin_name);
    match named.as_deref() {
        Some(n) if n == PLUGIN_NAME.as_bytes() => PLUGIN_NAME,
        Some(b"caching_sha2_password") => AuthPlugin::CachingSha2Password.name(),
        _ => AuthPlugin::MysqlNativePassword.name(),
    }
}

/// User names as they appear in logs and messages: printable ASCII, at most 64 characters.
#[must_use]
pub fn sanitize_user(raw: &[u8]) -> String {
    raw.iter()
        .take(64)
        .map(|&b| {
            if b.is_ascii_graphic() && b != b'\'' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// Decides a login.
///
/// # Errors
/// [`Denial`] with the precise reason.
pub fn decide(v: &Verifier<'_>, a: &Attempt<'_>) -> Result<Login, Denial> {
    // A relay that asked for the proof answers the auth switch (to `mysql_native_password`)
    // with its payload: its login still names the relayed plugin.
    let relayed = a.plugin == PLUGIN_NAME || plugin_for_client(a.handshake) == PLUGIN_NAME;
    let route = if relayed {
        Route::Relayed
    } else {
        Route::Direct
    };
    let user_label = sanitize_user(a.username);
    let using_password = if relayed {
        payload::decode(a.auth_data).map_or(!a.auth_data.is_empty(), |p| !p.answer_a.is_empty())
    } else {
        !a.auth_data.is_empty()
    };
    let deny = |kind: &'static str, detail: String| Denial {
        kind,
        detail,
        user: user_label.clone(),
        using_password,
        route,
    };

    let handshake = a
        .handshake
        .ok_or_else(|| deny("malformed_handshake", "no complete login packet".into()))?;
    let handshake = decode_handshake(handshake)
        .map_err(|e| deny("malformed_handshake", format!("login packet: {e}")))?;
    if handshake.username != a.username {
        return Err(deny(
            "malformed_handshake",
            "login packet and parsed user differ".into(),
        ));
    }
    if handshake.client_flag & CLIENT_COMPRESS & !SERVER_CAPABILITIES != 0 {
        return Err(deny(
            COMPRESSION_UNOFFERED,
            "the login asks for compression, which is not offered".into(),
        ));
    }
    let database = handshake.database.clone().unwrap_or_default();

    let user = std::str::from_utf8(a.username).ok();
    let account = match user {
        Some(u) => v
            .accounts
            .get(u)
            .map_err(|e| deny("account_store", format!("account store: {e}")))?,
        None => None,
    };
    let credential = account.as_ref().map(|acc| &acc.credential);

    let plugin = if relayed {
        let Some(ring) = v.key_ring else {
            return Err(deny(
                "no_key_ring",
                "relayed login refused: no --key-file configured".into(),
            ));
        };
        if resume::is_resume(a.auth_data) {
            let Some(tickets) = v.tickets else {
                return Err(deny(
                    "no_ticket_key",
                    "reattach refused: no --ticket-key-file configured".into(),
                ));
            };
            let user_name =
                user.ok_or_else(|| deny("unknown_user", "user name is not UTF-8".into()))?;
            let binding = Binding {
                scramble_b: a.scramble,
                user: a.username,
                database: &database,
            };
            let reattached = tickets
                .reattach(
                    a.auth_data,
                    &binding,
                    ring,
                    v.replay,
                    user_name,
                    account
                        .as_ref()
                        .map(crate::tickets::credential_bytes)
                        .as_deref(),
                    a.now_ms,
                )
                .map_err(|r| deny(r.kind, r.detail))?;
            let host = host_of(&reattached.client_addr).unwrap_or_else(|| a.peer_ip.to_string());
            let mut login = finish(
                account.as_ref().map(|acc| acc.role),
                user,
                host,
                route,
                AuthPlugin::MysqlNativePassword,
                &handshake,
            )
            .ok_or_else(|| deny("unknown_user", "unknown user".into()))?;
            login.resumed = true;
            login.ticket = reattached.next_ticket;
            return Ok(login);
        }
        if a.auth_data.len() > MAX_PAYLOAD_LEN {
            return Err(deny(
                "malformed",
                "payload longer than the format allows".into(),
            ));
        }
        let binding = Binding {
            scramble_b: a.scramble,
            user: a.username,
            database: &database,
        };
        let verified = {
            let mut guard = v.replay.lock().unwrap_or_else(PoisonError::into_inner);
            payload::verify(
                a.auth_data,
                &binding,
                ring,
                &mut guard,
                a.now_ms,
                credential,
            )
        }
        .map_err(|reason| deny(reason.kind(), reason.to_string()))?;
        let mut login = finish(
            account.as_ref().map(|acc| acc.role),
            user,
            host_of(&verified.claim.client_addr).unwrap_or_else(|| a.peer_ip.to_string()),
            route,
            verified.claim.client_plugin,
            &handshake,
        )
        .ok_or_else(|| deny("unknown_user", "unknown user".into()))?;
        if verified.wants_ticket {
            login.ticket = issue(
                v,
                &login.user,
                &verified.claim.client_addr,
                a.now_ms,
                account.as_ref(),
            );
        }
        return Ok(login);
    } else {
        AuthPlugin::from_name(a.plugin.as_bytes()).ok_or_else(|| {
            deny(
                "unsupported_plugin",
                format!(
                    "plugin {} cannot be checked",
                    sanitize_user(a.plugin.as_bytes())
                ),
            )
        })?
    };

    let Some(credential) = credential else {
        // Same work as for a real account, so timing does not tell which names exist.
        let _ = dummy_credential().check_answer(plugin, a.scramble, a.auth_data);
        return Err(deny("unknown_user", "unknown user".into()));
    };
    credential
        .check_answer(plugin, a.scramble, a.auth_data)
        .map_err(|e| deny("wrong_answer", format!("client answer refused: {e}")))?;
    finish(
        account.map(|acc| acc.role),
        user,
        a.peer_ip.to_string(),
        route,
        plugin,
        &handshake,
    )
    .ok_or_else(|| deny("unknown_user", "unknown user".into()))
}

fn finish(
    role: Option<Role>,
    user: Option<&str>,
    host: String,
    route: Route,
    plugin: AuthPlugin,
    handshake: &HandshakeResponse41,
) -> Option<Login> {
    Some(Login {
        user: user?.to_owned(),
        host,
        role: role?,
        route,
        plugin,
        database: handshake
            .database
            .as_deref()
            .filter(|d| !d.is_empty())
            .map(|d| String::from_utf8_lossy(d).into_owned()),
        ticket: None,
        resumed: false,
        tls_version: None,
        client_connection_id: (route == Route::Relayed)
            .then(|| relay_connection_id(handshake))
            .flatten(),
    })
}

use authplugin::payload::CONNECTION_ID_ATTR;

/// The id in `handshake`'s [`CONNECTION_ID_ATTR`] (decimal, in the relay's half of the id
/// space), if it carries one.
fn relay_connection_id(handshake: &HandshakeResponse41) -> Option<u32> {
    let (_, value) = handshake
        .connect_attrs
        .iter()
        .flatten()
        .find(|(key, _)| key.as_slice() == CONNECTION_ID_ATTR.as_bytes())?;
    let id: u32 = std::str::from_utf8(value).ok()?.parse().ok()?;
    (id & crate::processes::RELAY_IDS != 0).then_some(id)
}

/// A new session's first ticket, if this compute issues tickets (a relay that asks one of a
/// compute without `--ticket-key-file` holds a session it cannot reattach).
fn issue(
    v: &Verifier<'_>,
    user: &str,
    client_addr: &str,
    now_ms: u64,
    account: Option<&crate::accounts::Account>,
) -> Option<Vec<u8>> {
    let credential = crate::tickets::credential_bytes(account?);
    v.tickets?
        .issue(user, client_addr, now_ms, now_ms, &credential)
}

/// The IP of an `ip:port` or `[v6]:port` client address.
fn host_of(client_addr: &str) -> Option<String> {
    if let Ok(sa) = client_addr.parse::<std::net::SocketAddr>() {
        return Some(sa.ip().to_string());
    }
    client_addr.parse::<IpAddr>().ok().map(|ip| ip.to_string())
}

fn dummy_credential() -> &'static Credential {
    static DUMMY: OnceLock<Credential> = OnceLock::new();
    DUMMY.get_or_init(|| Credential::from_password(b"perceptron-dummy-password"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounts::Account;
    use authplugin::payload::LoginClaim;
    use authplugin::{KeyId, PerceptronKey, native_password};
    use std::net::Ipv4Addr;
    use zeroize::Zeroizing;

    struct Fixture {
        _dir: std::path::PathBuf,
        accounts: AccountStore,
        ring: KeyRing,
        key: PerceptronKey,
        replay: Mutex<ReplayGuard>,
    }

    impl Fixture {
        /// A verifier of this fixture's accounts, with `key_ring` and without tickets.
        fn verifier<'a>(&'a self, key_ring: Option<&'a KeyRing>) -> Verifier<'a> {
            Verifier {
                accounts: &self.accounts,
                key_ring,
                replay: &self.replay,
                tickets: None,
            }
        }
    }

    fn fixture(name: &str) -> Fixture {
        let dir =
            std::env::temp_dir().join(format!("server-shim-auth-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let accounts = AccountStore::open(&dir).unwrap();
        accounts
            .add(
                "app",
                Account::new(Role::User, Credential::from_password(b"pw")),
            )
            .unwrap();
        let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
        let ring = KeyRing::new(vec![key.clone()]).unwrap();
        Fixture {
            _dir: dir,
            accounts,
            ring,
            key,
            replay: Mutex::new(ReplayGuard::default()),
        }
    }

    fn handshake(user: &str, db: &str, plugin: &str, answer: &[u8]) -> Vec<u8> {
        HandshakeResponse41 {
            client_flag: CLIENT_PROTOCOL_41
                | CLIENT_SECURE_CONNECTION
                | CLIENT_PLUGIN_AUTH
                | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
                | CLIENT_CONNECT_WITH_DB,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: user.as_bytes().to_vec(),
            auth_response: Zeroizing::new(answer.to_vec()),
            database: Some(db.as_bytes().to_vec()),
            client_plugin_name: Some(plugin.as_bytes().to_vec()),
            connect_attrs: None,
            zstd_compression_level: None,
        }
        .to_bytes()
    }

    const NOW: u64 = 1_700_000_000_000;

    fn attempt<'a>(
        hs: &'a [u8],
        plugin: &'a str,
        user: &'a str,
        scramble: &'a Scramble,
        data: &'a [u8],
    ) -> Attempt<'a> {
        Attempt {
            handshake: Some(hs),
            plugin,
            username: user.as_bytes(),
            scramble,
            auth_data: data,
            peer_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            now_ms: NOW,
        }
    }

    /// mysql-connector-python's `compress=True` asks for compression the greeting did not
    /// offer, then compresses: refused with 1043 and the reason. Before: the login succeeded
    /// and the connection hung at the client's first compressed command.
    #[test]
    fn refuses_a_login_that_asks_for_compression() {
        let f = fixture("compress");
        let v = f.verifier(None);
        let s = Scramble::from_bytes([0x33; 20]);
        let good = native_password::token(b"pw", &s);
        let mut hs = handshake("app", "", "mysql_native_password", &good);
        // client_flag's first byte: CLIENT_COMPRESS is 0x20.
        hs[0] |= 0x20;
        let denial =
            decide(&v, &attempt(&hs, "mysql_native_password", "app", &s, &good)).unwrap_err();
        assert_eq!(denial.kind, COMPRESSION_UNOFFERED);
        let err = ErrPacket::decode(&denial.err_payload(IpAddr::V4(Ipv4Addr::LOCALHOST))).unwrap();
        assert_eq!(err.error_code, 1043);
    }

    #[test]
    fn accepts_direct_native_login_and_refuses_wrong_password() {
        let f = fixture("direct");
        let v = f.verifier(None);
        let s = Scramble::from_bytes([0x33; 20]);
        let good = native_password::token(b"pw", &s);
        let hs = handshake("app", "", "mysql_native_password", &good);
        let login = decide(&v, &attempt(&hs, "mysql_native_password", "app", &s, &good)).unwrap();
        assert_eq!((login.user.as_str(), login.route), ("app", Route::Direct));
        let bad = native_password::token(b"nope", &s);
        let hs = handshake("app", "", "mysql_native_password", &bad);
        let denial =
            decide(&v, &attempt(&hs, "mysql_native_password", "app", &s, &bad)).unwrap_err();
        assert_eq!(denial.kind, "wrong_answer");
        let hs = handshake("ghost", "", "mysql_native_password", &good);
        let denial = decide(
            &v,
            &attempt(&hs, "mysql_native_password", "ghost", &s, &good),
        )
        .unwrap_err();
        assert_eq!(denial.kind, "unknown_user");
    }

    #[test]
    fn builds_mysql_style_access_denied_message() {
        let d = Denial {
            kind: "wrong_answer",
            detail: String::new(),
            user: "app".into(),
            using_password: true,
            route: Route::Direct,
        };
        let err = ErrPacket::decode(&d.err_payload(IpAddr::V4(Ipv4Addr::LOCALHOST))).unwrap();
        assert_eq!(err.error_code, 1045);
        assert_eq!(err.sql_state, Some(*b"28000"));
        assert_eq!(
            err.error_message,
            b"Access denied for user 'app'@'127.0.0.1' (using password: YES)"
        );
    }

    #[test]
    fn verifies_relayed_login_binding_the_database() {
        let f = fixture("relayed");
        let v = f.verifier(Some(&f.ring));
        let scramble_a = Scramble::with_clock(NOW - 1_000, [0x41; 14]);
        let scramble_b = Scramble::from_bytes([0x42; 20]);
        let claim = LoginClaim {
            scramble_a: scramble_a.clone(),
            answer_a: Zeroizing::new(native_password::token(b"pw", &scramble_a)),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "10.1.2.3:5555".into(),
        };
        let sign = |db: &str| {
            payload::encode_signed(
                &claim,
                &f.key,
                NOW,
                &Binding {
                    scramble_b: &scramble_b,
                    user: b"app",
                    database: db.as_bytes(),
                },
            )
            .unwrap()
        };
        // Signed for database "other", presented with database "shop": the MAC fails.
        let p = sign("other");
        let hs = handshake("app", "shop", PLUGIN_NAME, &p);
        let denial = decide(&v, &attempt(&hs, PLUGIN_NAME, "app", &scramble_b, &p)).unwrap_err();
        assert_eq!(denial.kind, "bad_mac");
        let p = sign("shop");
        let hs = handshake("app", "shop", PLUGIN_NAME, &p);
        let login = decide(&v, &attempt(&hs, PLUGIN_NAME, "app", &scramble_b, &p)).unwrap();
        assert_eq!(login.route, Route::Relayed);
        assert_eq!(login.host, "10.1.2.3");
        assert_eq!(login.database.as_deref(), Some("shop"));
        // The same scramble A again is a replay.
        let denial = decide(&v, &attempt(&hs, PLUGIN_NAME, "app", &scramble_b, &p)).unwrap_err();
        assert_eq!(denial.kind, "replayed");
    }

    #[test]
    fn a_sniffed_login_re_signed_under_another_key_id_is_a_replay() {
        // A thief with both keys of a rotating ring and one sniffed login (scramble A and the
        // answer) gets one login in total, not one per key id.
        let mut f = fixture("two-keys");
        let older = PerceptronKey::generate(KeyId::new("k0").unwrap(), &mut rand::rngs::OsRng);
        f.ring = KeyRing::new(vec![older.clone(), f.key.clone()]).unwrap();
        let v = f.verifier(Some(&f.ring));
        let scramble_a = Scramble::with_clock(NOW - 1_000, [0x41; 14]);
        let claim = LoginClaim {
            scramble_a: scramble_a.clone(),
            answer_a: Zeroizing::new(native_password::token(b"pw", &scramble_a)),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "10.1.2.3:5555".into(),
        };
        let mut kinds = Vec::new();
        for (key, b) in [(&f.key, 0x42), (&older, 0x43)] {
            let scramble_b = Scramble::from_bytes([b; 20]);
            let binding = Binding {
                scramble_b: &scramble_b,
                user: b"app",
                database: b"shop",
            };
            let p = payload::encode_signed(&claim, key, NOW, &binding).unwrap();
            let hs = handshake("app", "shop", PLUGIN_NAME, &p);
            kinds.push(
                decide(&v, &attempt(&hs, PLUGIN_NAME, "app", &scramble_b, &p))
                    .map(|l| l.route)
                    .map_err(|d| d.kind),
            );
        }
        assert_eq!(kinds, [Ok(Route::Relayed), Err("replayed")]);
    }

    #[test]
    fn refuses_relayed_login_without_key_ring() {
        let f = fixture("no-ring");
        let v = f.verifier(None);
        let s = Scramble::from_bytes([0x42; 20]);
        let hs = handshake("app", "", PLUGIN_NAME, b"PCPT");
        let denial = decide(&v, &attempt(&hs, PLUGIN_NAME, "app", &s, b"PCPT")).unwrap_err();
        assert_eq!(denial.kind, "no_key_ring");
    }

    #[test]
    fn chooses_client_plugin_only_when_it_can_be_checked() {
        let hs = |p: &str| handshake("u", "", p, b"");
        assert_eq!(plugin_for_client(Some(&hs(PLUGIN_NAME))), PLUGIN_NAME);
        assert_eq!(
            plugin_for_client(Some(&hs("caching_sha2_password"))),
            "caching_sha2_password"
        );
        assert_eq!(
            plugin_for_client(Some(&hs("client_ed25519"))),
            "mysql_native_password"
        );
        assert_eq!(plugin_for_client(None), "mysql_native_password");
    }

    /// The `mariadb` CLI sets `CLIENT_CONNECT_ATTRS`, which the shim does not offer, and
    /// then sends no attributes; mysql-connector-python sets it and sends them anyway.
    #[test]
    fn decodes_login_with_unoffered_connect_attrs_flag() {
        use authplugin::packet::capabilities::CLIENT_CONNECT_ATTRS;
        let mut hs = handshake("app", "shop", "mysql_native_password", &[7; 20]);
        let flags = u32::from_le_bytes(hs[..4].try_into().unwrap()) | CLIENT_CONNECT_ATTRS;
        hs[..4].copy_from_slice(&flags.to_le_bytes());
        let without = decode_handshake(&hs).unwrap();
        assert_eq!(without.database.as_deref(), Some(&b"shop"[..]));
        assert_eq!(without.connect_attrs, None);
        // One attribute block: `_client_name` = `x`.
        hs.extend_from_slice(b"\x0f\x0c_client_name\x01x");
        let with = decode_handshake(&hs).unwrap();
        assert_eq!(
            with.connect_attrs,
            Some(vec![(b"_client_name".to_vec(), b"x".to_vec())])
        );
        // Anything else after the last field is refused.
        hs.push(0);
        assert!(decode_handshake(&hs).is_err());
    }

    #[test]
    fn sanitizes_user_names_for_logs() {
        assert_eq!(sanitize_user(b"a'b\ncd"), "a?b?cd");
        assert_eq!(sanitize_user(&[b'x'; 100]).len(), 64);
    }
}
