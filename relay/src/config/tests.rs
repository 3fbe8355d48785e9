use std::path::Path;

use super::*;

const GOOD: &str = r#"
[relay]
state_dir = "state"
key_file = "perceptron.key"
admin_listen = "127.0.0.1:9100"

[[instance]]
name = "demo"
listen = "127.0.0.1:3306"
compute = "127.0.0.1:13306"
auth = "dual"
resume_timeout = "15s"
handshake_timeout = "10s"
idle_pause_after = "5m"
[instance.driver]
kind = "process"
command = ["server-shim", "run"]
"#;

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("/etc/perceptron/relay.toml")).map_err(|e| e.to_string())
}

#[test]
fn parses_the_documented_example() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.relay.state_dir, Path::new("/etc/perceptron/state"));
    assert_eq!(
        c.relay.key_file,
        Path::new("/etc/perceptron/perceptron.key")
    );
    let i = &c.instances[0];
    assert_eq!(i.name, "demo");
    assert_eq!(i.resume_timeout, Duration::from_secs(15));
    assert_eq!(i.idle_pause_after, Duration::from_secs(300));
    assert_eq!(i.park_after, Duration::from_secs(10));
    // Never longer than the idle pause it shortens.
    let short =
        parse(&GOOD.replace("idle_pause_after = \"5m\"", "idle_pause_after = \"2s\"")).unwrap();
    assert_eq!(short.instances[0].park_after, Duration::from_secs(2));
    let DriverConfig::Process { command, cwd, .. } = &i.driver else {
        panic!("process driver expected");
    };
    assert_eq!(command, &["server-shim", "run"]);
    assert_eq!(cwd, Path::new("/etc/perceptron"));
    assert_eq!(c.relay.worker_threads, None);
    assert_eq!(
        c.relay.max_pending_connections,
        DEFAULT_MAX_PENDING_CONNECTIONS
    );
    assert_eq!(
        c.relay.max_pending_per_source,
        DEFAULT_MAX_PENDING_PER_SOURCE
    );
    assert_eq!(i.max_pending_connections, DEFAULT_INSTANCE_MAX_PENDING);
    assert_eq!(c.relay.budgets, BudgetSettings::default());
    assert_eq!(c.relay.budgets.failed_logins_per_source, 20);
    assert_eq!(i.health_check_users, ["haproxy"]);
    let tuned = parse(&GOOD.replace(
        "[[instance]]",
        "[relay.budgets]\nwindow = \"10m\"\nwakes_per_user = 0\n\n[[instance]]\nhealth_check_users = []",
    ))
    .unwrap();
    assert_eq!(tuned.relay.budgets.window, Duration::from_secs(600));
    assert_eq!(tuned.relay.budgets.wakes_per_user, 0);
    assert_eq!(
        tuned.relay.budgets.wakes_per_source,
        DEFAULT_WAKES_PER_SOURCE
    );
    assert!(tuned.instances[0].health_check_users.is_empty());
    assert!(
        parse(&GOOD.replace("[[instance]]", "[relay.budgets]\nwakes = 3\n\n[[instance]]"))
            .unwrap_err()
            .contains("relay.budgets.wakes: unknown key")
    );
    assert!(
        parse(&GOOD.replace(
            "[[instance]]",
            "[relay.budgets]\nblock_for = \"0s\"\n\n[[instance]]"
        ))
        .unwrap_err()
        .contains("relay.budgets.block_for: must be at least 1s")
    );
    let one = parse(&GOOD.replace("[relay]", "[relay]\nworker_threads = 1")).unwrap();
    assert_eq!(one.relay.worker_threads, Some(1));
}

#[test]
fn errors_name_the_file_and_key() {
    let cases = [
        (
            GOOD.replace("\"15s\"", "\"15\""),
            "instance[0].resume_timeout",
        ),
        (
            GOOD.replace("127.0.0.1:13306", "localhost"),
            "instance[0].compute",
        ),
        (GOOD.replace("\"dual\"", "\"magic\""), "instance[0].auth"),
        (
            GOOD.replace("\"process\"", "\"k8s\""),
            "instance[0].driver.kind",
        ),
        (
            GOOD.replace("\"5m\"", "\"0s\""),
            "instance[0].idle_pause_after",
        ),
        (
            GOOD.replace("command = [\"server-shim\", \"run\"]", "command = []"),
            "instance[0].driver.command",
        ),
        (
            GOOD.replace("handshake_timeout", "handshake_timout"),
            "handshake_timout",
        ),
        (
            GOOD.replace("[relay]", "[relay]\nworker_threads = 0"),
            "relay.worker_threads",
        ),
        (
            GOOD.replace("[relay]", "[relay]\nworker_threads = -2"),
            "relay.worker_threads",
        ),
    ];
    for (text, key) in cases {
        let e = parse(&text).unwrap_err();
        assert!(e.starts_with("/etc/perceptron/relay.toml: "), "{e}");
        assert!(e.contains(key), "expected {key} in: {e}");
    }
}

/// The process driver's `env`: what its compute gets beyond the few variables it inherits;
/// a name that cannot be a variable's is refused, naming the key.
#[test]
fn parses_the_process_drivers_env() {
    let with_env = GOOD.replace(
        "command = [\"server-shim\", \"run\"]",
        "command = [\"server-shim\", \"run\"]\nenv = { MYSQL_HOME = \"/etc/db\", TZ = \"UTC\" }",
    );
    let c = parse(&with_env).unwrap();
    let DriverConfig::Process { env, .. } = &c.instances[0].driver else {
        panic!("process driver expected");
    };
    assert_eq!(
        env,
        &[
            ("MYSQL_HOME".to_owned(), "/etc/db".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned())
        ]
    );
    let bad = GOOD.replace(
        "command = [\"server-shim\", \"run\"]",
        "command = [\"server-shim\", \"run\"]\nenv = { \"A=B\" = \"x\" }",
    );
    let e = parse(&bad).unwrap_err();
    assert!(
        e.contains("instance[0].driver.env") && e.contains("not an environment variable name"),
        "{e}"
    );
}

