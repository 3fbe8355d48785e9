//! Dual verification on a real MariaDB: a stock Debian `mariadbd`, started by the
//! relay's process driver, loads this build's `perceptron_dual` plugin from a private plugin
//! directory. The relay answers the plugin's challenge with the relayed-auth payload; stock
//! clients on the direct route answer it natively. Forged, foreign, stale and replayed payloads
//! are played straight at the server, which refuses each with a generic 1045 and writes the
//! precise reason to its error log only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH, CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
    CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41, HandshakeV10};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{AuthPlugin, KeyId, KeySecret, PerceptronKey, Scramble};
use tests::relay::{PASSWORD, Relay, USER, credential_needles, pid_alive, scan_files, scan_memory};
use tests::{TempDir, mariadb, raw};
use zeroize::Zeroizing;

/// A relay in dual mode in front of a MariaDB that loads the plugin with the relay's own key
/// ring, plus the server's error log.
struct Dual {
    relay: Relay,
    error_log: PathBuf,
    /// Where root logs in: the relay's port (its direct route), or, where every login is the
    /// relay's (`resumable_sessions`), the compute's own.
    root_port: u16,
    _dir: TempDir,
}

impl Dual {
    fn start(label: &str, extra: &[&str]) -> Self {
        Self::start_using(label, extra, tests::relay::RelayOptions::default())
    }

    fn start_using(label: &str, extra: &[&str], options: tests::relay::RelayOptions) -> Self {
        let dir = TempDir::new(label);
        let relays_every_login = options.instance_toml.contains("resumable_sessions = true");
        let relay = tests::mariadb::dual_relay_using(dir.path(), extra, options);
        let error_log = tests::mariadb::dual_error_log(dir.path());
        let root_port = if relays_every_login {
            relay.compute_port
        } else {
            relay.port
        };
        let dual = Self {
            relay,
            error_log,
            root_port,
            _dir: dir,
        };
        // root (mysql_native_password, empty password) cannot log in through a dual relay: it
        // sets the accounts up on the direct route, or on the compute itself where the relay
        // has no direct route.
        dual.relay.resume();
        dual.root(&format!(
            "CREATE USER {USER}@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('{PASSWORD}');\
             CREATE USER nat@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('nat-pw');\
             GRANT ALL ON *.* TO {USER}@'%'; GRANT ALL ON *.* TO nat@'%'; CREATE DATABASE shop;"
        ));
        dual
    }

    /// A dual relay whose instance keeps sessions across a stop (it pauses after 2 idle
    /// seconds and stops a frozen compute after 1), with MariaDB issuing tickets under a key
    /// of its own: that key's path, for [`remove_ticket_key`].
    fn start_resumable(label: &str) -> (Self, PathBuf) {
        let ticket_key = std::env::temp_dir().join(format!("{label}-{}.key", std::process::id()));
        let _ = std::fs::remove_file(&ticket_key);
        tests::relay::keygen(&ticket_key, "tickets-1");
        let dual = Self::start_using(
            label,
            &[
                &format!(
                    "--loose-perceptron-dual-ticket-key-file={}",
                    ticket_key.display()
                ),
                "--loose-perceptron-dual-instance=demo",
                // What a spliced resumable session holds is read from it.
                "--plugin-load-add=metadata_lock_info.so",
            ],
            tests::relay::RelayOptions {
                idle_pause_after: "2s",
                instance_toml: "stop_after = \"1s\"\nresumable_sessions = true\n".into(),
                ..tests::relay::RelayOptions::default()
            },
        );
        (dual, ticket_key)
    }

    /// Waits until the instance pauses on its own (idle, then `stop_after`).
    fn wait_paused(&self) {
        assert!(
            Relay::wait_until(Duration::from_secs(60), || self.relay.state() == "paused"),
            "{}\n{}",
            self.relay.admin("GET", "/v1/instances").1,
            self.relay.log()
        );
    }

    fn pause(&self) {
        self.relay.pause();
        assert_eq!(self.relay.state(), "paused");
    }

    /// Runs SQL as root on the direct route, or on the compute itself (the instance must be
    /// running).
    fn root(&self, sql: &str) -> String {
        let out = mariadb(self.root_port, "root", None, &[], sql);
        assert_eq!(
            out.code,
            Some(0),
            "{sql}: {}\n{}",
            out.stderr,
            self.relay.log()
        );
        out.stdout
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(&self.error_log).unwrap_or_default()
    }

