//! `[[endpoint]]`: one listener for many instances (docs/endpoints.md). The relay greets the
//! client itself, reads its login, and takes the instance's name from the user name
//! (`user@instance` or `instance.user`); the login then goes on as on that instance's own
//! listener, with the user name the compute knows.
//!
//! The endpoint does not tell which instances exist. A login that names no instance (or one
//! the endpoint cannot route to) gets the ERR 1045 a wrong password gets, word for word
//! ([`crate::perceptron::outcome::wrong_password`], which replaces the compute's own), wakes
//! nothing, and is charged to the budgets as a wrong password for a paused instance of that
//! name would be (so a budget's block comes after as many probes either way). Health checks
//! are the endpoint's own: a health-check user without an instance part is answered OK, one
//! with an instance part is refused as a wrong password is. What still differs is time: a
//! paused instance's refusal comes after its wake.
//!
//! Every connection of an endpoint takes the perceptron route, whatever the instance's state:
//! the relay has answered the handshake before it knows the instance, so it cannot hand the
//! connection to a running compute's own listener as the direct route does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpStream;

use crate::budgets::Budgets;
use crate::config::{AuthMode, EndpointConfig, RouteBy};
use crate::limits::PendingPermit;
use crate::logsafe::Escaped;
use crate::metrics::Metrics;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::perceptron::outcome::{self, Classification};
use crate::perceptron::{self, login::Answers};
use crate::profile::{ComputeProfile, FORMAT_CHANGING};
use crate::registry::{Registered, Registry};
use crate::runtime::{self, RELAY_CONNECTION_IDS};
use crate::tls::{ClientStream, ServerTls};

/// The most of a refused login's user name the log keeps (bytes).
const MAX_LOGGED_NAME: usize = 256;

/// One endpoint and the instances it routes to.
pub struct Endpoint {
    /// Its configuration.
    pub config: EndpointConfig,
    /// The instances it routes to: every live instance of the relay.
    instances: Arc<Registry>,
    /// Connection ids for its greetings (the relay's half of the id space).
    connection_ids: AtomicU32,
    /// Its name in logs and metrics: `endpoint <listen>`.
    label: String,
    /// The greeting last made ([`Endpoint::profile`]), and the profile change and the
    /// change of the instance set it is from.
    greeting: Mutex<Option<((u64, u64), ComputeProfile)>>,
    /// `[endpoint.tls]`: the certificate it serves; `None` offers no TLS.
    pub tls: Option<Arc<ServerTls>>,
    /// The relay's budgets, charged with the logins it refuses itself.
    budgets: Arc<Budgets>,
    /// Where its logins are counted (`relay_endpoint_logins_total`).
    metrics: Arc<Metrics>,
}