#[test]
fn parses_exec_and_http_drivers() {
    let exec = GOOD.replace(
        "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
        "kind = \"exec\"\nstart = [\"systemctl\", \"start\", \"db\"]\nstop = [\"systemctl\", \"stop\", \"db\"]\ncommand_timeout = \"20s\"",
    );
    let c = parse(&exec).unwrap();
    let DriverConfig::Exec(spec) = &c.instances[0].driver else {
        panic!("exec driver expected");
    };
    assert_eq!(spec.start, ["systemctl", "start", "db"]);
    assert_eq!(spec.status, None);
    assert_eq!(spec.command_timeout, Duration::from_secs(20));
    let no_stop = exec.replace("stop = [\"systemctl\", \"stop\", \"db\"]\n", "");
    assert!(
        parse(&no_stop)
            .unwrap_err()
            .contains("instance[0].driver.stop")
    );

    let http = GOOD.replace(
        "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
        "kind = \"http\"\nurl = \"http://10.0.0.5:8080/v1/\"",
    );
    let c = parse(&http).unwrap();
    let DriverConfig::Http(spec) = &c.instances[0].driver else {
        panic!("http driver expected");
    };
    assert_eq!(spec.addr, "10.0.0.5:8080".parse().unwrap());
    assert_eq!(spec.base_path, "/v1");
    let bad = http.replace("http://10.0.0.5:8080/v1/", "https://cp.example/v1");
    assert!(parse(&bad).unwrap_err().contains("instance[0].driver.url"));
}

#[test]
fn refuses_a_public_http_control_plane_unless_allowed() {
    let http = |url: &str, extra: &str| {
        GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            &format!("kind = \"http\"\nurl = \"{url}\"{extra}"),
        )
    };
    for url in [
        "http://10.0.0.5:8080",
        "http://172.31.0.1:80",
        "http://192.168.1.1:80",
        "http://100.100.1.1:80",
        "http://127.0.0.1:80",
        "http://[::1]:80",
        "http://[fd00::5]:80",
    ] {
        parse(&http(url, "")).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    for url in [
        "http://8.8.8.8:80",
        "http://172.32.0.1:80",
        "http://169.254.169.254:80",
        "http://0.0.0.0:80",
        "http://[2001:db8::1]:80",
        "http://[::ffff:8.8.8.8]:80",
    ] {
        let e = parse(&http(url, "")).unwrap_err();
        assert!(
            e.contains("instance[0].driver.url: ") && e.contains("is a public address"),
            "{url}: {e}"
        );
    }
    let c = parse(&http("http://8.8.8.8:80", "\nallow_public = true")).unwrap();
    assert!(matches!(c.instances[0].driver, DriverConfig::Http(_)));
}

#[test]
fn refuses_a_non_loopback_admin_address_without_a_token_file() {
    for addr in ["0.0.0.0:9100", "10.0.0.5:9100", "[::]:9100"] {
        assert_eq!(
            error_after("127.0.0.1:9100", addr),
            format!(
                "/etc/perceptron/relay.toml: relay.admin_token_file: required because \
                 relay.admin_listen ({addr}) is not a loopback address; create a token file \
                 (mode 0600, at least 16 characters) or listen on 127.0.0.1"
            )
        );
    }
    let with_token = GOOD.replace(
        "admin_listen = \"127.0.0.1:9100\"",
        "admin_listen = \"0.0.0.0:9100\"\nadmin_token_file = \"admin.token\"",
    );
    let c = parse(&with_token).unwrap();
    assert_eq!(
        c.relay.admin_token_file.as_deref(),
        Some(Path::new("/etc/perceptron/admin.token"))
    );
    parse(&GOOD.replace("127.0.0.1:9100", "[::1]:9100")).unwrap();
}

#[test]
fn parses_the_route_and_the_nftables_table() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.instances[0].route, RouteMode::Pump, "the default");
    assert_eq!(c.relay.nftables_table, None);
    let c = parse(
        &GOOD
            .replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"nftables\"")
            .replace(
                "admin_listen = \"127.0.0.1:9100\"",
                "admin_listen = \"127.0.0.1:9100\"\nnftables_table = \"perceptron_ci_7\"",
            ),
    )
    .unwrap();
    assert_eq!(c.instances[0].route, RouteMode::Nftables);
    assert_eq!(c.relay.nftables_table.as_deref(), Some("perceptron_ci_7"));
}

#[test]
fn rejects_kernel_routes_it_cannot_install() {
    let routed = GOOD.replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"nftables\"");
    let file = "/etc/perceptron/relay.toml";
    let cases = [
        (
            routed.replace("\"127.0.0.1:13306\"", "\"[::1]:13306\""),
            "instance[0].route: \"nftables\" needs listen (127.0.0.1:3306) and compute \
             ([::1]:13306) in the same address family (both IPv4 or both IPv6)",
        ),
        (
            routed.replace("\"127.0.0.1:13306\"", "\"0.0.0.0:13306\""),
            "instance[0].compute: 0.0.0.0:13306 cannot be a DNAT target: route = \
             \"nftables\" needs the compute's own address",
        ),
        (
            routed.replace("auth = \"dual\"", "auth = \"dual\"\nproxy_protocol = true"),
            "instance[0].proxy_protocol: cannot be used with route = \"nftables\": the \
             kernel route forwards packets and cannot send PROXY headers (the compute sees \
             the client's address on direct connections, or the relay host's for a \
             compute on another host)",
        ),
        (
            routed.replace(
                "auth = \"dual\"",
                "auth = \"dual\"\nresumable_sessions = true\nstop_after = \"1m\"",
            ),
            "instance[0].resumable_sessions: cannot be used with route = \"nftables\": a \
             session survives a stop only if the relay logged it in (for its ticket) and \
             follows its commands, and the kernel forwards a running instance's connections \
             without the relay; use route = \"pump\"",
        ),
        (
            GOOD.replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"iptables\""),
            "instance[0].route: unknown variant `iptables`, expected `pump` or `nftables`",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(&text).unwrap_err(), format!("{file}: {want}"));
    }
}