    fn key(&self) -> PerceptronKey {
        let ring = authplugin::key_file::load(&self.relay.dir.join("perceptron.key")).unwrap();
        ring.signing_key().clone()
    }
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// What a relayed login signs, as a relay (or an attacker with some of its parts) would.
struct Forge {
    key: PerceptronKey,
    scramble_a: Scramble,
    password: &'static str,
    issued_at_ms: u64,
    /// The user and database the MAC binds (normally those of the login).
    bound_user: &'static str,
    bound_db: &'static str,
}

impl Forge {
    fn sign(&self, scramble_b: &Scramble) -> Vec<u8> {
        let claim = LoginClaim {
            scramble_a: self.scramble_a.clone(),
            answer_a: Zeroizing::new(authplugin::native_password::token(
                self.password.as_bytes(),
                &self.scramble_a,
            )),
            client_plugin: AuthPlugin::MysqlNativePassword,
            client_addr: "192.0.2.7:40000".into(),
        };
        let binding = Binding {
            scramble_b,
            user: self.bound_user.as_bytes(),
            database: self.bound_db.as_bytes(),
        };
        payload::encode_signed(&claim, &self.key, self.issued_at_ms, &binding).unwrap()
    }
}

/// Logs in to the compute directly as `user` with database `db`, the way the relay does at
/// P6–P7, answering the plugin's challenge with `forge`'s payload. The server's verdict: OK,
/// or its ERR's `(code, message)`.
fn relayed_login(
    compute_port: u16,
    user: &str,
    db: &str,
    forge: &Forge,
) -> Result<(), (u16, String)> {
    let mut s: TcpStream = raw::connect(compute_port).unwrap();
    let (_, greeting) = raw::read_packet(&mut s).unwrap();
    let g = HandshakeV10::decode(&greeting).unwrap();
    let login = HandshakeResponse41 {
        client_flag: CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_WITH_DB
            | (g.capability_flags & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA),
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: user.as_bytes().to_vec(),
        auth_response: Zeroizing::new(Vec::new()),
        database: Some(db.as_bytes().to_vec()),
        client_plugin_name: Some(payload::PLUGIN_NAME.as_bytes().to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    raw::write_packet(&mut s, 1, &login.to_bytes()).unwrap();
    let (seq, switch) = raw::read_packet(&mut s).unwrap();
    assert_eq!(seq, 2);
    let switch = AuthSwitchRequest::decode(&switch).expect("the plugin's challenge");
    assert_eq!(switch.plugin_name, b"mysql_native_password");
    let b = switch.scramble().expect("20 bytes and a NUL");
    raw::write_packet(&mut s, 3, &forge.sign(&b)).unwrap();
    let (seq, verdict) = raw::read_packet(&mut s).unwrap();
    assert_eq!(seq, 4);
    match verdict.first() {
        Some(0x00) => Ok(()),
        _ => Err(raw::err_of(&verdict)),
    }
}

#[test]
fn mariadb_with_the_plugin_verifies_relayed_logins_and_refuses_each_kind_of_forgery() {
    let d = Dual::start("maria-dual", &[]);
    let r = &d.relay;

    // Perceptron route: paused → the relay greets, wakes MariaDB, answers the plugin's
    // challenge; the client's queries run on the held connection.
    d.pause();
    let out = mariadb(
        r.port,
        USER,
        Some(PASSWORD),
        &["-Dshop"],
        "SELECT CURRENT_USER(), DATABASE()",
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, r.log());
    assert_eq!(out.stdout, format!("{USER}@%\tshop\n"));
    assert_eq!(
        r.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            1.0
        ),
        1.0,
        "{}",
        r.log()
    );
    // A wrong password, an unknown user and an account of another plugin: the server's 1045,
    // relayed unchanged.
    for (user, password) in [(USER, "wrong"), ("nobody", "x"), ("nat", "nat-pw")] {
        d.pause();
        let out = mariadb(r.port, user, Some(password), &[], "SELECT 1");
        assert!(
            out.stderr.contains("ERROR 1045 (28000)"),
            "{user}: {}\n{}\nerror log:\n{}",
            out.stderr,
            r.log(),
            d.error_log()
        );
    }
    assert!(d.error_log().contains(&format!(
        "refused relayed login for '{USER}'@'127.0.0.1': client answer refused"
    )));

    // Direct route: a stock client answers the plugin's challenge natively.
    d.relay.resume();
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT CURRENT_USER()");
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // Payloads played straight at the server.
    let key = d.key();
    let good = || Forge {
        key: key.clone(),
        scramble_a: Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms()),
        password: PASSWORD,
        issued_at_ms: now_ms(),
        bound_user: USER,
        bound_db: "shop",
    };
    assert_eq!(relayed_login(r.compute_port, USER, "shop", &good()), Ok(()));
    let other_secret = PerceptronKey::new(key.id().clone(), KeySecret::from_bytes([7; 32]));
    let unknown_id = PerceptronKey::new(
        KeyId::new("not-in-ring").unwrap(),
        KeySecret::from_bytes([7; 32]),
    );
    let replayed = good();
    assert_eq!(
        relayed_login(r.compute_port, USER, "shop", &replayed),
        Ok(())
    );
    let cases: Vec<(&str, Forge, &str)> = vec![
        (
            "forged MAC",
            Forge {
                key: other_secret,
                ..good()
            },
            "[bad_mac]",
        ),
        (
            "unknown key id",
            Forge {
                key: unknown_id,
                ..good()
            },
            "[unknown_key_id]",
        ),
        (
            "replayed (key id, scramble A)",
            Forge {
                scramble_a: replayed.scramble_a.clone(),
                ..good()
            },
            "[replayed]",
        ),
        (
            "expired",
            Forge {
                issued_at_ms: now_ms() - 120_000,
                ..good()
            },
            "[outside_window]",
        ),
        (
            "an old sniffed login re-signed with the stolen key",
            Forge {
                scramble_a: Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms() - 660_000),
                ..good()
            },
            "[login_age]",
        ),
        (
            "made for another user",
            Forge {
                bound_user: "nat",
                ..good()
            },
            "[bad_mac]",
        ),
        (
            "made for another database",
            Forge {
                bound_db: "mysql",
                ..good()
            },
            "[bad_mac]",
        ),
        (
            "wrong client answer",
            Forge {
                password: "nope",
                ..good()
            },
            "[wrong_answer]",
        ),
    ];
    for (what, forge, reason) in cases {
        let before = d.error_log().matches(reason).count();
        let (code, message) = relayed_login(r.compute_port, USER, "shop", &forge).unwrap_err();
        assert_eq!(code, 1045, "{what}: {message}");
        assert_eq!(
            message,
            format!("Access denied for user '{USER}'@'127.0.0.1' (using password: YES)"),
            "{what}: the client learns nothing more"
        );
        assert_eq!(
            d.error_log().matches(reason).count(),
            before + 1,
            "{what}: the error log names the reason {reason}\n{}",
            d.error_log()
        );
    }

