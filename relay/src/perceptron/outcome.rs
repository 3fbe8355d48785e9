//! How a connection ended, as a closed set of kinds: each kind is a metric label, decides
//! the one ERR packet (if any) the client sees, and is logged once at the end of the
//! connection task (CONTRIBUTING.md, *Typed errors, one ERR packet*). Client-visible messages are fixed text plus the instance
//! name; internal addresses and error details stay in the relay's log.

use authplugin::DecodeError;
use authplugin::compute_proof::ProofError;
use authplugin::packet::err::codes;
use authplugin::packet::{ErrPacket, FrameError};
use authplugin::payload::EncodeError;

use crate::budgets::Refusal;
use crate::compute_conn::ConnectError;
use crate::control::WakeError;
use crate::tls::TlsFailure;

/// Why a connection that reached the perceptron did not become a relayed session.
#[derive(Debug)]
pub enum PerceptronError {
    /// Not a MySQL login; never wakes the instance.
    NotALogin(Classification),
    /// The wake failed or timed out.
    Wake(WakeError),
    /// The compute failed during the relayed login.
    Compute(ComputeError),
    /// The client went away after its login was accepted for relay.
    ClientGone,
    /// The relay is shutting down.
    ShuttingDown,
    /// A load balancer's health check (a health-check user with an empty password), answered
    /// OK by the relay itself; never wakes the instance.
    HealthCheck,
    /// The source or the user has spent a failed-login or wake budget; refused without a
    /// wake.
    Budget {
        /// Which budget.
        refusal: Refusal,
        /// The user the login named (for ERR 1226).
        user: Vec<u8>,
    },
}

/// What the perceptron made of a connection that did not send a usable login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    /// Closed without sending anything (port scan, TCP health check).
    ClosedSilently,
    /// Closed in the middle of a packet.
    ClosedMidPacket,
    /// Sent nothing complete within `handshake_timeout`.
    HandshakeTimeout,
    /// Spoke HTTP.
    Http,
    /// Sent a TLS ClientHello without asking for TLS the MySQL way.
    TlsClientHello,
    /// Asked for TLS with an SSLRequest; this relay does not terminate TLS.
    SslRequest,
    /// A packet bigger than any login.
    Oversized,
    /// A packet with the wrong sequence id.
    OutOfOrder,
    /// Bytes that are not a HandshakeResponse41 (or a pre-4.1 login).
    Malformed,
    /// A well-formed login without a user name.
    EmptyUser,
    /// After the one allowed switch to `mysql_native_password`, still no usable answer.
    UnsupportedAuth,
    /// Asked for TLS the MySQL way, but the handshake failed or stalled.
    Tls(TlsFailure),
    /// A login without TLS to an instance with `require_secure_transport`.
    InsecureTransport,
    /// A login that asks for the compressed protocol, which the relay did not offer.
    CompressionUnoffered,
}

/// The most of a compute's refusal message a [`ComputeProtocolError::Refused`] keeps.
pub const REFUSAL_MESSAGE_BYTES: usize = 200;

/// A failure of the relayed login on the compute side (P4–P8).
#[derive(Debug)]
pub enum ComputeError {
    /// Could not connect (after retrying what could be retried).
    Connect(ConnectError),
    /// The compute did not answer within `compute_timeout`.
    Timeout(ComputeStep),
    /// The compute closed the connection or the socket failed.
    Lost(std::io::Error),
    /// The compute sent something that is not the next step of the login.
    Protocol(ComputeProtocolError),
    /// The client negotiated capabilities the compute lacks (stale profile); relearnt now:
    /// capability flags, and MariaDB's extended capabilities.
    CapabilityMismatch {
        /// Missing capability flags.
        flags: u32,
        /// Missing MariaDB extended capabilities.
        mariadb: u32,
    },
    /// `compute_tls`: the compute offers no TLS, or the TLS handshake with it failed (its
    /// certificate did not verify, no common version); the relay never falls back to
    /// plaintext.
    Tls(std::io::Error),
}