impl Endpoint {
    /// `config` routing to the live instances of `instances`, serving `tls`, charging
    /// `budgets`, counting in `metrics`.
    #[must_use]
    pub fn new(
        config: EndpointConfig,
        instances: Arc<Registry>,
        tls: Option<Arc<ServerTls>>,
        budgets: Arc<Budgets>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            label: format!("endpoint {}", config.listen),
            config,
            instances,
            connection_ids: AtomicU32::new(runtime::first_connection_id()),
            greeting: Mutex::new(None),
            tls,
            budgets,
            metrics,
        }
    }

    /// Its name in logs and metrics.
    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The greeting every client of the endpoint gets: the first instance's (by name), with
    /// only the format-changing capabilities every instance's compute has, so no session
    /// negotiates one its compute lacks. Made again only after a profile or the set of
    /// instances changed: with 10,000 instances, making it takes milliseconds.
    fn profile(&self) -> ComputeProfile {
        let changes = (runtime::profile_changes(), self.instances.changes());
        let mut cached = self.greeting.lock().unwrap_or_else(PoisonError::into_inner);
        match &*cached {
            Some((made_at, greeting)) if *made_at == changes => greeting.clone(),
            _ => {
                let greeting = self.make_profile();
                *cached = Some((changes, greeting.clone()));
                greeting
            }
        }
    }

    fn make_profile(&self) -> ComputeProfile {
        // By name, so the first instance is the same on every relay and after every restart.
        let mut profiles = self.instances.live().into_iter().map(|r| r.rt.profile());
        let mut greeting = profiles
            .next()
            .unwrap_or_else(ComputeProfile::server_shim_default);
        for other in profiles {
            greeting.capability_flags &= other.capability_flags | !FORMAT_CHANGING;
            // MariaDB's extended capabilities: only those every instance offers (none if one
            // is a MySQL), or a login routed to the others would be refused for ever.
            greeting.forget_mariadb_capabilities(!other.mariadb_capabilities());
        }
        greeting
    }

    /// Whether a login this endpoint accepted meets `instance`'s TLS policy: its client
    /// certificate checked against the instance's own `client_ca`, a version no older than
    /// its `min_version`. (`require_secure_transport` and a plaintext login are the
    /// perceptron route's to refuse, on every route.)
    fn meets_tls_of(&self, instance: &crate::config::InstanceConfig) -> bool {
        let Some(wanted) = &instance.tls else {
            return true;
        };
        let ours = self.tls.as_ref().map(|t| &t.settings);
        let client_ca = wanted.client_ca.is_none()
            || ours.and_then(|t| t.client_ca.as_ref()) == wanted.client_ca.as_ref();
        let version = wanted.min_version == crate::config::TlsVersion::Tls12
            || ours.is_some_and(|t| t.min_version == wanted.min_version);
        client_ca && version
    }

    /// The instance a login routes to (by its user name, or the TLS server name it came
    /// with), and the user name its compute knows.
    fn route(
        &self,
        login_user: &str,
        server_name: Option<&str>,
    ) -> Option<(Arc<Registered>, String)> {
        let (instance, user) = self.config.route_by.split(login_user, server_name)?;
        Some((self.instances.get(instance)?, user.to_owned()))
    }
}