#[test]
fn refuses_the_relays_tls_requirements_on_the_kernel_route() {
    // The kernel forwards a running instance's connections: the relay could not enforce them.
    let routed = |extra: &str| {
        GOOD.replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"nftables\"")
            .replace("[instance.driver]", &format!("{extra}\n[instance.driver]"))
    };
    let tls = "[instance.tls]\ncert = \"s.pem\"\nkey = \"s.key\"";
    let file = "/etc/perceptron/relay.toml";
    let e = parse(&routed(&format!("require_secure_transport = true\n{tls}"))).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{file}: instance[0].require_secure_transport: cannot be used with route = \
             \"nftables\""
        )),
        "{e}"
    );
    let e = parse(&routed(&format!("{tls}\nclient_ca = \"ca.pem\""))).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{file}: instance[0].tls.client_ca: cannot be used with route = \"nftables\""
        )),
        "{e}"
    );
    // TLS offered without either is the compute's business on the kernel route, as before.
    assert!(parse(&routed(tls)).is_ok());
    // On the pump route both hold on every login: the relay terminates them all.
    let pump = GOOD.replace(
        "[instance.driver]",
        &format!("require_secure_transport = true\n{tls}\n[instance.driver]"),
    );
    assert!(parse(&pump).unwrap().instances[0].relay_terminates_every_login());
    assert!(!parse(GOOD).unwrap().instances[0].relay_terminates_every_login());
    // Resumable sessions need the relay's login on every connection, without TLS too.
    let resumable = GOOD.replace(
        "auth = \"dual\"",
        "auth = \"dual\"\nresumable_sessions = true\nstop_after = \"1m\"",
    );
    let resumable = &parse(&resumable).unwrap().instances[0];
    assert!(resumable.relays_every_login() && !resumable.relay_terminates_every_login());
    assert!(!parse(GOOD).unwrap().instances[0].relays_every_login());
    // A certificate to serve: the relay reads every TLS login, to charge its failures.
    let with_tls = GOOD.replace("[instance.driver]", &format!("{tls}\n[instance.driver]"));
    let with_tls = &parse(&with_tls).unwrap().instances[0];
    assert!(with_tls.relays_every_login() && !with_tls.relay_terminates_every_login());
    // Not in switch mode over a plaintext compute leg, which cannot carry every login.
    let switch = GOOD
        .replace("auth = \"dual\"", "auth = \"switch\"")
        .replace("[instance.driver]", &format!("{tls}\n[instance.driver]"));
    assert!(!parse(&switch).unwrap().instances[0].relays_every_login());
    let verified = switch.replace(
        "auth = \"switch\"",
        "auth = \"switch\"\ncompute_tls = \"on\"",
    );
    assert!(parse(&verified).unwrap().instances[0].relays_every_login());
}

#[test]
fn rejects_duplicate_names_and_listeners() {
    let two = format!("{GOOD}\n{}", &GOOD[GOOD.find("[[instance]]").unwrap()..]);
    assert!(
        parse(&two)
            .unwrap_err()
            .contains("instance[1].name: 'demo' is used twice")
    );
    let two = two.replacen("name = \"demo\"", "name = \"other\"", 1);
    assert!(parse(&two).unwrap_err().contains("instance[1].listen"));
}

#[test]
fn a_fleet_store_is_parsed_and_checked() {
    let exec = "kind = \"exec\"\nstart = [\"up\"]\nstop = [\"down\"]\n";
    let store = "\n[relay.store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\
                 relay_id = \"relay-a\"\n";
    let fleet = |store: &str| {
        GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]\n",
            exec,
        )
        .replacen("[[instance]]", &format!("{store}\n[[instance]]"), 1)
    };
    let c = parse(&fleet(store)).unwrap();
    let StoreSettings::Etcd(etcd) = &c.relay.store else {
        panic!("etcd expected");
    };
    assert_eq!(etcd.relay_id, "relay-a");
    assert_eq!(etcd.prefix, "/perceptron");
    assert_eq!(etcd.lease_ttl, Duration::from_secs(10));
    assert_eq!(parse(GOOD).unwrap().relay.store, StoreSettings::Local);
    let tls = store.replace("http://", "https://")
        + "ca_file = \"etcd-ca.pem\"\ncert_file = \"relay.pem\"\nkey_file = \"relay-key.pem\"\n";
    let c = parse(&fleet(&tls)).unwrap();
    let StoreSettings::Etcd(etcd) = &c.relay.store else {
        panic!("etcd expected");
    };
    // Relative to the configuration file, like every other path.
    assert_eq!(
        etcd.key_file.as_deref(),
        Some(Path::new("/etc/perceptron/relay-key.pem"))
    );
    assert!(etcd.tls());
    let file = "/etc/perceptron/relay.toml";
    for (text, message) in [
        (
            fleet(&store.replace("[\"http://127.0.0.1:2379\"]", "[]")),
            "relay.store.endpoints: list at least one etcd endpoint",
        ),
        (
            fleet(&format!(
                "{store}lease_ttl = \"2s\"\nrequest_timeout = \"1500ms\"\n"
            )),
            "relay.store.request_timeout: must be more than zero and at most half of lease_ttl",
        ),
        (
            GOOD.replacen("[[instance]]", &format!("{store}\n[[instance]]"), 1),
            "instance[0].driver.kind: a fleet",
        ),
        (
            fleet(&format!("{store}cert_file = \"relay.pem\"\n")),
            "relay.store.key_file: required with cert_file",
        ),
        (
            fleet(&format!(
                "{store}cert_file = \"relay.pem\"\nkey_file = \"relay-key.pem\"\n"
            )),
            "relay.store.ca_file: a client certificate needs TLS",
        ),
        (
            fleet(&store.replace("http://", "https://")),
            "relay.store.endpoints: 'https://127.0.0.1:2379': https needs ca_file",
        ),
        (
            fleet(&format!("{store}ca_file = \"etcd-ca.pem\"\n")),
            "relay.store.endpoints: 'http://127.0.0.1:2379': with ca_file set",
        ),
    ] {
        let e = parse(&text).unwrap_err();
        assert!(e.starts_with(&format!("{file}: {message}")), "{e}");
    }
}