/// The step of the compute leg a deadline ran out in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeStep {
    /// P4: connecting (retries included).
    Connect,
    /// P5: reading the greeting.
    Greeting,
    /// P6–P8: sending the login or reading the compute's answers.
    Login,
}

/// What a compute asked for on a plaintext leg that the relay refuses to relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaintextAsk {
    /// A switch to a plugin that is not a known challenge-response (its name, as sent, at
    /// most 64 bytes).
    Plugin(Vec<u8>),
    /// AuthMoreData other than caching_sha2_password's fast-path success (`01 03`): its full
    /// authentication (`01 04`), a public key.
    AuthMoreData,
}

impl std::fmt::Display for PlaintextAsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plugin(name) => write!(
                f,
                "a switch to plugin '{}'",
                String::from_utf8_lossy(name).escape_debug()
            ),
            Self::AuthMoreData => f.write_str(
                "more authentication data than caching_sha2_password's fast-path success \
                 (its full authentication, or a key exchange)",
            ),
        }
    }
}

/// What the compute sent that a MySQL server in the connection phase must not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputeProtocolError {
    /// The packet framing is broken (too large, continuation out of sequence).
    Framing(FrameError),
    /// The greeting is not a HandshakeV10.
    BadGreeting(DecodeError),
    /// The greeting has no 20-byte scramble to answer.
    NoScramble,
    /// The relayed-auth payload cannot be built from this login.
    Payload(EncodeError),
    /// The compute lacks `CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA` and the payload exceeds the
    /// 255 bytes a one-byte length can carry.
    PayloadTooLong,
    /// A packet carried the wrong sequence id.
    OutOfOrder {
        /// The id the exchange called for.
        expected: u8,
        /// The id the packet had.
        actual: u8,
    },
    /// A packet that is none of OK, ERR, AuthSwitchRequest or AuthMoreData (or, in dual
    /// mode, none of OK and ERR); its first byte.
    Unexpected(u8),
    /// An ERR where the relay's own command (a reattach's login, a restoring statement, a
    /// statement prepared again) needed an OK: its code and message (at most
    /// [`REFUSAL_MESSAGE_BYTES`]), for the log.
    Refused {
        /// The error code.
        code: u16,
        /// The message, clipped.
        message: Vec<u8>,
    },
    /// An empty packet where a reply was due.
    Empty,
    /// An AuthSwitchRequest that does not parse.
    BadAuthSwitch(DecodeError),
    /// A second AuthSwitchRequest: clients accept one per login, so it cannot be relayed.
    SecondAuthSwitch,
    /// In dual mode, an AuthSwitchRequest that is not a `mysql_native_password` challenge
    /// (20 bytes and a NUL), the only one a relayed-auth payload can be bound to.
    UnanswerableAuthSwitch,
    /// In switch mode over a compute leg without TLS, the compute asked for something other
    /// than a challenge-response answer (a switch to a plugin not on the allow-list, such as
    /// `mysql_clear_password` or `sha256_password`, which a TLS client answers with its
    /// password in clear; or caching_sha2_password's full authentication): refused, so a
    /// password never crosses the relay's plaintext leg. What was asked for.
    PasswordOnPlaintextLeg(PlaintextAsk),
    /// In dual mode, the compute did not prove that it holds the perceptron key, so the relay
    /// sent it nothing of the client's: an impostor on the compute's address, a compute with
    /// another key ring, or one that predates the proof.
    Unproven(ProofError),
    /// On a reattach, the new compute prepared one of the session's statements with other
    /// parameter or column counts than the client was given (the schema changed): the
    /// client's statement would not mean what it did. The client's id.
    StatementChanged(u32),
    /// Reading a session's state, the compute's answer was not the one result set asked
    /// for: the connection is out of step.
    StateRead(authplugin::packet::text_result::TextResultError),
    /// On a reattach, the new session's state could not be read to compare with the old one.
    FreshStateUnreadable(crate::session_state::Unreadable),
}

