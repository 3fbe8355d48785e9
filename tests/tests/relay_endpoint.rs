//! `[[endpoint]]`: two instances behind one listener, each login routed to its instance by its
//! user name (`user@instance` on one endpoint, `instance.user` on another), with real clients;
//! a login that names no instance is refused as a wrong password is, and wakes nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, add_user, bin_path, free_port, mariadb, ok};

/// A relay with the usual instance `demo` and a second one, `beta` (each its own server-shim
/// and data; `beta` has no listen address of its own), and two endpoints in front of both.
struct Endpoints {
    relay: Relay,
    /// `route_by = "user@instance"`.
    at: u16,
    /// `route_by = "instance.user"`.
    dot: u16,
    /// `route_by = "sni"`, serving a certificate for `*.db.test` signed by `<dir>/certs/sni-ca.pem`.
    sni: u16,
}

fn shim(dir: &std::path::Path, data: &str, port: &str) -> String {
    [
        bin_path("server-shim").display().to_string(),
        "run".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data".into(),
        dir.join(data).display().to_string(),
        "--key-file".into(),
        dir.join("perceptron.key").display().to_string(),
    ]
    .iter()
    .map(|a| format!("{a:?}"))
    .collect::<Vec<_>>()
    .join(", ")
}

fn start(tmp: &TempDir) -> Endpoints {
    start_with(tmp, "", "")
}