/// `GOOD` with `from` replaced by `to` (which must be there), or the error it gives.
fn error_after(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    parse(&GOOD.replacen(from, to, 1)).unwrap_err()
}

#[test]
fn error_messages_name_the_file_and_the_key() {
    let file = "/etc/perceptron/relay.toml";
    let two = format!("{GOOD}\n{}", &GOOD[GOOD.find("[[instance]]").unwrap()..]);
    let cases = [
        // unknown key
        (
            error_after("handshake_timeout", "handshake_timout"),
            "instance[0].handshake_timout: unknown key; expected one of `name`, `listen`, \
             `compute`, `auth`, `proxy_protocol`, `resume_timeout`, `handshake_timeout`, \
             `compute_timeout`, `idle_pause_after`, `failed_wake_pause_after`, `on_relay_exit`, \
             `max_pending_connections`, `health_check_users`, `capacity`, `stop_after`, `park`, `park_after`, `keepalive_queries`, `resumable_sessions`, `max_detached_sessions`, `force_reattach_every`, `kernel_splice`, `splice_below_tcp`, `route`, `driver`, `tls`, \
             `require_secure_transport`, `compute_tls`, `compute_ca`, `compute_tls_name`, `compute_proof`, `offload`",
        ),
        (
            error_after("[relay]", "[relay]\ncolour = \"blue\""),
            "relay.colour: unknown key; expected one of `state_dir`, `key_file`, \
             `admin_listen`, `admin_token_file`, `worker_threads`, \
             `max_pending_connections`, `max_pending_per_source`, `budgets`, `nftables_table`, `store`, `instances_dir`",
        ),
        // a key of another driver kind
        (
            error_after(
                "kind = \"process\"",
                "kind = \"process\"\nurl = \"http://1.2.3.4:1\"",
            ),
            "instance[0].driver.url: unknown key; expected one of `command`, `cwd`, \
             `stop_grace`, `env`, `user`, `group`",
        ),
        // wrong type
        (
            error_after("\"15s\"", "15"),
            "instance[0].resume_timeout: invalid type: integer `15`, expected a string",
        ),
        (
            error_after("[relay]", "[relay]\nworker_threads = \"4\""),
            "relay.worker_threads: invalid type: string \"4\", expected i64",
        ),
        // bad duration, and one under its minimum
        (
            error_after("\"15s\"", "\"15\""),
            "instance[0].resume_timeout: '15' has no unit (use e.g. 500ms, 15s, 5m, 1h)",
        ),
        (
            error_after("\"10s\"", "\"0ms\""),
            "instance[0].handshake_timeout: must be greater than zero",
        ),
        (
            error_after("\"5m\"", "\"999ms\""),
            "instance[0].idle_pause_after: must be at least 1s",
        ),
        // bad address
        (
            error_after("127.0.0.1:13306", "localhost"),
            "instance[0].compute: 'localhost' is not an ip:port address (e.g. 127.0.0.1:3306)",
        ),
        (
            error_after("127.0.0.1:9100", "127.0.0.1"),
            "relay.admin_listen: '127.0.0.1' is not an ip:port address (e.g. 127.0.0.1:3306)",
        ),
        // duplicates
        (
            parse(&two).unwrap_err(),
            "instance[1].name: 'demo' is used twice",
        ),
        (
            parse(&two.replacen("name = \"demo\"", "name = \"other\"", 1)).unwrap_err(),
            "instance[1].listen: 127.0.0.1:3306 is used twice",
        ),
        // missing required key
        (
            error_after("listen = \"127.0.0.1:3306\"\n", ""),
            "instance[0].listen: required unless an [[endpoint]] routes to the instance",
        ),
        (
            error_after("key_file = \"perceptron.key\"\n", ""),
            "relay.key_file: required, but missing",
        ),
        (
            error_after("kind = \"process\"\n", ""),
            "instance[0].driver.kind: required, but missing",
        ),
        // enums
        (
            error_after("\"process\"", "\"k8s\""),
            "instance[0].driver.kind: unknown variant `k8s`, expected one of `process`, \
             `exec`, `http`",
        ),
        (
            error_after("\"dual\"", "\"magic\""),
            "instance[0].auth: unknown variant `magic`, expected `dual` or `switch`",
        ),
        // range and alphabet
        (
            error_after("[relay]", "[relay]\nworker_threads = 257"),
            "relay.worker_threads: 257 is not between 1 and 256",
        ),
        (
            error_after("[relay]", "[relay]\nmax_pending_per_source = 0"),
            "relay.max_pending_per_source: 0 must be at least 1",
        ),
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\nmax_pending_connections = -1",
            ),
            "instance[0].max_pending_connections: -1 must be at least 1",
        ),
        (
            error_after("\"demo\"", "\"my db\""),
            "instance[0].name: 'my db' must be non-empty A-Z a-z 0-9 - _",
        ),
        // capacity
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 0.3, max_ccu = 1 }",
            ),
            "instance[0].capacity.min_ccu: 0.3 is not a positive multiple of 0.25 CCU",
        ),
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 2, max_ccu = 1 }",
            ),
            "instance[0].capacity.min_ccu: min_ccu 2 is above max_ccu 1",
        ),
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 1, max_ccu = 2, \
                 resume_ccu = 4 }",
            ),
            "instance[0].capacity.resume_ccu: 4 is outside min_ccu..max_ccu (1..2)",
        ),
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\nstop_after = \"0s\"",
            ),
            "instance[0].stop_after: must be greater than zero",
        ),
        (
            error_after(
                "idle_pause_after = \"5m\"",
                "idle_pause_after = \"5m\"\npark_after = \"0s\"",
            ),
            "instance[0].park_after: must be greater than zero",
        ),
        (
            error_after("[\"server-shim\", \"run\"]", "[]"),
            "instance[0].driver.command: must name a program, e.g. [\"systemctl\", \
             \"start\", \"mariadb\"]",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, format!("{file}: {want}"));
    }
}