impl ComputeError {
    /// Whether the compute failed to prove it holds the key. A relay whose guard over proven
    /// greetings is full (a storm of logins) is not the compute's failure.
    #[must_use]
    pub const fn unproven(&self) -> bool {
        matches!(self, Self::Protocol(ComputeProtocolError::Unproven(e)) if !matches!(e, ProofError::GuardFull))
    }

    /// Whether trying the same step again can succeed: only a compute that does not listen
    /// yet. Protocol errors and timeouts would repeat.
    #[must_use]
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Connect(e) if e.retryable())
    }

    /// Whether the compute itself may be dead or hung (it would not connect, answer in time
    /// or keep the connection), rather than speaking the protocol wrongly: worth a fresh
    /// readiness probe, which decides whether the instance is really unreachable.
    #[must_use]
    pub const fn may_be_unresponsive(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::Timeout(_) | Self::Lost(_))
    }

    /// Metric label.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Connect(_) => "compute_connect_failed",
            Self::Timeout(_) => "compute_timeout",
            Self::Lost(_) => "compute_lost",
            Self::Protocol(ComputeProtocolError::Unproven(_)) => "compute_unproven",
            Self::Protocol(ComputeProtocolError::PasswordOnPlaintextLeg(_)) => {
                "compute_cleartext_refused"
            }
            Self::Protocol(_) => "compute_protocol",
            Self::CapabilityMismatch { .. } => "capability_mismatch",
            Self::Tls(_) => "compute_tls_failed",
        }
    }
}

impl std::fmt::Display for ComputeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => e.fmt(f),
            Self::Timeout(step) => write!(f, "compute did not answer in time ({step:?})"),
            Self::Lost(e) => write!(f, "compute connection lost: {e}"),
            Self::Protocol(e) => write!(f, "compute protocol error: {e}"),
            Self::CapabilityMismatch { flags, mariadb } => write!(
                f,
                "client negotiated capabilities {flags:#x} (MariaDB's extended {mariadb:#x}) \
                 the compute lacks (profile relearnt)"
            ),
            Self::Tls(e) => write!(f, "TLS to the compute (compute_tls) failed: {e}"),
        }
    }
}

impl std::error::Error for ComputeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connect(e) => Some(e),
            Self::Lost(e) | Self::Tls(e) => Some(e),
            Self::Protocol(e) => Some(e),
            Self::Timeout(_) | Self::CapabilityMismatch { .. } => None,
        }
    }
}

impl From<ComputeProtocolError> for ComputeError {
    fn from(e: ComputeProtocolError) -> Self {
        Self::Protocol(e)
    }
}

impl std::fmt::Display for ComputeProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Framing(e) => write!(f, "bad framing: {e}"),
            Self::BadGreeting(e) => write!(f, "bad greeting: {e}"),
            Self::NoScramble => f.write_str("greeting without a 20-byte scramble"),
            Self::Payload(e) => write!(f, "cannot build the relayed-auth payload: {e}"),
            Self::PayloadTooLong => f.write_str(
                "compute lacks CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA and the payload exceeds 255 bytes",
            ),
            Self::OutOfOrder { expected, actual } => {
                write!(f, "packet has sequence id {actual}, expected {expected}")
            }
            Self::Unexpected(first) => {
                write!(f, "unexpected packet {first:#04x} during authentication")
            }
            Self::Refused { code, message } => write!(
                f,
                "the compute refused: ERROR {code}: {}",
                crate::logsafe::Escaped(message)
            ),
            Self::Empty => f.write_str("empty packet during authentication"),
            Self::BadAuthSwitch(e) => write!(f, "bad auth switch: {e}"),
            Self::SecondAuthSwitch => f.write_str("server asked for a second auth switch"),
            Self::PasswordOnPlaintextLeg(what) => write!(
                f,
                "the compute asked for {what} on a leg without TLS, which may carry the \
                 password in clear; refused (set compute_tls = \"verify\" for this instance)"
            ),
            Self::UnanswerableAuthSwitch => f.write_str(
                "server switched to a plugin other than a mysql_native_password challenge; \
                 is the account IDENTIFIED VIA perceptron_dual?",
            ),
            Self::StateRead(e) => write!(f, "reading the session's state: {e}"),
            Self::FreshStateUnreadable(why) => {
                write!(f, "reading the new session's state: {}", why.as_str())
            }
            Self::StatementChanged(id) => write!(
                f,
                "prepared statement {id} has other parameters or columns on the new compute \
                 (did the schema change?)"
            ),
            Self::Unproven(e) => write!(
                f,
                "{e} [{}]; nothing of the client's was sent to it (is it the compute the \
                 driver started, with the relay's key ring?)",
                e.kind()
            ),
        }
    }
}