/// [`start`], with `relay_toml` in the relay's `[relay]` table and `more` (`[[instance]]`
/// blocks) after the endpoints; `{CERTS}` in it is the directory of the endpoint's
/// certificates.
fn start_with(tmp: &TempDir, relay_toml: &str, more: &str) -> Endpoints {
    let dir = tmp.path();
    add_user(&dir.join("beta-data"), USER, PASSWORD, true);
    let (at, dot, sni) = (free_port(), free_port(), free_port());
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    tests::tls::pki(
        &certs,
        "sni",
        &[(
            "server",
            "subjectAltName=DNS:*.db.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )],
    );
    let beta_compute = free_port();
    let driver_toml = format!(
        "[instance.driver]\nkind = \"process\"\ncommand = [{}]\nstop_grace = \"5s\"\n\n\
         [[instance]]\nname = \"beta\"\ncompute = \"127.0.0.1:{beta_compute}\"\n\
         idle_pause_after = \"1h\"\n\
         [instance.driver]\nkind = \"process\"\ncommand = [{}]\nstop_grace = \"5s\"\n\n\
         [[endpoint]]\nlisten = \"127.0.0.1:{at}\"\nroute_by = \"user@instance\"\n\n\
         [[endpoint]]\nlisten = \"127.0.0.1:{dot}\"\nroute_by = \"instance.user\"\n\n\
         [[endpoint]]\nlisten = \"127.0.0.1:{sni}\"\nroute_by = \"sni\"\n\
         [endpoint.tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
        shim(dir, "data", "{COMPUTE_PORT}"),
        shim(dir, "beta-data", &beta_compute.to_string()),
        certs.join("sni-server.pem").display(),
        certs.join("sni-server.key").display(),
        more.replace("{CERTS}", &certs.display().to_string()),
    );
    let relay = Relay::start(
        dir,
        RelayOptions {
            idle_pause_after: "1h",
            driver_toml: Some(driver_toml),
            relay_toml: relay_toml.into(),
            ..RelayOptions::default()
        },
    );
    Endpoints {
        relay,
        at,
        dot,
        sni,
    }
}

/// Each instance's state, from the admin API, as `name=state` in its order.
fn states(relay: &Relay) -> Vec<String> {
    let (code, body) = relay.admin("GET", "/v1/instances");
    assert_eq!(code, 200, "{body}");
    let field = |chunk: &str, key: &str| {
        let at = chunk.find(&format!("\"{key}\": \"")).unwrap() + key.len() + 5;
        chunk[at..].split('"').next().unwrap().to_owned()
    };
    body.split("\"name\"")
        .skip(1)
        .map(|chunk| {
            let chunk = format!("\"name\"{chunk}");
            format!("{}={}", field(&chunk, "name"), field(&chunk, "state"))
        })
        .collect()
}

fn sql(port: u16, user: &str, sql: &str) -> String {
    ok(&mariadb(port, user, Some(PASSWORD), &["-N"], sql))
        .trim()
        .to_owned()
}

#[test]
fn two_instances_behind_one_endpoint_are_routed_by_the_user_name() {
    let tmp = TempDir::new("relay-endpoint");
    let e = start(&tmp);
    assert_eq!(states(&e.relay), ["beta=paused", "demo=paused"]);
    // Each login wakes its own instance only, and its compute sees the plain user name.
    let user_of = |port: u16, user: &str| sql(port, user, "SELECT USER()");
    assert_eq!(user_of(e.at, "app@beta"), "app@127.0.0.1");
    assert_eq!(states(&e.relay), ["beta=running", "demo=paused"]);
    sql(
        e.at,
        "app@beta",
        "CREATE DATABASE which; CREATE TABLE which.t (name VARCHAR(10)); \
         INSERT INTO which.t VALUES ('beta')",
    );
    sql(
        e.dot,
        "demo.app",
        "CREATE DATABASE which; CREATE TABLE which.t (name VARCHAR(10)); \
         INSERT INTO which.t VALUES ('demo')",
    );
    assert_eq!(states(&e.relay), ["beta=running", "demo=running"]);
    let which = "SELECT name FROM which.t";
    assert_eq!(sql(e.at, "app@demo", which), "demo");
    assert_eq!(sql(e.dot, "beta.app", which), "beta");
    // The instance's own listener still serves it.
    assert_eq!(sql(e.relay.port, USER, which), "demo");
    // PyMySQL through the endpoint.
    let out = tests::python(
        e.at,
        &format!(
            "import os, pymysql\n\
             c = pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='app@beta', password='{PASSWORD}')\n\
             cur = c.cursor(); cur.execute('{which}'); print(cur.fetchone()[0])\n"
        ),
        Duration::from_secs(30),
    );
    assert_eq!(out.stdout, "beta\n", "{}\n{}", out.stderr, e.relay.log());
}

#[test]
fn a_login_that_names_no_instance_is_refused_as_a_wrong_password_and_wakes_nothing() {
    let tmp = TempDir::new("relay-endpoint-unknown");
    let e = start(&tmp);
    let refusal = |port: u16, user: &str, password: &str| {
        let out = mariadb(port, user, Some(password), &[], "SELECT 1");
        assert_ne!(out.code, Some(0), "{}", out.stdout);
        out.stderr.trim().to_owned()
    };
    let unknown = refusal(e.at, "app@gamma", PASSWORD);
    assert_eq!(
        unknown,
        "ERROR 1045 (28000): Access denied for user 'app'@'127.0.0.1' (using password: YES)"
    );
    assert_eq!(refusal(e.dot, "gamma.app", PASSWORD), unknown);
    assert!(refusal(e.at, "app", PASSWORD).starts_with("ERROR 1045 (28000)"));
    assert!(refusal(e.dot, "app", PASSWORD).starts_with("ERROR 1045 (28000)"));
    assert_eq!(states(&e.relay), ["beta=paused", "demo=paused"]);
    assert!(
        e.relay
            .logged("the login names no instance of this endpoint"),
        "{}",
        e.relay.log()
    );
    let at = format!("endpoint=\"endpoint 127.0.0.1:{}\"", e.at);
    assert_eq!(
        e.relay.metric(&format!(
            "relay_endpoint_logins_total{{{at},outcome=\"unknown_instance\"}}"
        )),
        2.0
    );
    // What a wrong password for an instance that exists gets: the same line.
    assert_eq!(refusal(e.at, "app@beta", "wrong-password"), unknown);
}

/// A login's outcome from `source`: `OK`, or the ERR's code and message with the source's
/// address written `SRC` (each probe comes from its own address).
fn answer(port: u16, source: &str, user: &str, password: &str) -> String {
    match tests::raw::login_from(source.parse().unwrap(), port, user, password, None) {
        Ok(Ok(_)) => "OK".into(),
        Ok(Err((code, message))) => format!("{code} {}", message.replace(source, "SRC")),
        Err(e) => panic!("{user} from {source}: {e}"),
    }
}

/// A login from `source` that claims MariaDB's extended capabilities (bits the endpoint's
/// greeting never offered) with a wrong password, in the form of [`answer`].
fn answer_claiming_capabilities(port: u16, source: &str, user: &str) -> String {
    use authplugin::packet::capabilities::{
        CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    };
    use authplugin::packet::{HandshakeResponse41, HandshakeV10};
    let mut s = tests::raw::connect_from(source.parse().unwrap(), port).unwrap();
    let (_, greeting) = tests::raw::read_packet(&mut s).unwrap();
    let scramble = HandshakeV10::decode(&greeting).unwrap().scramble().unwrap();
    let mut reserved = [0; 23];
    reserved[19..].copy_from_slice(&0x0000_000cu32.to_le_bytes());
    let login = HandshakeResponse41 {
        // CLIENT_MYSQL (bit 0) clear: the last filler bytes are MariaDB's capabilities.
        client_flag: CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved,
        username: user.as_bytes().to_vec(),
        auth_response: zeroize::Zeroizing::new(authplugin::native_password::token(
            b"wrong-password",
            &scramble,
        )),
        database: None,
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    tests::raw::write_packet(&mut s, 1, &login.to_bytes()).unwrap();
    let (_, reply) = tests::raw::read_packet(&mut s).unwrap();
    let (code, message) = tests::raw::err_of(&reply);
    format!("{code} {}", message.replace(source, "SRC"))
}

/// The enumeration oracle. Four probes per name, each from an address of its own so that no
/// budget is spent: a health-check user with an empty password (`haproxy@<name>`), a wrong
/// password, a wrong password in plaintext, and one from a client that claims MariaDB
/// capabilities the greeting never offered. For 3 instances that exist (paused; `sec`
/// requires TLS) and 97 that do not, the answers are the same, word for word. Before:
/// `haproxy@<name>` got OK for an instance that exists and 1045 otherwise, a wrong password for
/// one that exists got the compute's 1045 naming the relay's address instead of the client's,
/// a plaintext login to `sec` got 3159, and the capability claim got ERR 1053 naming the
/// instance: every instance told apart. The endpoint's own health check (`haproxy`, no
/// instance part) is answered OK.
#[test]
fn an_endpoint_answers_a_probe_for_an_instance_as_for_no_instance() {
    let tmp = TempDir::new("relay-endpoint-oracle");
    let sec_compute = free_port();
    let sec = format!(
        "\n[[instance]]\nname = \"sec\"\ncompute = \"127.0.0.1:{sec_compute}\"\n\
         require_secure_transport = true\n\
         [instance.tls]\ncert = \"{{CERTS}}/sni-server.pem\"\nkey = \"{{CERTS}}/sni-server.key\"\n\
         [instance.driver]\nkind = \"process\"\ncommand = [\"true\"]\n"
    );
    let e = start_with(&tmp, "", &sec);
    assert_eq!(answer(e.at, "127.0.0.1", "haproxy", ""), "OK");
    let names: Vec<String> = ["demo", "beta", "sec"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..97).map(|i| format!("ghost{i}")))
        .collect();
    let mut told_apart = Vec::new();
    let mut reference: Vec<String> = Vec::new();
    for (i, name) in names.iter().rev().enumerate() {
        let source = |k: usize| {
            let n = 4 * i + k;
            format!("127.0.{}.{}", 1 + n / 200, 2 + n % 200)
        };
        let answers = [
            answer(e.at, &source(0), &format!("haproxy@{name}"), ""),
            answer(e.at, &source(1), &format!("app@{name}"), "wrong-password"),
            answer(e.dot, &source(2), &format!("{name}.app"), "wrong-password"),
            answer_claiming_capabilities(e.at, &source(3), &format!("app@{name}")),
        ];
        if reference.is_empty() {
            // The last ghost's: a name that exists nowhere.
            reference = answers.to_vec();
        }
        if answers.as_slice() != reference.as_slice() {
            told_apart.push(format!("{name}: {answers:?}"));
        }
    }
    eprintln!(
        "names told apart: {} of {} ({} probes); a name that exists nowhere gets {reference:?}",
        told_apart.len(),
        names.len(),
        4 * names.len()
    );
    let wrong = "1045 Access denied for user 'app'@'SRC' (using password: YES)";
    assert_eq!(
        reference,
        [
            "1045 Access denied for user 'haproxy'@'SRC' (using password: NO)",
            wrong,
            wrong,
            wrong
        ]
    );
    assert!(told_apart.is_empty(), "{told_apart:#?}\n{}", e.relay.log());
    // The wrong passwords woke the two instances that exist and take plaintext.
    assert_eq!(
        states(&e.relay),
        ["beta=running", "demo=running", "sec=paused"]
    );
}

/// Budgets are kept per (source, instance): one tenant's failures behind an address do not
/// block the address for another tenant's instance (before, 3 failures on `beta` refused the
/// right password for `demo` from the same address with ERR 1129). And a user's block spares
/// the addresses it logged in from lately: five addresses guessing `app@demo` block it (ERR
/// 1226 from an address it never used) but not from the address it logs in from (before: 1226
/// there too).
#[test]
fn one_tenants_failures_neither_block_another_tenant_nor_lock_out_a_users_own_address() {
    let tmp = TempDir::new("relay-endpoint-tenants");
    let e = start_with(
        &tmp,
        "budgets = { failed_logins_per_source = 3, failed_logins_per_user = 5, \
         failed_wakes_per_source = 1 }\n",
        "",
    );
    let nat = "127.0.0.5";
    let codes: Vec<String> = (0..4)
        .map(|_| answer(e.at, nat, "app@beta", "wrong-password"))
        .map(|a| a[..4].to_owned())
        .collect();
    assert_eq!(codes, ["1045", "1045", "1045", "1129"], "{}", e.relay.log());
    assert_eq!(answer(e.at, nat, "app@demo", PASSWORD), "OK");
    // Through an endpoint no wake is charged (a name that is no instance could not be): a
    // wrong password that wakes `beta` twice is not a spent failed-wake budget of 1.
    for _ in 0..2 {
        let (code, body) = e.relay.admin("POST", "/v1/instances/beta/pause?force=true");
        assert_eq!(code, 200, "{body}");
        assert!(Relay::wait_until(Duration::from_secs(30), || {
            states(&e.relay).contains(&"beta=paused".to_owned())
        }));
        let got = answer(e.at, "127.0.3.1", "app@beta", "wrong-password");
        assert!(got.starts_with("1045"), "{got}\n{}", e.relay.log());
    }
    // The account's own address logs in; then five others guess its password.
    let home = "127.0.0.6";
    assert_eq!(answer(e.at, home, "app@demo", PASSWORD), "OK");
    for i in 0..5 {
        let guesser = format!("127.0.1.{}", 10 + i);
        assert!(answer(e.at, &guesser, "app@demo", "guess").starts_with("1045"));
    }
    assert!(answer(e.at, "127.0.0.7", "app@demo", PASSWORD).starts_with("1226"));
    assert_eq!(
        answer(e.at, home, "app@demo", PASSWORD),
        "OK",
        "{}",
        e.relay.log()
    );
    // The block lists the source per instance.
    let (code, body) = e.relay.admin("GET", "/v1/blocks");
    assert_eq!(code, 200);
    assert!(body.contains("\"instance\": \"beta\""), "{body}");
}

/// `route_by = "sni"`: the instance is the first label of the TLS server name. PyMySQL
/// connects to 127.0.0.1 but names `beta.db.test` (and checks the endpoint's certificate for
/// it); a name that is no instance gets 1045, a plaintext login 3159, and neither wakes.
#[test]
fn an_endpoint_routes_by_the_tls_server_name() {
    let tmp = TempDir::new("relay-endpoint-sni");
    let e = start(&tmp);
    let ca = tmp.path().join("certs/sni-ca.pem");
    let out = tests::python(
        e.sni,
        &format!(
            "import os, socket, ssl, pymysql\n\
             real = socket.create_connection\n\
             socket.create_connection = lambda addr, *a, **k: real(('127.0.0.1', addr[1]), *a, **k)\n\
             ctx = ssl.create_default_context(cafile='{}')\n\
             def user(host):\n\
             \x20   c = pymysql.connect(host=host, port=int(os.environ['PORT']), user='app', password='{PASSWORD}', ssl=ctx)\n\
             \x20   cur = c.cursor(); cur.execute('SELECT USER()'); return cur.fetchone()[0]\n\
             print(user('beta.db.test'))\n\
             try:\n\
             \x20   user('gamma.db.test')\n\
             except pymysql.err.OperationalError as e:\n\
             \x20   print(e.args[0], e.args[1])\n",
            ca.display()
        ),
        Duration::from_secs(30),
    );
    assert_eq!(
        out.stdout,
        "app@127.0.0.1\n1045 Access denied for user 'app'@'127.0.0.1' (using password: YES)\n",
        "{}\n{}",
        out.stderr,
        e.relay.log()
    );
    assert_eq!(states(&e.relay), ["beta=running", "demo=paused"]);
    let plain = mariadb(e.sni, "app", Some(PASSWORD), &["--skip-ssl"], "SELECT 1");
    assert!(plain.stderr.contains("ERROR 3159"), "{}", plain.stderr);
    assert_eq!(states(&e.relay), ["beta=running", "demo=paused"]);
}

/// MariaDB Connector/J (Debian's, through the client matrix's runner) through the endpoint:
/// its login is routed by its user name, and one naming no instance gets 1045.
#[test]
fn connector_j_logs_in_through_the_endpoint() {
    let tmp = TempDir::new("relay-endpoint-java");
    let e = start(&tmp);
    let runner = |user: &str| {
        let mut java = std::process::Command::new("java");
        java.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
            .arg(format!(
                "/usr/share/java/mariadb-java-client.jar:{}",
                tests::target_dir().join("clients/java").display()
            ))
            .arg("Runner")
            .args(["--host", "127.0.0.1", "--port", &e.at.to_string()])
            .args(["--user", user, "--password", PASSWORD, "--mode", "query"]);
        tests::run_with_input(&mut java, b"", Duration::from_secs(60))
    };
    let out = runner("app@beta");
    assert!(
        out.stdout.contains("\"ok\":true") && out.stdout.contains("app@127.0.0.1"),
        "{}\n{}\n{}",
        out.stdout,
        out.stderr,
        e.relay.log()
    );
    assert_eq!(states(&e.relay), ["beta=running", "demo=paused"]);
    let out = runner("app@gamma");
    assert!(
        out.stdout.contains("\"error_code\":1045"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
}