    // perceptron_dual_require_relay = ON: stock clients are refused, relayed logins are not.
    d.root("SET GLOBAL perceptron_dual_require_relay = ON");
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert!(out.stderr.contains("ERROR 1045 (28000)"), "{}", out.stderr);
    assert!(d.error_log().contains("[relay_required]"));
    assert_eq!(relayed_login(r.compute_port, USER, "shop", &good()), Ok(()));
    d.pause();
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(
        out.code,
        Some(0),
        "relayed under require_relay: {}\n{}",
        out.stderr,
        r.log()
    );
    d.root("SET GLOBAL perceptron_dual_require_relay = OFF");

    // The relay holds no credential after all those dual logins (the scanner itself is proven
    // against server-shim's memory in relay_perceptron.rs; mariadbd's multi-terabyte address
    // space reservations make a scan of it take minutes).
    let needles = credential_needles(PASSWORD);
    let in_relay = scan_memory(r.child.pid().unwrap(), &needles);
    assert!(in_relay.is_empty(), "relay memory holds {in_relay:?}");
    let in_state = scan_files(&r.dir.join("state"), &needles);
    assert!(in_state.is_empty(), "relay state_dir holds {in_state:?}");

    // Key rotation: a key appended to the server's file is picked up without a restart; the
    // old key (the relay still signs with it) keeps verifying.
    let key_file = r.dir.join("perceptron.key");
    tests::relay::keygen(&key_file, "test-2");
    let new_key = authplugin::key_file::load(&key_file)
        .unwrap()
        .signing_key()
        .clone();
    assert_eq!(new_key.id().as_str(), "test-2");
    assert_eq!(
        relayed_login(
            r.compute_port,
            USER,
            "shop",
            &Forge {
                key: new_key,
                ..good()
            }
        ),
        Ok(())
    );
    assert!(
        d.error_log()
            .contains("key file changed: loaded 2 key(s) (test-1, test-2)")
    );
    assert_eq!(relayed_login(r.compute_port, USER, "shop", &good()), Ok(()));
    // A key file that becomes readable by others is refused; the ring in use stays.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(relayed_login(r.compute_port, USER, "shop", &good()), Ok(()));
    assert!(
        d.error_log()
            .contains("key file changed but cannot be used"),
        "{}",
        d.error_log()
    );
    // ... and the plugin refuses to load with it.
    d.root("UNINSTALL SONAME 'perceptron_dual'");
    let out = mariadb(
        r.port,
        "root",
        None,
        &[],
        "INSTALL SONAME 'perceptron_dual'",
    );
    assert_ne!(out.code, Some(0), "loaded with a 0644 key file");
    assert!(
        d.error_log()
            .contains("cannot use perceptron_dual_key_file")
            && d.error_log().contains("chmod 600"),
        "{}",
        d.error_log()
    );
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    d.root("INSTALL SONAME 'perceptron_dual'");

    // The plugin unloads and loads again; accounts keep their plugin and hash.
    d.root("UNINSTALL SONAME 'perceptron_dual'");
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_ne!(out.code, Some(0), "no plugin, no login");
    d.root("INSTALL SONAME 'perceptron_dual'");
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "after INSTALL SONAME: {}", out.stderr);
    d.pause();
    let out = mariadb(r.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(
        out.code,
        Some(0),
        "relayed after reload: {}\n{}",
        out.stderr,
        r.log()
    );

    // Moving an existing native account over is one ALTER USER with its stored hash.
    d.relay.resume();
    let hash = d.root("SELECT PASSWORD('nat-pw')");
    d.root(&format!(
        "ALTER USER nat@'%' IDENTIFIED VIA perceptron_dual USING '{}'",
        hash.trim()
    ));
    d.pause();
    let out = mariadb(r.port, "nat", Some("nat-pw"), &[], "SELECT CURRENT_USER()");
    assert_eq!(out.stdout, "nat@%\n", "{}\n{}", out.stderr, r.log());
}

#[test]
fn a_thousand_logins_at_once_through_the_relay_wake_mariadb_once_and_all_succeed() {
    const CLIENTS: usize = 1_000;
    // The relay opens up to 1,000 compute connections at once after the wake: MariaDB's listen
    // backlog (`back_log`, 320 here by default) must hold them, or the kernel drops the
    // handshakes that overflow it and those logins wait out `compute_timeout`.
    let d = Dual::start(
        "maria-dual-1000",
        &["--max-connections=1200", "--back-log=1200"],
    );
    d.pause();
    let wakes = || {
        d.relay
            .metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}")
    };
    let wakes_before = wakes();
    let port = d.relay.port;
    let failures = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let failures = Arc::clone(&failures);
            std::thread::spawn(move || {
                let ok = match raw::login(port, USER, PASSWORD, Some("shop")) {
                    Ok(Ok(mut s)) => raw::query(&mut s, "SELECT 1")
                        .is_ok_and(|r| r == Ok(vec![Some("1".into())])),
                    _ => false,
                };
                if !ok {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0, "{}", d.relay.log());
    // Clients that arrived while MariaDB was starting were held and relayed; those that came
    // after took the direct route.
    let relayed = d
        .relay
        .metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}");
    let direct = d
        .relay
        .metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}");
    assert!(relayed >= 1.0, "{}", d.relay.log());
    assert_eq!(
        relayed + direct,
        CLIENTS as f64 + 1.0,
        "the setup's root login was direct"
    );
    assert_eq!(wakes() - wakes_before, 1.0, "one wake:\n{}", d.relay.log());
    assert!(
        pid_alive(d.relay.compute_pid().unwrap()),
        "mariadbd is alive"
    );
    d.root("SELECT 1");
}

