//! Auth-switch mode against a real, stock MariaDB started by the relay's process driver: the
//! client is switched once to the server's own plugin and scramble; the relay holds no
//! credential and verifies nothing itself.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::Write as _;
use std::time::Duration;

use authplugin::packet::capabilities::*;
use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41, HandshakeV10};
use tests::relay::{Relay, RelayOptions};
use tests::{TempDir, mariadb, mariadb as cli, python, raw};
use zeroize::Zeroizing;

fn start(dir: &TempDir, extra: &[&str], proxy_protocol: bool) -> Relay {
    let relay = tests::mariadb::switch_relay(
        dir.path(),
        extra,
        RelayOptions {
            proxy_protocol,
            ..RelayOptions::default()
        },
    );
    // The first login (root, empty password, over the relay) wakes MariaDB; it creates the
    // test accounts: one per authentication plugin.
    let setup = cli(
        relay.port,
        "root",
        None,
        &[],
        "CREATE USER nat@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('nat-pw');\
         CREATE USER ed@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw');\
         GRANT ALL ON *.* TO nat@'%'; GRANT ALL ON *.* TO ed@'%'; CREATE DATABASE shop;",
    );
    assert_eq!(setup.code, Some(0), "{}\n{}", setup.stderr, relay.log());
    relay
}

fn pause(relay: &Relay) {
    let (status, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(status, 200, "{body}");
    assert_eq!(relay.state(), "paused");
}

#[test]
fn paused_mariadb_logs_in_native_and_ed25519_accounts_and_refuses_wrong_passwords() {
    let dir = TempDir::new("switch-plugins");
    let relay = start(&dir, &[], false);
    for (user, password) in [("nat", "nat-pw"), ("ed", "ed-pw")] {
        pause(&relay);
        let out = mariadb(
            relay.port,
            user,
            Some(password),
            &["-Dshop"],
            "SELECT CURRENT_USER(), DATABASE()",
        );
        assert_eq!(out.code, Some(0), "{user}: {}\n{}", out.stderr, relay.log());
        assert_eq!(out.stdout, format!("{user}@%\tshop\n"));
        pause(&relay);
        let wrong = mariadb(relay.port, user, Some("wrong"), &[], "SELECT 1");
        assert!(
            wrong.stderr.contains("ERROR 1045 (28000)"),
            "{user}: {}",
            wrong.stderr
        );
    }
    // PyMySQL follows the switch too (native account; its ed25519 support needs PyNaCl).
    pause(&relay);
    let py = python(
        relay.port,
        "import os, pymysql\n\
         c = pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='nat', password='nat-pw', database='shop')\n\
         cur = c.cursor(); cur.execute('SELECT CURRENT_USER()'); print(cur.fetchone()[0])\n",
        Duration::from_secs(30),
    );
    assert_eq!(py.stdout, "nat@%\n", "{}\n{}", py.stderr, relay.log());
    // Every one of those logins went through the perceptron (one switch each).
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            4.0
        ),
        4.0
    );
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"denied\"}",
            2.0
        ),
        2.0
    );
}

#[test]
fn proxy_protocol_shows_the_client_address_not_the_relays() {
    let dir = TempDir::new("switch-proxy");
    let relay = start(&dir, &["--proxy-protocol-networks=127.0.0.1/32"], true);
    // The client connects from 127.0.0.5; the relay from 127.0.0.1.
    let code = "import os, pymysql\n\
                c = pymysql.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='nat', password='nat-pw', bind_address='127.0.0.5')\n\
                cur = c.cursor(); cur.execute('SELECT USER()'); print(cur.fetchone()[0])\n";
    pause(&relay);
    let held = python(relay.port, code, Duration::from_secs(30));
    assert_eq!(
        held.stdout,
        "nat@127.0.0.5\n",
        "perceptron route: {}\n{}",
        held.stderr,
        relay.log()
    );
    // The wake's own connections say they are the relay's: never handed to a login.
    assert_eq!(
        relay.metric("relay_compute_connections_total{instance=\"demo\",opened_by=\"wake\"}"),
        0.0
    );
    let direct = python(relay.port, code, Duration::from_secs(30));
    assert_eq!(
        direct.stdout, "nat@127.0.0.5\n",
        "direct route: {}",
        direct.stderr
    );
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        1.0
    );
}