/// Serves one connection accepted on `endpoint`.
pub async fn handle(
    endpoint: Arc<Endpoint>,
    stream: TcpStream,
    client_addr: SocketAddr,
    pending: PendingPermit,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(endpoint.config.listen);
    let timeout = endpoint.config.handshake_timeout;
    let mut client = PacketStream::new(ClientStream::Plain(stream), MAX_LOGIN_PACKET_LEN)
        .with_write_timeout(timeout);
    let id = RELAY_CONNECTION_IDS | endpoint.connection_ids.fetch_add(1, Ordering::Relaxed);
    let addr = client_addr.to_string();
    let tls = endpoint
        .tls
        .as_ref()
        .map(|t| Arc::clone(&t.current().config));
    let greeted = perceptron::greet(
        &mut client,
        &endpoint.profile(),
        id,
        tls,
        timeout,
        Answers::CheckableAgainstA,
    )
    .await;
    let mut greeted = match greeted {
        Ok(g) => g,
        Err(e) => {
            if let Some(err) = e.client_error(endpoint.label(), &addr) {
                let seq = client.next_sequence_id();
                let _ = client.write_packet(seq, &err.to_bytes()).await;
            }
            endpoint
                .metrics
                .endpoint_login(endpoint.label(), "not_a_login");
            tracing::info!(endpoint = %endpoint.config.listen, client = %addr, error = %e, "not a login; closed");
            return;
        }
    };
    if perceptron::is_health_check(&endpoint.config.health_check_users, &greeted.login) {
        perceptron::answer_health_check(&mut client, &greeted.login, timeout).await;
        endpoint
            .metrics
            .endpoint_login(endpoint.label(), "health_check");
        tracing::debug!(endpoint = %endpoint.config.listen, client = %addr, "health check answered by the endpoint");
        return;
    }
    let typed = String::from_utf8_lossy(&greeted.login.response.username).into_owned();
    let server_name = client.stream_mut().server_name().map(str::to_owned);
    if endpoint.config.route_by == RouteBy::ServerName && !greeted.login.tls {
        // No TLS, no server name: what MySQL says to a plaintext login it requires TLS of.
        if let Some(err) = Classification::InsecureTransport.client_error(&addr) {
            let seq = greeted.login.last_sequence_id.wrapping_add(1);
            let _ = client.write_packet(seq, &err.to_bytes()).await;
        }
        endpoint
            .metrics
            .endpoint_login(endpoint.label(), "insecure");
        tracing::info!(endpoint = %endpoint.config.listen, client = %addr, "a plaintext login on an endpoint that routes by TLS server name; refused with 3159, nothing woken");
        return;
    }
    let no_password = greeted.login.answer.is_empty();
    let (named, user) = endpoint
        .config
        .route_by
        .split(&typed, server_name.as_deref())
        .unwrap_or(("", typed.as_str()));
    let health_check = no_password
        && endpoint
            .config
            .health_check_users
            .iter()
            .any(|u| u.as_str() == user);
    let routed = endpoint.route(&typed, server_name.as_deref());
    // Why the endpoint refuses the login itself, if it does. Every refusal gets the same
    // answer, whether the instance exists or not.
    let refusal = match &routed {
        _ if health_check => Some((
            "a health check names an instance: an endpoint answers health checks only for \
             itself, a user name without an instance part",
            "health_check_for_an_instance",
        )),
        None => Some((
            "the login names no instance of this endpoint",
            "unknown_instance",
        )),
        // Switch mode reads the client's answer to the server's own scramble, after one auth
        // switch; the endpoint's greeting may have used that switch already.
        Some((i, _)) if i.rt.instance.config.auth != AuthMode::Dual => Some((
            "the instance is in switch mode, which an endpoint cannot route to",
            "switch_mode",
        )),
        Some((i, _)) if !endpoint.meets_tls_of(&i.rt.instance.config) => Some((
            "the instance's TLS policy (client_ca, min_version) is stricter than this \
             endpoint's: it is reached on its own listen address",
            "tls_policy",
        )),
        // Its 3159 would tell the instance exists.
        Some((i, _))
            if i.rt.instance.config.relay_terminates_every_login() && !greeted.login.tls =>
        {
            Some((
                "the instance requires TLS (require_secure_transport or client_ca) and the \
                 login came without",
                "insecure",
            ))
        }
        Some(_) => None,
    };
    match (routed, refusal) {
        (Some((instance, user)), None) => {
            greeted.login.response.username = user.into_bytes();
            endpoint.metrics.endpoint_login(endpoint.label(), "routed");
            let rt = Arc::clone(&instance.rt);
            // From here the connection is the instance's: its removal waits for it, or cuts
            // it.
            let session = perceptron::serve(rt, client, client_addr, local, pending, Some(greeted));
            instance.serve(Box::pin(session)).await;
        }
        (_, refusal) => {
            let (reason, outcome) = refusal.unwrap_or(("", "unknown_instance"));
            endpoint.metrics.endpoint_login(endpoint.label(), outcome);
            let ip = client_addr.ip();
            let wrong_password = outcome::wrong_password(user, ip, !no_password);
            // Charged as a wrong password for an instance of that name is (through an
            // endpoint no wake is charged), so the budgets' blocks come after as many probes
            // whether it exists or not. A health check is not charged, whichever the name: a
            // load balancer checking `haproxy@<instance>` must not block its own address.
            // Admitted as an instance's login is, waiting as long as one would for the
            // verdicts of logins in flight (an instance with the default timeouts).
            let err = if health_check {
                wrong_password
            } else {
                let deadline = tokio::time::Instant::now()
                    + crate::config::DEFAULT_RESUME_TIMEOUT
                    + crate::config::DEFAULT_COMPUTE_TIMEOUT;
                match endpoint
                    .budgets
                    .admit_login(ip, named, user.as_bytes(), false, deadline)
                    .await
                {
                    Ok(charge) => {
                        charge.refused(std::time::Instant::now());
                        wrong_password
                    }
                    Err(refusal) => {
                        endpoint
                            .metrics
                            .budget_refused(endpoint.label(), refusal.label());
                        refusal.client_error(&ip.to_string(), user.as_bytes())
                    }
                }
            };
            let seq = greeted.login.last_sequence_id.wrapping_add(1);
            let _ = client.write_packet(seq, &err.to_bytes()).await;
            let server_name = server_name.as_deref().unwrap_or_default();
            // A client's name may be as long as a login: the log keeps its start.
            let logged = typed.as_bytes();
            let logged = logged.get(..MAX_LOGGED_NAME).unwrap_or(logged);
            tracing::info!(endpoint = %endpoint.config.listen, client = %addr, user = %Escaped(logged), server_name = %Escaped(server_name.as_bytes()), reason, code = err.error_code, "login refused; nothing woken");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouteBy;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn the_user_name_names_the_instance() {
        let at = RouteBy::UserAtInstance;
        assert_eq!(at.split("app@shop", None), Some(("shop", "app")));
        assert_eq!(
            at.split("a@b@shop", Some("x.example")),
            Some(("shop", "a@b"))
        );
        assert_eq!(at.split("app", None), None);
        assert_eq!(at.split("app@", None), None);
        assert_eq!(at.split("@shop", None), None);
        let dot = RouteBy::InstanceDotUser;
        assert_eq!(dot.split("shop.app", None), Some(("shop", "app")));
        assert_eq!(dot.split("shop.app.v2", None), Some(("shop", "app.v2")));
        assert_eq!(dot.split("app", None), None);
        assert_eq!(dot.split(".app", None), None);
        let sni = RouteBy::ServerName;
        assert_eq!(
            sni.split("app", Some("shop.db.example.com")),
            Some(("shop", "app"))
        );
        assert_eq!(sni.split("app@x", Some("shop")), Some(("shop", "app@x")));
        assert_eq!(sni.split("app", None), None);
        assert_eq!(sni.split("app", Some(".example.com")), None);
    }

    #[test]
    fn the_greeting_offers_only_what_every_compute_has_and_follows_a_learnt_profile() {
        use authplugin::packet::capabilities::{CLIENT_DEPRECATE_EOF, CLIENT_SESSION_TRACK};
        use authplugin::{KeyId, KeyRing, PerceptronKey};
        let runtime = |name: &str| {
            let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
            let ring = KeyRing::new(vec![key]).unwrap();
            Arc::new(crate::in_memory::runtime_with(
                AuthMode::Dual,
                ring,
                std::time::Duration::from_secs(1),
                |c| c.name = name.into(),
            ))
        };
        let (a, b) = (runtime("a"), runtime("b"));
        let config = EndpointConfig {
            listen: "127.0.0.1:3306".parse().unwrap(),
            route_by: RouteBy::UserAtInstance,
            handshake_timeout: std::time::Duration::from_secs(1),
            tls: None,
            health_check_users: Vec::new(),
        };
        let registry = Arc::new(Registry::default());
        for rt in [&a, &b] {
            let origin = crate::registry::Origin::ConfigFile;
            let tasks = CancellationToken::new();
            registry
                .insert(Arc::new(Registered::new(Arc::clone(rt), origin, 0, tasks)))
                .unwrap();
        }
        let budgets = Arc::new(Budgets::new(crate::config::BudgetSettings::default()));
        let endpoint = Endpoint::new(
            config,
            registry,
            None,
            budgets,
            Arc::new(Metrics::default()),
        );
        let shim = ComputeProfile::server_shim_default();
        assert_eq!(endpoint.profile(), shim);
        assert_eq!(
            endpoint
                .route("app@b", None)
                .map(|(r, u)| (r.name().to_owned(), u)),
            Some(("b".into(), "app".into()))
        );
        assert!(endpoint.route("app@c", None).is_none());
        // b's compute turns out to lack CLIENT_DEPRECATE_EOF: nobody is offered it any more.
        b.forget_capabilities(CLIENT_DEPRECATE_EOF, 0);
        let greeting = endpoint.profile();
        assert_eq!(greeting.capability_flags & CLIENT_DEPRECATE_EOF, 0);
        assert_eq!(
            greeting.capability_flags | CLIENT_DEPRECATE_EOF,
            shim.capability_flags
        );
        assert_eq!(greeting.capability_flags & CLIENT_SESSION_TRACK, 0);
        // a's compute is a MariaDB offering extended metadata, b's (server-shim) offers none:
        // the endpoint offers none, or a login routed to b would be refused for ever.
        let mut mariadb = authplugin::packet::HandshakeV10::new(
            b"10.11.6-MariaDB".to_vec(),
            1,
            &authplugin::Scramble::from_bytes([1; 20]),
            shim.capability_flags,
            45,
            2,
            "mysql_native_password",
        );
        let extended = authplugin::packet::capabilities::MARIADB_CLIENT_EXTENDED_METADATA;
        mariadb.reserved[6..].copy_from_slice(&extended.to_le_bytes());
        a.learn_profile(&mariadb);
        assert_eq!(a.profile().mariadb_capabilities(), extended);
        assert_eq!(endpoint.profile().mariadb_capabilities(), 0);
    }
}