/// A client gets the same types whatever route its connection took (docs/clients.md): the
/// relay's greeting offers MariaDB's extended metadata where the compute does and carries the
/// client's choice into its login, so node-mysql2 reads a `JSON` column as an object on the
/// connection that woke the instance as on the next, direct one (before: a string on the first).
#[test]
fn a_json_column_has_the_same_type_on_the_perceptron_route_as_on_the_direct_one() {
    let d = Dual::start("maria-dual-json", &[]);
    d.root("CREATE TABLE shop.docs (j JSON); INSERT INTO shop.docs VALUES ('{\"a\": 1}')");
    // The relay learns the compute's greeting from a compute that proved the key (MariaDB
    // proves it in a relayed login's challenge round): the first relayed login ever is greeted
    // with the default profile, every later one with MariaDB's.
    d.pause();
    drop(
        raw::login(d.relay.port, USER, PASSWORD, None)
            .unwrap()
            .unwrap(),
    );
    d.pause();
    let script = format!(
        r#"const mysql = require('mysql2/promise');
(async () => {{
  const options = {{ host: '127.0.0.1', port: {port}, user: '{USER}', password: '{PASSWORD}',
    database: 'shop' }};
  for (const route of ['woke the instance', 'direct']) {{
    const c = await mysql.createConnection(options);
    const [rows] = await c.query('SELECT j FROM docs');
    console.log(route + ': ' + typeof rows[0].j + ' ' + JSON.stringify(rows[0].j));
    await c.end();
  }}
}})().catch((e) => {{ console.error(e); process.exit(1); }});
"#,
        port = d.relay.port
    );
    let forwarded = "relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}";
    let direct_before = d.relay.metric(forwarded);
    let out = tests::run_with_input(&mut tests::node(&script), b"", Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, d.relay.log());
    assert_eq!(
        out.stdout,
        "woke the instance: object {\"a\":1}\ndirect: object {\"a\":1}\n",
        "{}",
        d.relay.log()
    );
    // One login was relayed (the wake), the other went direct.
    assert!(d.relay.logged("relayed login accepted"));
    assert_eq!(
        d.relay.metric_reaching(forwarded, direct_before + 1.0),
        direct_before + 1.0
    );
}

/// Parking in dual mode on MariaDB with the plugin (freezing needs no credential): a session
/// that logged in through the relay's dual verification is parked by an unforced pause, and
/// its next query runs on the same session with its state (connection id, current database, a
/// session variable) intact.
#[test]
fn a_relayed_dual_session_is_parked_and_keeps_its_state() {
    let d = Dual::start("maria-dual-parking", &[]);
    d.pause();
    let mut s = raw::login(d.relay.port, USER, PASSWORD, Some("shop"))
        .unwrap()
        .unwrap();
    d.relay.assert_parks_keeping_the_session(&mut s);
}