/// What the relay moves itself, for an offload that the relay moves.
fn archive(o: &crate::config::OffloadConfig) -> crate::config::ArchiveConfig {
    match &o.mover {
        crate::config::OffloadMover::Relay(a) => a.clone(),
        other @ crate::config::OffloadMover::Commands { .. } => panic!("{other:?}"),
    }
}

#[test]
fn offload_takes_a_file_store_and_a_data_directory_relative_to_the_file() {
    let offload = "idle_pause_after = \"5m\"\n[instance.offload]\nstore = \"file:///var/lib/objects\"\n\
                   after = \"1h\"\ndata_dir = \"data/demo\"";
    let c = parse(&GOOD.replacen("idle_pause_after = \"5m\"", offload, 1)).unwrap();
    let o = c.instances[0].offload.clone().unwrap();
    assert_eq!(o.after, std::time::Duration::from_secs(3600));
    let a = archive(&o);
    assert_eq!(a.store, "file:///var/lib/objects");
    assert_eq!(a.data_dir, Path::new("/etc/perceptron/data/demo"));
    assert_eq!(a.restore, crate::config::RestoreMode::Lazy);
    let full = format!("{offload}\nrestore = \"full\"");
    let c = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &full, 1)).unwrap();
    let o = c.instances[0].offload.clone().unwrap();
    assert_eq!(archive(&o).restore, crate::config::RestoreMode::Full);
    let other = format!("{offload}\nrestore = \"eager\"");
    let err = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &other, 1)).unwrap_err();
    assert!(
        err.contains("instance[0].offload.restore") && err.contains("lazy"),
        "{err}"
    );
    let region = format!("{offload}\nregion = \"eu-west-1\"");
    assert_eq!(
        parse(&GOOD.replacen("idle_pause_after = \"5m\"", &region, 1)).unwrap_err(),
        "/etc/perceptron/relay.toml: instance[0].offload.region: only used with an s3:// store"
    );
    let relative = offload.replace("file:///var/lib/objects", "file://objects");
    let err = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &relative, 1)).unwrap_err();
    assert!(
        err.starts_with("/etc/perceptron/relay.toml: instance[0].offload.store: ")
            && err.contains("absolute path"),
        "{err}"
    );
    let missing = offload.replace("data_dir = \"data/demo\"", "");
    let err = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &missing, 1)).unwrap_err();
    assert_eq!(
        err,
        "/etc/perceptron/relay.toml: instance[0].offload.data_dir: required, but missing"
    );
}

#[test]
fn an_s3_store_restores_lazily_with_its_endpoint_and_credentials_file() {
    let offload = "idle_pause_after = \"5m\"\n[instance.offload]\nstore = \"s3://bucket/pre/fix\"\n\
                   after = \"1h\"\ndata_dir = \"data/demo\"\nendpoint = \"http://127.0.0.1:9000\"\n\
                   region = \"eu-west-1\"\ncredentials_file = \"s3.toml\"";
    let c = parse(&GOOD.replacen("idle_pause_after = \"5m\"", offload, 1)).unwrap();
    let o = c.instances[0].offload.clone().unwrap();
    assert_eq!(archive(&o).restore, crate::config::RestoreMode::Lazy);
    assert_eq!(
        archive(&o).s3,
        crate::config::S3Settings {
            endpoint: Some("http://127.0.0.1:9000".into()),
            region: Some("eu-west-1".into()),
            credentials_file: Some("/etc/perceptron/s3.toml".into()),
        }
    );
    let full = format!("{offload}\nrestore = \"full\"");
    let c = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &full, 1)).unwrap();
    let o = c.instances[0].offload.clone().unwrap();
    assert_eq!(archive(&o).restore, crate::config::RestoreMode::Full);
    let endpoint = offload.replace("http://127.0.0.1:9000", "127.0.0.1:9000");
    let err = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &endpoint, 1)).unwrap_err();
    assert_eq!(
        err,
        "/etc/perceptron/relay.toml: instance[0].offload.endpoint: \"127.0.0.1:9000\": not an \
         http:// or https:// URL"
    );
    let bucket = offload.replace("s3://bucket", "s3://Bucket");
    let err = parse(&GOOD.replacen("idle_pause_after = \"5m\"", &bucket, 1)).unwrap_err();
    assert!(
        err.starts_with("/etc/perceptron/relay.toml: instance[0].offload.store: ")
            && err.contains("not an S3 bucket name"),
        "{err}"
    );
}