impl std::error::Error for ComputeProtocolError {}

impl Classification {
    /// Metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::ClosedSilently => "closed_silently",
            Self::ClosedMidPacket => "closed_mid_packet",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::Http => "http",
            Self::TlsClientHello => "tls_client_hello",
            Self::SslRequest => "ssl_request",
            Self::Oversized => "oversized",
            Self::OutOfOrder => "out_of_order",
            Self::Malformed => "malformed",
            Self::EmptyUser => "empty_user",
            Self::UnsupportedAuth => "unsupported_auth",
            Self::Tls(f) => f.label(),
            Self::InsecureTransport => "insecure_transport",
            Self::CompressionUnoffered => "compression_unoffered",
        }
    }

    /// Every classification.
    #[cfg(test)]
    pub const ALL: [Self; 19] = [
        Self::ClosedSilently,
        Self::ClosedMidPacket,
        Self::HandshakeTimeout,
        Self::Http,
        Self::TlsClientHello,
        Self::SslRequest,
        Self::Oversized,
        Self::OutOfOrder,
        Self::Malformed,
        Self::EmptyUser,
        Self::UnsupportedAuth,
        Self::Tls(TlsFailure::ClientCertRefused),
        Self::Tls(TlsFailure::RefusedByClient),
        Self::Tls(TlsFailure::Incompatible),
        Self::Tls(TlsFailure::Malformed),
        Self::Tls(TlsFailure::Closed),
        Self::Tls(TlsFailure::TimedOut),
        Self::InsecureTransport,
        Self::CompressionUnoffered,
    ];

    /// The ERR the client gets, where the protocol allows one: nothing for a peer that left,
    /// speaks HTTP or TLS (it would not understand), a MySQL error otherwise.
    #[must_use]
    pub fn client_error(self, client_addr: &str) -> Option<ErrPacket> {
        let (code, msg): ((u16, &[u8; 5]), String) = match self {
            // A client mid-handshake or inside TLS cannot read a plaintext ERR.
            Self::ClosedSilently
            | Self::ClosedMidPacket
            | Self::Http
            | Self::TlsClientHello
            | Self::Tls(_) => {
                return None;
            }
            Self::InsecureTransport => (
                codes::ER_SECURE_TRANSPORT_REQUIRED,
                "Connections using insecure transport are prohibited while \
                 --require_secure_transport=ON."
                    .into(),
            ),
            Self::HandshakeTimeout => (
                codes::ER_NET_READ_INTERRUPTED,
                "Got timeout reading communication packets".into(),
            ),
            Self::SslRequest => (
                codes::ER_HANDSHAKE_ERROR,
                "Bad handshake: TLS is not enabled on this endpoint; connect without TLS".into(),
            ),
            Self::Oversized => (
                codes::ER_NET_PACKET_TOO_LARGE,
                "Got a packet bigger than 'max_allowed_packet' bytes".into(),
            ),
            Self::OutOfOrder => (
                codes::ER_NET_PACKETS_OUT_OF_ORDER,
                "Got packets out of order".into(),
            ),
            Self::Malformed => (codes::ER_HANDSHAKE_ERROR, "Bad handshake".into()),
            Self::CompressionUnoffered => (
                codes::ER_HANDSHAKE_ERROR,
                "Bad handshake: the compressed protocol is not offered here; connect without \
                 compression"
                    .into(),
            ),
            Self::EmptyUser => (
                codes::ER_ACCESS_DENIED_ERROR,
                format!("Access denied for user ''@'{}'", host_of(client_addr)),
            ),
            Self::UnsupportedAuth => (
                codes::ER_NOT_SUPPORTED_AUTH_MODE,
                "Client does not support authentication protocol requested by server; \
                 consider upgrading MySQL client"
                    .into(),
            ),
        };
        Some(ErrPacket::new(code.0, code.1, &msg))
    }
}