/// Resumable sessions on MariaDB (docs/parking.md, "Sessions across a stop"): with a ticket key
/// of its own, `perceptron_dual` gives each relayed session a ticket; a parked session then
/// outlives the stop of `mariadbd` and is reattached at its next command, with its database
/// and session variable, after the server proved the key in a challenge round; a pool's open
/// prepared statements are prepared again and keep working under their old ids. A password
/// changed while the session was away refuses the reattach: the client gets ERR 1927.
#[test]
fn a_relayed_dual_session_outlives_the_stop_of_mariadb_and_resumes_with_its_state() {
    let label = "maria-dual-resume";
    let (d, ticket_key) = Dual::start_resumable(label);
    // Idle, the instance pauses on its own (frozen, then stopped after stop_after).
    d.wait_paused();
    let mut s = raw::login(d.relay.port, USER, PASSWORD, Some("shop"))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    assert!(matches!(
        raw::query(&mut s, "SET SESSION sql_mode = 'ANSI_QUOTES'"),
        Ok(Ok(_))
    ));
    // A session that ran no statement: its character set is its handshake's (utf8mb4, where
    // the server's default is latin1), which it keeps on a new compute (before, a session
    // never read was restored to the server's defaults).
    let mut idle = raw::login(d.relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    idle.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    // A database that does not exist: MariaDB's own refusal, after the plugin issued the
    // ticket (before, ERR 1053 "failed during login. Retry", which a pool retries forever).
    match raw::login(d.relay.port, USER, PASSWORD, Some("no_such_db")) {
        Ok(Err((code, message))) => assert_eq!(code, 1049, "{message}"),
        other => panic!("{other:?}\n{}", d.relay.log()),
    }
    let pid = d.relay.compute_pid().unwrap();
    d.wait_paused();
    assert!(!pid_alive(pid), "mariadbd is gone");
    assert_eq!(
        raw::one_row(
            &mut idle,
            "SELECT CONCAT(@@character_set_client, ' ', @@collation_connection)"
        )
        .as_deref(),
        Some("utf8mb4 utf8mb4_general_ci"),
        "{}",
        d.relay.log()
    );
    assert_eq!(
        raw::one_row(&mut s, "SELECT DATABASE()").as_deref(),
        Some("shop"),
        "{}",
        d.relay.log()
    );
    assert_eq!(
        raw::one_row(&mut s, "SELECT @@SESSION.sql_mode").as_deref(),
        Some("ANSI_QUOTES")
    );
    assert!(d.relay.logged("session reattached"));

    // The password changes while the session is away: its ticket no longer opens it.
    d.root(&format!(
        "SET PASSWORD FOR {USER}@'%' = PASSWORD('changed')"
    ));
    d.wait_paused();
    match raw::query(&mut s, "SELECT 1") {
        Ok(Err((code, _))) => assert_eq!(code, 1927, "{}", d.relay.log()),
        other => panic!("{other:?}\n{}", d.relay.log()),
    }
    assert!(
        d.error_log().contains("ticket_credential_changed"),
        "{}",
        d.error_log()
    );

    // A pool whose prepared statements stay open across a stop (the new server numbers them
    // otherwise): opened while paused, so that its login is relayed and ticketed.
    d.root(&format!(
        "SET PASSWORD FOR {USER}@'%' = PASSWORD('{PASSWORD}')"
    ));
    d.wait_paused();
    let pool = tests::pools::Pool::start(label, tests::pools::mysql2_prepared(), d.relay.port);
    let pid = d.relay.compute_pid().unwrap();
    d.wait_paused();
    assert!(!pid_alive(pid), "mariadbd is gone");
    let second = pool.finish();
    assert!(second.parse::<u32>().is_ok(), "{second}");
    assert!(d.relay.logged("prepared=2"), "{}", d.relay.log());
    remove_ticket_key(&ticket_key);
}

/// A `KILL QUERY` by the id a relayed session's handshake gave, which is the relay's (MariaDB
/// knows the session by an id of its own, another after each reattach), reaches that session:
/// JDBC's query timeout sends one from a second connection. Also after the session was
/// carried across a stop.
#[test]
fn kill_query_by_the_handshakes_id_reaches_the_relayed_session_also_after_a_stop() {
    let (d, ticket_key) = Dual::start_resumable("maria-dual-kill");
    let (mut a, greeted_as) = raw::login_greeted(d.relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    a.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    let on_mariadb = raw::one_row(&mut a, "SELECT CONNECTION_ID()").unwrap();
    assert_ne!(
        on_mariadb,
        greeted_as.to_string(),
        "the relay's greeting gave the id"
    );
    let interrupted = |mut a: TcpStream| {
        let sleeping = std::thread::spawn(move || {
            let answer = raw::query(&mut a, "SELECT SLEEP(60)");
            (a, answer)
        });
        // Sleeping on MariaDB (which runs while a statement does).
        assert!(
            Relay::wait_until(Duration::from_secs(30), || {
                mariadb(
                    d.root_port,
                    "root",
                    None,
                    &[],
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE INFO = 'SELECT SLEEP(60)'",
                )
                .stdout
                .trim()
                    == "1"
            }),
            "{}",
            d.relay.log()
        );
        let mut b = raw::login(d.relay.port, USER, PASSWORD, None)
            .unwrap()
            .unwrap();
        let killed = raw::query(&mut b, &format!("KILL QUERY {greeted_as}"));
        assert!(matches!(killed, Ok(Ok(_))), "{killed:?}\n{}", d.relay.log());
        let (a, answer) = sleeping.join().unwrap();
        match answer {
            Ok(Err((code, _))) => assert_eq!(code, 1317, "{}", d.relay.log()),
            other => panic!("SLEEP not interrupted: {other:?}\n{}", d.relay.log()),
        }
        a
    };
    let mut a = interrupted(a);
    // Carried across a stop: the new MariaDB knows the session by yet another id.
    let pid = d.relay.compute_pid().unwrap();
    d.wait_paused();
    assert!(!pid_alive(pid), "mariadbd is gone");
    let after = raw::one_row(&mut a, "SELECT CONNECTION_ID()").unwrap();
    assert!(d.relay.logged("session reattached"), "{}", d.relay.log());
    assert_ne!(after, greeted_as.to_string());
    interrupted(a);
    remove_ticket_key(&ticket_key);
}

/// A session carried across a stop by value (docs/parking.md, *Sessions across a stop*): the
/// relay sends the new MariaDB only statements it generates from what the old one reported,
/// never the client's text. A `SET STATEMENT … FOR INSERT` inserts once; a database chosen
/// before `COM_RESET_CONNECTION` (which keeps it) is the one after the stop; user variables
/// come back with their types, bytes and collations, system variables with their values. An
/// account dropped and created again with the same password reattaches none of its sessions.
#[test]
fn a_session_carried_by_value_runs_nothing_twice_and_keeps_its_database_and_variables() {
    let (d, ticket_key) = Dual::start_resumable("maria-dual-by-value");
    d.root(&format!(
        "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY); CREATE DATABASE tenant_b; \
         CREATE ROLE writer; GRANT writer TO {USER}@'%'; SET DEFAULT ROLE writer FOR {USER}@'%';"
    ));
    d.wait_paused();
    // Logged in while paused: relayed, and ticketed.
    let mut s = raw::login(d.relay.port, USER, PASSWORD, Some("shop"))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    let run = |s: &mut std::net::TcpStream, sql: &str| {
        assert!(matches!(raw::query(s, sql), Ok(Ok(_))), "{sql}");
    };
    run(&mut s, "USE tenant_b");
    raw::write_packet(
        &mut s,
        0,
        &[authplugin::packet::command::COM_RESET_CONNECTION],
    )
    .unwrap();
    let (_, ok) = raw::read_packet(&mut s).unwrap();
    assert_eq!(ok.first(), Some(&0x00), "{ok:?}");
    run(
        &mut s,
        "SET STATEMENT max_statement_time=10 FOR INSERT INTO shop.orders VALUES ()",
    );
    run(
        &mut s,
        "SET @n = 42, @big = 18446744073709551615, @dec = 1.50, @d = 0.1e0 + 0.2e0, \
         @s = _utf8mb4 X'68C3A96C6C6FF09F9880' COLLATE utf8mb4_bin, @b = X'00FF', @z = NULL",
    );
    run(
        &mut s,
        "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES', time_zone = '+02:00', \
         autocommit = 0, sql_select_limit = 1, max_join_size = 1000000, sql_big_selects = 1",
    );
    // What a new login would set otherwise: its default role, the handshake's character set.
    run(&mut s, "SET ROLE NONE");
    run(&mut s, "SET NAMES latin1");
    // A global change since the login: the session's value (read-only in a session) differs
    // from the global one, and from nothing a new session has.
    d.root("SET GLOBAL max_allowed_packet = 67108864");
    run(&mut s, "COMMIT");
    let pid = d.relay.compute_pid().unwrap();
    d.wait_paused();
    assert!(!pid_alive(pid), "mariadbd is gone");
    assert_eq!(
        raw::one_row(&mut s, "SELECT COUNT(*) FROM shop.orders").as_deref(),
        Some("1"),
        "the INSERT ran once\n{}",
        d.relay.log()
    );
    assert!(d.relay.logged("session reattached"), "{}", d.relay.log());
    for (sql, want) in [
        ("SELECT DATABASE()", "tenant_b"),
        ("SELECT @n + 1", "43"),
        ("SELECT @big + 0", "18446744073709551615"),
        ("SELECT @dec", "1.50"),
        ("SELECT @dec = 1.5", "1"),
        ("SELECT @d = 0.1e0 + 0.2e0", "1"),
        (
            "SELECT CONCAT(HEX(@s), ' ', COLLATION(@s))",
            "68C3A96C6C6FF09F9880 utf8mb4_bin",
        ),
        ("SELECT CONCAT(HEX(@b), ' ', COLLATION(@b))", "00FF binary"),
        ("SELECT @z IS NULL", "1"),
        ("SELECT @@sql_mode", "ANSI_QUOTES,NO_BACKSLASH_ESCAPES"),
        ("SELECT @@time_zone", "+02:00"),
        ("SELECT @@autocommit", "0"),
        ("SELECT @@sql_select_limit", "1"),
        ("SELECT @@max_join_size", "1000000"),
        ("SELECT @@sql_big_selects", "1"),
        ("SELECT CURRENT_ROLE() IS NULL", "1"),
        ("SELECT @@character_set_client", "latin1"),
    ] {
        assert_eq!(
            raw::one_row(&mut s, sql).as_deref(),
            Some(want),
            "{sql}\n{}",
            d.relay.log()
        );
    }
    // With autocommit off, those reads opened a transaction, which would keep the compute.
    run(&mut s, "COMMIT");
    // The account dropped and created again with the same password: a new account, whose
    // generation (drawn by the plugin's hash_password) no old ticket carries.
    d.root(&format!(
        "DROP USER {USER}@'%'; CREATE USER {USER}@'%' IDENTIFIED VIA perceptron_dual \
         USING PASSWORD('{PASSWORD}'); GRANT ALL ON *.* TO {USER}@'%';"
    ));
    d.wait_paused();
    match raw::query(&mut s, "SELECT 1") {
        Ok(Err((code, _))) => assert_eq!(code, 1927, "{}", d.relay.log()),
        other => panic!("{other:?}\n{}", d.relay.log()),
    }
    assert!(
        d.error_log().contains("ticket_credential_changed"),
        "{}",
        d.error_log()
    );
    // The new account logs in as any would.
    let mut again = raw::login(d.relay.port, USER, PASSWORD, Some("shop"))
        .unwrap()
        .unwrap();
    assert_eq!(raw::one_row(&mut again, "SELECT 1").as_deref(), Some("1"));

    // A role the session set lets it into its database, and the new login's (none) does not:
    // the database is chosen again once the session's role is.
    d.root(
        "CREATE DATABASE tenant_c; CREATE ROLE r_c; GRANT ALL ON tenant_c.* TO r_c; \
         CREATE USER lim@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('lim-pw'); \
         GRANT r_c TO lim@'%'; GRANT SELECT ON shop.* TO lim@'%';",
    );
    drop(again);
    d.wait_paused();
    let mut l = raw::login(d.relay.port, "lim", "lim-pw", Some("shop"))
        .unwrap()
        .unwrap();
    l.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    run(&mut l, "SET ROLE r_c");
    run(&mut l, "USE tenant_c");
    let pid = d.relay.compute_pid().unwrap();
    d.wait_paused();
    assert!(!pid_alive(pid), "mariadbd is gone");
    assert_eq!(
        raw::one_row(&mut l, "SELECT CONCAT(DATABASE(), ' ', CURRENT_ROLE())").as_deref(),
        Some("tenant_c r_c"),
        "{}",
        d.relay.log()
    );

    // A value the compute would no longer take (a SET GLOBAL made the session's empty
    // enforce_storage_engine one a SET refuses): every SET is tried on the session itself when
    // its state is read, so it keeps its compute, frozen rather than stopped, and is never
    // closed at a reattach.
    d.root("SET GLOBAL enforce_storage_engine = 'InnoDB'");
    run(&mut l, "SELECT 1");
    let reason = "a variable whose value cannot be restored exactly";
    assert!(
        Relay::wait_until(Duration::from_secs(60), || {
            d.relay.admin("GET", "/v1/instances").1.contains(reason)
        }),
        "{}",
        d.relay.log()
    );
    assert_eq!(raw::one_row(&mut l, "SELECT 2").as_deref(), Some("2"));
    remove_ticket_key(&ticket_key);
}

/// A session that changed user (`COM_CHANGE_USER` to a read-only account, then
/// `COM_RESET_CONNECTION`, as a pool does at check-in) is never carried back to the account it
/// logged in as: it stays pinned to its compute (frozen, not stopped, the reason in
/// `GET /v1/instances`), and after the pause it is still the read-only account, whose INSERT is
/// refused. Before, the reattach logged it in again as the first, privileged account, and the
/// INSERT was accepted. mysql-connector-python (pure) changes the user and resets.
#[test]
fn a_session_that_changed_user_is_never_carried_back_as_the_first_one() {
    use std::io::{BufRead as _, Write as _};
    let (d, ticket_key) = Dual::start_resumable("maria-dual-change-user");
    d.root(
        "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY); \
         CREATE USER ro@'%' IDENTIFIED VIA perceptron_dual USING PASSWORD('ro-pw'); \
         GRANT SELECT ON shop.* TO ro@'%';",
    );
    d.wait_paused();
    let script = format!(
        "import os, sys, mysql.connector\n\
         c = mysql.connector.connect(host='127.0.0.1', port=int(os.environ['PORT']), \
         user='{USER}', password='{PASSWORD}', database='shop', ssl_disabled=True, use_pure=True, \
         charset='utf8mb4', collation='utf8mb4_general_ci')\n\
         c.cmd_change_user(username='ro', password='ro-pw', database='shop')\n\
         c.cmd_reset_connection()\n\
         print('ready', flush=True)\n\
         sys.stdin.readline()\n\
         cur = c.cursor()\n\
         cur.execute('SELECT CURRENT_USER()')\n\
         print(cur.fetchone()[0], flush=True)\n\
         try:\n\
         \x20   cur.execute('INSERT INTO shop.orders VALUES ()')\n\
         \x20   c.commit()\n\
         \x20   print('inserted', flush=True)\n\
         except mysql.connector.Error as e:\n\
         \x20   print(e.errno, flush=True)\n"
    );
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .env("PORT", d.relay.port.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let mut child = tests::ChildGuard::new(child);
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().map(Result::unwrap);
    if first.as_deref() != Some("ready") {
        let err = child.wait_exit(Duration::from_secs(10)).map(|(_, e)| e);
        panic!("{first:?}: {err:?}\n{}", d.relay.log());
    }
    let pid = d.relay.compute_pid().unwrap();
    // Idle: the instance pauses, and the pinned session keeps its compute frozen.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || d.relay.state() == "frozen"),
        "{}",
        d.relay.log()
    );
    let instances = d.relay.admin("GET", "/v1/instances").1;
    assert!(
        instances.contains("COM_CHANGE_USER"),
        "{instances}\n{}",
        d.relay.log()
    );
    assert!(pid_alive(pid), "the session keeps its compute (frozen)");
    stdin.write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let err = child.wait_exit(Duration::from_secs(60)).map(|(_, e)| e);
    assert_eq!(rest, ["ro@%", "1142"], "{err:?}\n{}", d.relay.log());
    assert_eq!(d.root("SELECT COUNT(*) FROM shop.orders").trim(), "0");
    remove_ticket_key(&ticket_key);
}

/// Removes a ticket key of [`Dual::start_resumable`] and its file of redeemed tickets.
fn remove_ticket_key(ticket_key: &std::path::Path) {
    let _ = std::fs::remove_file(ticket_key);
    let _ = std::fs::remove_file(ticket_key.with_extension("key.used"));
}

/// `mariadb-dump` of `shop` through `relay` as `user`, without its comments (they name the
/// server's version string, which the relay's greeting imitates for a held login); panics if
/// it fails.
fn dump_shop(relay: &Relay, user: &str, password: Option<&str>) -> String {
    let mut cmd = std::process::Command::new("mariadb-dump");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{}", relay.port))
        .arg(format!("-u{user}"))
        .args([
            "--skip-ssl",
            "--skip-comments",
            "--single-transaction",
            "shop",
        ]);
    if let Some(p) = password {
        cmd.arg(format!("-p{p}"));
    }
    let out = tests::run_with_input(&mut cmd, b"", Duration::from_secs(300));
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, relay.log());
    out.stdout
}

/// A held connection spliced in the kernel (docs/kernel-splice.md) carries a 100 MB
/// `mariadb-dump`: the dump taken through it, by a login that woke MariaDB, is byte for byte
/// the one taken on the direct route. Skipped, with the reason, where the kernel cannot
/// splice.
#[test]
fn a_hundred_megabyte_dump_through_a_spliced_connection_matches_the_direct_routes() {
    let d = Dual::start("maria-dual-splice-dump", &[]);
    if !d.relay.logged("held connections are spliced in the kernel") {
        eprintln!("skipped: this kernel cannot splice\n{}", d.relay.log());
        return;
    }
    // 100,000 rows of 1,000 bytes.
    d.root(
        "USE shop; CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(1000) NOT NULL); \
         INSERT INTO big SELECT seq, CONCAT(LPAD(seq, 10, '0'), REPEAT(CHAR(97 + seq % 26), 990)) \
         FROM seq_1_to_100000;",
    );
    let direct = dump_shop(&d.relay, "root", None);
    assert!(direct.len() > 100_000_000, "{} bytes", direct.len());
    d.pause();
    let held = dump_shop(&d.relay, USER, Some(PASSWORD));
    // Spliced below TCP, the relay learns of the close at its next look (within a second).
    let spliced_and_closed = || {
        d.relay
            .log()
            .lines()
            .any(|l| l.contains("session closed") && l.contains("spliced=true"))
    };
    assert!(
        Relay::wait_until(Duration::from_secs(10), spliced_and_closed),
        "the dump's session was not spliced\n{}",
        d.relay.log()
    );
    let differs = held
        .lines()
        .zip(direct.lines())
        .find(|(h, d)| h != d)
        .map(|(h, d)| {
            (
                h.chars().take(200).collect::<String>(),
                d.chars().take(200).collect::<String>(),
            )
        });
    assert_eq!(differs, None, "held, then direct");
    assert_eq!(held.len(), direct.len());
    assert!(held == direct, "the dumps differ");
}

/// A resumable session on loopback is spliced below TCP like any held one (docs/kernel-splice.md,
/// *Resumable sessions*): what it did there is read from MariaDB when it is taken back. One
/// that only ran statements and changed database is carried across the stop with that
/// database, its row inserted once, and what it read of a statement at the splice point is
/// that statement's; one that took a lock or made a temporary table while spliced (its trace
/// wiped by `FLUSH STATUS`), and one on the pump whose `SELECT` ran a function that made one,
/// keep MariaDB frozen, with the reasons in `relay status`.
#[test]
fn a_spliced_resumable_session_is_read_from_mariadb_when_taken_back() {
    let (d, ticket_key) = Dual::start_resumable("maria-dual-splice");
    if !d.relay.logged("spliced in the kernel below TCP") {
        let log = d.relay.log();
        assert!(
            log.contains("is not available"),
            "the relay says nothing of the splice below TCP\n{log}"
        );
        eprintln!("skipped: this kernel cannot splice below TCP\n{log}");
        remove_ticket_key(&ticket_key);
        return;
    }
    d.root(
        "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY); CREATE DATABASE other; \
         CREATE TABLE other.five (x INT); INSERT INTO other.five VALUES (1), (2), (3), (4), (5)",
    );
    let spliced = "relay_spliced_sessions{instance=\"demo\"}";
    let session = || {
        let s = raw::login(d.relay.port, USER, PASSWORD, Some("other"))
            .unwrap()
            .unwrap();
        s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
            .unwrap();
        s
    };
    let run = |s: &mut std::net::TcpStream, sql: &str| {
        let result = raw::query(s, sql);
        assert!(
            matches!(result, Ok(Ok(_))),
            "{sql}: {result:?}\n{}",
            d.relay.log()
        );
    };
    // Commands until the relay splices it (its eighth that counts as use; not `SELECT 1`, a
    // pool's keepalive query), while no other session is spliced.
    let until_spliced = |s: &mut std::net::TcpStream| {
        let spliced_now = Relay::wait_until(Duration::from_secs(60), || {
            assert_eq!(raw::one_row(s, "SELECT 1 + 1").as_deref(), Some("2"));
            d.relay.metric(spliced) >= 1.0
        });
        assert!(spliced_now, "never spliced\n{}", d.relay.log());
    };
    // Spliced at the end of its eighth command's response: what the client reads next of
    // that statement (FOUND_ROWS()) is its own, nothing the relay ran in between.
    let mut s = session();
    for _ in 0..7 {
        assert_eq!(raw::one_row(&mut s, "SELECT 1 + 1").as_deref(), Some("2"));
    }
    assert_eq!(
        raw::one_row(&mut s, "SELECT SQL_CALC_FOUND_ROWS x FROM five LIMIT 1").as_deref(),
        Some("1")
    );
    assert_eq!(
        d.relay.metric_reaching(spliced, 1.0),
        1.0,
        "{}",
        d.relay.log()
    );
    assert_eq!(
        raw::one_row(&mut s, "SELECT FOUND_ROWS()").as_deref(),
        Some("5")
    );
    run(&mut s, "USE shop");
    run(&mut s, "INSERT INTO orders VALUES ()");
    d.relay
        .carried_across_a_stop(&mut s, d.relay.compute_pid().unwrap());

    // A lock taken on one spliced session, a temporary table made on another and its trace
    // wiped (FLUSH STATUS sets the counters back): neither is carried, and MariaDB stays
    // frozen under them. Each is taken back when quiet.
    let taken_back = || {
        let none = Relay::wait_until(Duration::from_secs(60), || d.relay.metric(spliced) == 0.0);
        assert!(none, "never taken back\n{}", d.relay.log());
    };
    until_spliced(&mut s);
    run(&mut s, "SELECT GET_LOCK('held', 0)");
    taken_back();
    let mut t = session();
    until_spliced(&mut t);
    run(&mut t, "CREATE TEMPORARY TABLE scratch (x INT)");
    run(&mut t, "FLUSH STATUS");
    taken_back();
    // On the pump, a SELECT that runs a function making a temporary table: a plain statement
    // to the relay, which the compute's counters show for what it did.
    let mut w = session();
    run(
        &mut w,
        "CREATE FUNCTION shop.scratch() RETURNS INT MODIFIES SQL DATA BEGIN \
         CREATE TEMPORARY TABLE IF NOT EXISTS made (x INT); RETURN 1; END",
    );
    drop(w);
    let mut u = session();
    assert_eq!(
        raw::one_row(&mut u, "SELECT shop.scratch()").as_deref(),
        Some("1")
    );
    let pid = d.relay.compute_pid().unwrap();
    d.relay.wait_state("frozen", Duration::from_secs(60));
    let (_, status) = d.relay.admin("GET", "/v1/instances");
    assert!(status.contains("a user lock held (GET_LOCK)"), "{status}");
    assert!(status.contains("status counters were reset"), "{status}");
    assert!(
        status.contains("counted a statement that may leave what no read gives back"),
        "{status}"
    );
    assert_eq!(d.relay.state(), "frozen", "{status}");
    assert!(tests::cgroup::frozen(pid));
    // Both go on on the same MariaDB, with what they hold.
    assert_eq!(
        raw::one_row(&mut s, "SELECT IS_USED_LOCK('held') = CONNECTION_ID()").as_deref(),
        Some("1")
    );
    run(&mut t, "INSERT INTO scratch VALUES (1)");
    run(&mut u, "INSERT INTO shop.made VALUES (1)");
    assert_eq!(d.relay.compute_pid(), Some(pid));
    remove_ticket_key(&ticket_key);
}