#[test]
fn the_exec_driver_offloads_through_its_own_commands() {
    let exec = |driver: &str, offload: &str| {
        GOOD.replacen(
            "idle_pause_after = \"5m\"\n[instance.driver]\nkind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            &format!(
                "idle_pause_after = \"5m\"\n{offload}\n[instance.driver]\nkind = \"exec\"\n\
                 start = [\"up\"]\nstop = [\"down\"]\n{driver}"
            ),
            1,
        )
    };
    let hooks = "offload = [\"db-offload\"]\nrestore = [\"db-restore\"]";
    let table = "[instance.offload]\nafter = \"1h\"\nstore = \"s3://bucket/db\"";
    let c = parse(&exec(hooks, table)).unwrap();
    let o = c.instances[0].offload.clone().unwrap();
    assert_eq!(
        o.mover,
        crate::config::OffloadMover::Commands {
            store: Some("s3://bucket/db".into())
        }
    );
    assert_eq!(
        parse(&exec("offload = [\"db-offload\"]", table)).unwrap_err(),
        "/etc/perceptron/relay.toml: instance[0].driver: with the exec driver, the driver's \
         `offload` and `restore` commands move the data: set both"
    );
    assert_eq!(
        parse(&exec(hooks, "")).unwrap_err(),
        "/etc/perceptron/relay.toml: instance[0].driver.offload: only used with \
         [instance.offload], whose `after` says when"
    );
    let err = parse(&exec(hooks, &format!("{table}\ndata_dir = \"data\""))).unwrap_err();
    assert!(
        err.starts_with(
            "/etc/perceptron/relay.toml: instance[0].offload.data_dir: only with the process driver"
        ),
        "{err}"
    );
    // The process driver still needs its store and directory.
    let no_store =
        "idle_pause_after = \"5m\"\n[instance.offload]\nafter = \"1h\"\ndata_dir = \"d\"";
    assert_eq!(
        parse(&GOOD.replacen("idle_pause_after = \"5m\"", no_store, 1)).unwrap_err(),
        "/etc/perceptron/relay.toml: instance[0].offload.store: required, but missing"
    );
}

#[test]
fn errors_without_a_key_say_where_or_what() {
    assert_eq!(
        error_after("[relay]", "[relay"),
        "/etc/perceptron/relay.toml: line 2, column 7: invalid table header; expected `.`, `]`"
    );
    assert_eq!(
        parse(&GOOD[..GOOD.find("[[instance]]").unwrap()]).unwrap_err(),
        "/etc/perceptron/relay.toml: no [[instance]] configured, and no relay.instances_dir"
    );
    let missing = Path::new("/nonexistent/relay.toml");
    let e = Config::load(missing).unwrap_err();
    assert!(matches!(e.problem, ConfigProblem::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/relay.toml: cannot read: "),
        "{e}"
    );
}

#[test]
fn rejects_an_unreadable_token_file_naming_its_key() {
    let http = GOOD.replace(
        "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
        "kind = \"http\"\nurl = \"http://10.0.0.5:8080\"\ntoken_file = \"no-such.token\"",
    );
    let e = Config::parse(&http, Path::new("/nonexistent/relay.toml")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("instance[0].driver.token_file"));
    assert!(
        e.to_string().starts_with(
            "/nonexistent/relay.toml: instance[0].driver.token_file: cannot read \
             /nonexistent/no-such.token: "
        ),
        "{e}"
    );
}

#[test]
fn tls_paths_are_resolved_and_its_errors_name_the_key() {
    let pki = crate::tls::tests::Pki::new("config");
    let dir = pki.settings.cert.parent().unwrap().to_owned();
    let config_path = dir.join("relay.toml");
    let with =
        |extra: &str| GOOD.replace("[instance.driver]", &format!("{extra}\n[instance.driver]"));
    let tls = "require_secure_transport = true\n[instance.tls]\ncert = \"server.pem\"\n\
               key = \"server.key\"\nclient_ca = \"ca.pem\"\nmin_version = \"1.3\"";
    let c = Config::parse(&with(tls), &config_path).unwrap();
    let inst = &c.instances[0];
    assert!(inst.require_secure_transport);
    let t = inst.tls.as_ref().unwrap();
    assert_eq!(t.cert, dir.join("server.pem"));
    assert_eq!(t.client_ca.as_deref(), Some(dir.join("ca.pem").as_path()));
    assert_eq!(t.min_version, crate::config::TlsVersion::Tls13);

    let e =
        Config::parse(&with("[instance.tls]\ncert = \"server.pem\""), &config_path).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("instance[0].tls.key"));
    assert!(e.to_string().ends_with("required, but missing"), "{e}");

    let e = Config::parse(&with("require_secure_transport = true"), &config_path).unwrap_err();
    assert_eq!(
        e.key.as_deref(),
        Some("instance[0].require_secure_transport")
    );
    let c = Config::parse(
        &with(
            "compute_tls = \"verify\"\ncompute_ca = \"ca.pem\"\ncompute_tls_name = \"db.internal\"",
        ),
        &config_path,
    )
    .unwrap();
    assert_eq!(c.instances[0].compute_tls, ComputeTlsMode::Verify);
    assert_eq!(
        c.instances[0].compute_ca.as_deref(),
        Some(dir.join("ca.pem").as_path())
    );
    let e = Config::parse(&with("compute_tls = \"verify\""), &config_path).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("instance[0].compute_tls"));
    assert!(e.to_string().ends_with("needs compute_ca"), "{e}");
    let e = Config::parse(&with("compute_ca = \"ca.pem\""), &config_path).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("instance[0].compute_ca"));
    let e = Config::parse(&with("compute_tls = \"sometimes\""), &config_path).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("instance[0].compute_tls"));
}