impl PerceptronError {
    /// Metric label and log kind.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotALogin(c) => c.label(),
            Self::Wake(e) => e.label(),
            Self::Compute(e) => e.label(),
            Self::ClientGone => "client_gone",
            Self::ShuttingDown => "shutting_down",
            Self::HealthCheck => "health_check",
            Self::Budget { refusal, .. } => refusal.label(),
        }
    }

    /// Whether the client may simply try again: the instance or the relay was unavailable
    /// (the ERR says so with a connection-class SQLSTATE). A login that was not one, or a
    /// client that left, is not retried by anyone.
    #[must_use]
    pub const fn retryable(&self) -> bool {
        matches!(self, Self::Wake(_) | Self::Compute(_) | Self::ShuttingDown)
            && !matches!(
                self,
                Self::Compute(ComputeError::Protocol(
                    ComputeProtocolError::PasswordOnPlaintextLeg(_)
                ))
            )
    }

    /// The one ERR packet the client sees, if any. Resume and compute failures use
    /// `ER_SERVER_SHUTDOWN` (1053, SQLSTATE 08S01): a connection-class SQLSTATE, which
    /// drivers and pools treat as "server unavailable, retry", and a code every MySQL user
    /// has seen.
    #[must_use]
    pub fn client_error(&self, instance: &str, client_addr: &str) -> Option<ErrPacket> {
        let unavailable = |msg: String| {
            let (code, state) = codes::ER_SERVER_SHUTDOWN;
            Some(ErrPacket::new(code, state, &msg))
        };
        match self {
            Self::NotALogin(c) => c.client_error(client_addr),
            Self::Wake(e) => unavailable(format!(
                "Instance '{instance}' could not be resumed: {}. Retry later",
                e.user_facing()
            )),
            Self::Compute(ComputeError::Protocol(
                ComputeProtocolError::PasswordOnPlaintextLeg(_),
            )) => {
                let (code, state) = codes::ER_NOT_SUPPORTED_AUTH_MODE;
                Some(ErrPacket::new(
                    code,
                    state,
                    &format!(
                        "Instance '{instance}' asked for your password in clear text over a \
                         connection the relay does not encrypt; refused"
                    ),
                ))
            }
            Self::Compute(ComputeError::CapabilityMismatch { .. }) => unavailable(format!(
                "Instance '{instance}' changed its capabilities; reconnect"
            )),
            Self::Compute(_) => {
                unavailable(format!("Instance '{instance}' failed during login. Retry"))
            }
            Self::ClientGone | Self::HealthCheck => None,
            Self::ShuttingDown => unavailable("Relay is shutting down. Retry".into()),
            Self::Budget { refusal, user } => {
                Some(refusal.client_error(&host_of(client_addr), user))
            }
        }
    }
}

impl std::fmt::Display for PerceptronError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotALogin(c) => write!(f, "not a login: {}", c.label()),
            Self::Wake(e) => write!(f, "wake failed: {e}"),
            Self::Compute(e) => e.fmt(f),
            Self::ClientGone => f.write_str("client went away"),
            Self::ShuttingDown => f.write_str("relay shutting down"),
            Self::HealthCheck => f.write_str("health check answered"),
            Self::Budget { refusal, .. } => write!(
                f,
                "{} budget of the {} spent ({}); refused without a wake",
                refusal.budget.as_str(),
                refusal.scope.as_str(),
                refusal.count
            ),
        }
    }
}