/// Logs in through the relay up to the server's switch, then hangs up.
fn abandon_after_switch(port: u16) {
    let mut s = raw::connect(port).expect("connect");
    let (_, greeting) = raw::read_packet(&mut s).expect("greeting");
    let g = HandshakeV10::decode(&greeting).expect("greeting decodes");
    let login = HandshakeResponse41 {
        client_flag: CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH,
        max_packet_size: 1 << 24,
        character_set: 33,
        reserved: [0; 23],
        username: b"nat".to_vec(),
        auth_response: Zeroizing::new(authplugin::native_password::token(
            b"x",
            &g.scramble().expect("scramble"),
        )),
        database: None,
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    raw::write_packet(&mut s, 1, &login.to_bytes()).expect("login");
    let (seq, switch) = raw::read_packet(&mut s).expect("the server's switch, relayed");
    assert_eq!(seq, 2);
    let sw = AuthSwitchRequest::decode(&switch).unwrap_or_else(|e| {
        panic!(
            "not an AuthSwitchRequest ({e}): {:?}",
            String::from_utf8_lossy(&switch)
        )
    });
    assert_eq!(sw.plugin_name, b"mysql_native_password");
    assert!(sw.scramble().is_some(), "20 bytes and a NUL");
    s.flush().ok();
    drop(s);
}

fn global_status(relay: &Relay, name: &str) -> u64 {
    let out = mariadb(
        relay.port,
        "root",
        None,
        &[],
        &format!("SHOW GLOBAL STATUS LIKE '{name}'"),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {:?}", out.stdout))
}

#[test]
fn an_abandoned_login_is_finished_as_a_failed_login_not_an_aborted_handshake() {
    // Aborted handshakes count towards max_connect_errors (for non-loopback hosts), which
    // would end with the relay's address blocked; failed logins do not.
    let dir = TempDir::new("switch-abandon");
    let relay = start(&dir, &[], false);
    pause(&relay);
    abandon_after_switch(relay.port);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.metric(
            "relay_connections_total{instance=\"demo\",outcome=\"client_gone\"}"
        ) >= 1.0),
        "{}",
        relay.log()
    );
    // MariaDB restarted with the wake, so its counters cover this login only: finished by
    // the relay with an empty answer, it is a refused login (an abandoned handshake would
    // leave Access_denied_errors at 0). No pre-auth abort at all: the readiness probe's
    // connection carried this login instead of being dropped after the greeting.
    assert_eq!(
        global_status(&relay, "Access_denied_errors"),
        1,
        "{}",
        relay.log()
    );
    assert_eq!(global_status(&relay, "Aborted_connects_preauth"), 0);
}

#[test]
fn change_user_works_on_a_switch_mode_session() {
    let dir = TempDir::new("switch-change-user");
    let relay = start(&dir, &[], false);
    pause(&relay);
    let out = python(
        relay.port,
        "import os, mysql.connector\n\
         c = mysql.connector.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='nat', password='nat-pw', ssl_disabled=True, use_pure=True)\n\
         cur = c.cursor(); cur.execute('SELECT CURRENT_USER()'); print(cur.fetchone()[0])\n\
         c.cmd_change_user(username='ed', password='ed-pw')\n\
         cur = c.cursor(); cur.execute('SELECT CURRENT_USER()'); print(cur.fetchone()[0])\n",
        Duration::from_secs(30),
    );
    // mysql-connector's pure client has no ed25519 plugin; a native account proves the point
    // if the second account is refused for that reason alone.
    assert!(
        out.stdout.starts_with("nat@%\n"),
        "{}\n{}",
        out.stderr,
        relay.log()
    );
    assert!(
        out.stdout == "nat@%\ned@%\n" || out.stderr.contains("client_ed25519"),
        "stdout {:?} stderr {}",
        out.stdout,
        out.stderr
    );
}

/// Parking on a stock MariaDB in switch mode (freezing needs no credential): an idle session is
/// parked by an unforced pause, and its next query runs on the same session with its state
/// (connection id, current database, a session variable) intact.
#[test]
fn an_idle_mariadb_session_is_parked_and_keeps_its_state() {
    let dir = TempDir::new("switch-parking");
    let relay = start(&dir, &[], false);
    pause(&relay);
    let mut s = raw::login(relay.port, "nat", "nat-pw", Some("shop"))
        .unwrap()
        .unwrap();
    relay.assert_parks_keeping_the_session(&mut s);
}