#[test]
fn refuses_a_token_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let file = std::env::temp_dir().join(format!("relay-config-{}.token", std::process::id()));
    std::fs::write(&file, "a-bearer-token-of-some-length").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let http = GOOD.replace(
        "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
        &format!(
            "kind = \"http\"\nurl = \"http://10.0.0.5:8080\"\ntoken_file = \"{}\"",
            file.display()
        ),
    );
    let e = Config::parse(&http, Path::new("/nonexistent/relay.toml")).unwrap_err();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(e.key.as_deref(), Some("instance[0].driver.token_file"));
    assert!(matches!(e.problem, ConfigProblem::Secret(_)), "{e}");
    assert!(e.to_string().contains("has mode 0644"), "{e}");
}

#[test]
fn refuses_a_dual_instance_that_could_hold_a_login_too_long() {
    let text = GOOD.replace("resume_timeout = \"15s\"", "resume_timeout = \"11m\"");
    let e = parse(&text).unwrap_err();
    assert!(e.contains("instance[0].resume_timeout"), "{e}");
    assert!(
        e.contains("longer than a relayed login may be held (10m)"),
        "{e}"
    );
}

#[test]
fn loads_every_example() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut loaded = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!config.instances.is_empty(), "{}", path.display());
            loaded += 1;
        }
    }
    assert!(loaded >= 2, "examples not found in {}", dir.display());
}

#[test]
fn parses_the_readme_example() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let section = &text[text.find("## Configuration").unwrap()..];
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    let end = start + section[start..].find("```").unwrap();
    parse(&section[start..end]).unwrap();
}

#[test]
fn compute_proof_defaults_to_the_greeting_and_is_refused_outside_dual_mode() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.instances[0].compute_proof, ComputeProofMode::Greeting);
    let login = GOOD.replace(
        "auth = \"dual\"",
        "auth = \"dual\"\ncompute_proof = \"login\"",
    );
    let c = parse(&login).unwrap();
    assert_eq!(c.instances[0].compute_proof, ComputeProofMode::Login);
    let switch = GOOD.replace(
        "auth = \"dual\"",
        "auth = \"switch\"\ncompute_proof = \"login\"",
    );
    let e = parse(&switch).unwrap_err();
    assert!(
        e.contains("instance[0].compute_proof: only used with auth = \"dual\""),
        "{e}"
    );
    let e = parse(&GOOD.replace(
        "auth = \"dual\"",
        "auth = \"dual\"\ncompute_proof = \"maybe\"",
    ))
    .unwrap_err();
    assert!(e.contains("instance[0].compute_proof"), "{e}");
}

#[test]
fn an_endpoint_fronts_instances_with_or_without_a_listen_address_of_their_own() {
    let endpoint = "\n[[endpoint]]\nlisten = \"127.0.0.1:3307\"\nroute_by = \"user@instance\"\n";
    let c = parse(&format!("{GOOD}{endpoint}")).unwrap();
    assert_eq!(
        c.endpoints,
        [crate::config::EndpointConfig {
            listen: "127.0.0.1:3307".parse().unwrap(),
            route_by: crate::config::RouteBy::UserAtInstance,
            handshake_timeout: std::time::Duration::from_secs(10),
            tls: None,
            health_check_users: vec!["haproxy".into()],
        }]
    );
    let unlisted = GOOD.replacen("listen = \"127.0.0.1:3306\"\n", "", 1);
    assert_eq!(
        parse(&format!("{unlisted}{endpoint}")).unwrap().instances[0].listen,
        None
    );
    assert_eq!(
        parse(&unlisted).unwrap_err(),
        "/etc/perceptron/relay.toml: instance[0].listen: required unless an [[endpoint]] routes \
         to the instance"
    );
    let clash = endpoint.replace("3307", "3306");
    assert_eq!(
        parse(&format!("{GOOD}{clash}")).unwrap_err(),
        "/etc/perceptron/relay.toml: endpoint[0].listen: 127.0.0.1:3306 is used twice"
    );
    let other = endpoint.replace("user@instance", "user%instance");
    let err = parse(&format!("{GOOD}{other}")).unwrap_err();
    assert!(
        err.contains("endpoint") && err.contains("route_by"),
        "{err}"
    );
    let sni = endpoint.replace("user@instance", "sni");
    assert_eq!(
        parse(&format!("{GOOD}{sni}")).unwrap_err(),
        "/etc/perceptron/relay.toml: endpoint[0].tls: route_by = \"sni\" needs [endpoint.tls]: \
         the server name comes in the TLS handshake"
    );
    let with_tls = format!("{sni}[endpoint.tls]\ncert = \"tls/cert.pem\"\nkey = \"tls/key.pem\"\n");
    let tls = parse(&format!("{GOOD}{with_tls}")).unwrap().endpoints[0]
        .tls
        .clone()
        .unwrap();
    assert_eq!(tls.cert, Path::new("/etc/perceptron/tls/cert.pem"));
    let kernel = unlisted.replacen(
        "auth = \"dual\"",
        "auth = \"dual\"\nroute = \"nftables\"",
        1,
    );
    let err = parse(&format!("{kernel}{endpoint}")).unwrap_err();
    assert!(
        err.contains("instance[0].route") && err.contains("own listen address"),
        "{err}"
    );
}

/// A configuration whose instances are all in instance files, with `[[endpoint]]`s when
/// `endpoint` is set.
fn with_instances_dir(endpoint: bool) -> Config {
    let mut text =
        "[relay]\nstate_dir = \"state\"\nkey_file = \"k\"\ninstances_dir = \"instances.d\"\n"
            .to_owned();
    if endpoint {
        text.push_str("[[endpoint]]\nlisten = \"127.0.0.1:3306\"\nroute_by = \"user@instance\"\n");
    }
    Config::parse(&text, Path::new("/etc/perceptron/relay.toml")).unwrap()
}

const INSTANCE_FILE: &str = r#"
listen = "127.0.0.1:3307"
compute = "127.0.0.1:13307"
[driver]
kind = "process"
command = ["server-shim", "run"]
"#;