impl std::error::Error for PerceptronError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Wake(e) => Some(e),
            Self::Compute(e) => Some(e),
            Self::NotALogin(_)
            | Self::ClientGone
            | Self::ShuttingDown
            | Self::HealthCheck
            | Self::Budget { .. } => None,
        }
    }
}

impl From<ComputeError> for PerceptronError {
    fn from(e: ComputeError) -> Self {
        Self::Compute(e)
    }
}

impl From<ComputeProtocolError> for PerceptronError {
    fn from(e: ComputeProtocolError) -> Self {
        Self::Compute(e.into())
    }
}

/// The host part of a client's `ip:port` as MySQL writes it in an ERR: the address alone,
/// an IPv6 one without brackets (`::1`), the same text the endpoint's refusals use.
fn host_of(addr: &str) -> String {
    addr.parse::<std::net::SocketAddr>().map_or_else(
        |_| addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_owned(),
        |a| a.ip().to_string(),
    )
}

/// The ERR 1045 a wrong password gets, the same whoever refused: MySQL's and server-shim's
/// words, naming the client's own address (`ip`), which a compute behind the relay would not
/// know (it names the relay's). The perceptron route sends it in place of the compute's 1045,
/// and an endpoint for a login it cannot route, so no refusal says more than a wrong password
/// would.
#[must_use]
pub fn wrong_password(user: &str, ip: std::net::IpAddr, with_password: bool) -> ErrPacket {
    let (code, state) = codes::ER_ACCESS_DENIED_ERROR;
    ErrPacket::new(
        code,
        state,
        &format!(
            "Access denied for user '{user}'@'{ip}' (using password: {})",
            if with_password { "YES" } else { "NO" }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_that_cannot_read_mysql_get_no_err_packet() {
        for c in [
            Classification::ClosedSilently,
            Classification::Http,
            Classification::TlsClientHello,
        ] {
            assert!(c.client_error("1.2.3.4:5").is_none());
        }
    }

    #[test]
    fn every_classification_has_a_distinct_label() {
        let mut labels: Vec<_> = Classification::ALL.iter().map(|c| c.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Classification::ALL.len());
    }

    #[test]
    fn insecure_transport_gets_mysqls_3159() {
        let e = Classification::InsecureTransport
            .client_error("10.0.0.1:4000")
            .unwrap();
        assert_eq!(e.error_code, 3159);
        assert_eq!(e.sql_state, Some(*b"HY000"));
        assert_eq!(
            e.error_message,
            b"Connections using insecure transport are prohibited while \
              --require_secure_transport=ON."
                .as_slice()
        );
        for f in [TlsFailure::ClientCertRefused, TlsFailure::TimedOut] {
            assert!(Classification::Tls(f).client_error("1.2.3.4:5").is_none());
        }
    }

    #[test]
    fn empty_user_is_denied_with_1045() {
        let e = Classification::EmptyUser
            .client_error("10.0.0.1:4000")
            .unwrap();
        assert_eq!(e.error_code, 1045);
        assert_eq!(e.sql_state, Some(*b"28000"));
        assert_eq!(e.error_message, b"Access denied for user ''@'10.0.0.1'");
    }

    #[test]
    fn a_wrong_password_is_refused_in_mysqls_words_naming_the_client() {
        let err = wrong_password("app", "10.0.0.7".parse().unwrap(), true);
        assert_eq!(err.error_code, 1045);
        assert_eq!(err.sql_state, Some(*b"28000"));
        assert_eq!(
            err.error_message,
            b"Access denied for user 'app'@'10.0.0.7' (using password: YES)".as_slice()
        );
    }
}