#[test]
fn an_instance_file_is_an_instance_named_by_its_file() {
    let config = with_instances_dir(false);
    assert_eq!(
        config.relay.instances_dir.as_deref(),
        Some(Path::new("/etc/perceptron/instances.d"))
    );
    let dir = Path::new("/etc/perceptron/instances.d");
    let inst = config
        .parse_instance_file(INSTANCE_FILE, &dir.join("shop.toml"), dir)
        .unwrap();
    assert_eq!(inst.name, "shop");
    assert_eq!(inst.listen, Some("127.0.0.1:3307".parse().unwrap()));
    let named = format!("name = \"shop\"\n{INSTANCE_FILE}");
    assert!(
        config
            .parse_instance_file(&named, &dir.join("shop.toml"), dir)
            .is_ok()
    );
    let err = config
        .parse_instance_file(&named, &dir.join("other.toml"), dir)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/perceptron/instances.d/other.toml: name: 'shop' differs from the file's name ('other'): rename the file or remove the key"
    );
    // Checked as an [[instance]] is, keys named at the file's top level.
    let bad = INSTANCE_FILE.replace("13307\"", "13307\"\nidle_pause_after = \"soon\"");
    let err = config
        .parse_instance_file(&bad, &dir.join("shop.toml"), dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/perceptron/instances.d/shop.toml: idle_pause_after: "),
        "{err}"
    );
    let nft = format!("route = \"nftables\"\n{INSTANCE_FILE}");
    let err = config
        .parse_instance_file(&nft, &dir.join("shop.toml"), dir)
        .unwrap_err()
        .to_string();
    assert!(err.contains("shop.toml: route: "), "{err}");
    // Without an endpoint, an instance needs its own listen address.
    let unlisted = INSTANCE_FILE.replace("listen = \"127.0.0.1:3307\"\n", "");
    let err = config
        .parse_instance_file(&unlisted, &dir.join("shop.toml"), dir)
        .unwrap_err()
        .to_string();
    assert!(err.contains("shop.toml: listen: required unless"), "{err}");
    assert!(
        with_instances_dir(true)
            .parse_instance_file(&unlisted, &dir.join("shop.toml"), dir)
            .is_ok()
    );
    // A compute on one of the relay's own listeners would have the relay log in to itself.
    let looped = INSTANCE_FILE.replace("127.0.0.1:13307", "0.0.0.0:3306");
    let err = with_instances_dir(true)
        .parse_instance_file(&looped, &dir.join("shop.toml"), dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("shop.toml: compute: 0.0.0.0:3306 is also endpoint[0].listen"),
        "{err}"
    );
    let own = INSTANCE_FILE.replace("127.0.0.1:13307", "127.0.0.1:3307");
    let err = config
        .parse_instance_file(&own, &dir.join("shop.toml"), dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("compute: 127.0.0.1:3307 is also listen"),
        "{err}"
    );
}

#[test]
fn only_visible_toml_files_are_instance_files() {
    use super::instance_file::instance_name;
    assert_eq!(instance_name("shop.toml"), Some("shop"));
    assert_eq!(instance_name(".shop.toml.tmp"), None);
    assert_eq!(instance_name(".shop.toml"), None);
    assert_eq!(instance_name("shop.toml~"), None);
    assert_eq!(instance_name("shop.toml.swp"), None);
    assert_eq!(instance_name(".toml"), None);
    assert_eq!(instance_name("README"), None);
}

/// The process driver's `user` and `group`: looked up when the file is read, so a typo names
/// its key; root, a group without a user, and a user with `[instance.offload]` are refused.
#[test]
fn parses_the_process_drivers_user_and_group() {
    let with = |extra: &str| {
        GOOD.replace(
            "command = [\"server-shim\", \"run\"]",
            &format!("command = [\"server-shim\", \"run\"]\n{extra}"),
        )
    };
    let run_as = |extra: &str| match &parse(&with(extra)).unwrap().instances[0].driver {
        DriverConfig::Process { run_as, .. } => *run_as,
        other => panic!("process driver expected: {other:?}"),
    };
    assert_eq!(run_as(""), None);
    // Debian's nobody: uid 65534, its primary group nogroup (65534).
    let nobody = Some(crate::config::RunAs {
        uid: 65534,
        gid: 65534,
    });
    assert_eq!(run_as("user = \"nobody\""), nobody);
    assert_eq!(run_as("user = \"65534\""), nobody);
    assert_eq!(
        run_as("user = \"nobody\"\ngroup = \"65533\""),
        Some(crate::config::RunAs {
            uid: 65534,
            gid: 65533
        })
    );
    let file = "/etc/perceptron/relay.toml";
    let cases = [
        (
            "user = \"no-such-user-here\"",
            "instance[0].driver.user: no user 'no-such-user-here' on this host",
        ),
        (
            "user = \"nobody\"\ngroup = \"no-such-group-here\"",
            "instance[0].driver.group: no group 'no-such-group-here' on this host",
        ),
        (
            "group = \"nogroup\"",
            "instance[0].driver.group: needs user: the compute would keep the relay's own user",
        ),
        ("user = \"root\"", "instance[0].driver.user: is root"),
        ("user = \"0\"", "instance[0].driver.user: is root"),
        (
            "user = \"nobody\"\ngroup = \"root\"",
            "instance[0].driver.group: is root's group",
        ),
    ];
    for (extra, want) in cases {
        let e = parse(&with(extra)).unwrap_err();
        assert!(e.starts_with(&format!("{file}: {want}")), "{e}");
    }
    let offloaded = with("user = \"nobody\"").replace(
        "[instance.driver]",
        "[instance.offload]\nstore = \"file:///srv/store\"\ndata_dir = \"data\"\nafter = \"1h\"\n\
         [instance.driver]",
    );
    let e = parse(&offloaded).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{file}: instance[0].driver.user: not yet with [instance.offload]"
        )),
        "{e}"
    );
}
