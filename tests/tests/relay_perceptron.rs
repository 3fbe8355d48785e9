//! The perceptron path end to end (issue: relay P0–P8): real relay, real server-shim started
//! by the relay's process driver, the stock `mariadb` CLI.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::time::{Duration, Instant};

use tests::relay::{
    PASSWORD, Relay, RelayOptions, USER, credential_needles, pid_alive, scan_files, scan_memory,
};
use tests::{TempDir, bin_path, mariadb, mariadb_script};

#[test]
fn login_to_a_paused_instance_wakes_it_and_runs_queries_on_one_connection() {
    let dir = TempDir::new("relay-e2e");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    assert!(!relay.compute_listening(), "the instance starts paused");
    assert_eq!(relay.state(), "paused");

    let out = mariadb_script(
        relay.port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE shop;\n\
         USE shop;\n\
         CREATE TABLE items (id INT PRIMARY KEY, name TEXT, qty INT);\n\
         INSERT INTO items VALUES (1, 'apple', 5), (2, 'pear', 7);\n\
         UPDATE items SET qty = 6 WHERE id = 1;\n\
         DELETE FROM items WHERE id = 2;\n\
         INSERT INTO items VALUES (3, 'fig', 2);\n\
         SELECT id, name, qty FROM items ORDER BY id;\n\
         SELECT USER();\n",
    );
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nlog:\n{}",
        out.stderr,
        relay.log()
    );
    assert_eq!(
        out.stdout,
        "1\tapple\t6\n3\tfig\t2\napp@127.0.0.1\n",
        "log:\n{}",
        relay.log()
    );
    assert!(relay.compute_listening(), "the compute was spawned");
    assert_eq!(relay.state(), "running");
    // One client connection, relayed once: the client never reconnected.
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            1.0
        ),
        1.0
    );
    assert_eq!(relay.log_count("relayed login accepted"), 1);
    assert_eq!(relay.log_count("compute spawned"), 1);
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        0.0
    );
}

/// A held session's connection id is the one the relay greeted its client with:
/// `CONNECTION_ID()` says so, and `KILL` from another connection (the direct route, once the
/// instance runs) reaches that session, as a driver's query timeout or a client's Ctrl-C
/// sends it.
#[test]
fn a_held_sessions_connection_id_is_its_greetings_and_kill_reaches_it() {
    use tests::raw;
    let dir = TempDir::new("relay-conn-id");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let (mut held, id) = raw::login_greeted(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        raw::one_row(&mut held, "SELECT CONNECTION_ID()"),
        Some(id.to_string()),
        "{}",
        relay.log()
    );
    let (mut other, other_id) = raw::login_greeted(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_ne!(other_id, id);
    assert_eq!(
        raw::one_row(&mut other, "SELECT CONNECTION_ID()"),
        Some(other_id.to_string())
    );
    assert_eq!(
        raw::query(&mut other, &format!("KILL QUERY {id}")).unwrap(),
        Ok(Vec::new())
    );
    assert_eq!(
        raw::one_row(&mut held, "SELECT 1 + 1").as_deref(),
        Some("2")
    );
    assert_eq!(
        raw::query(&mut other, &format!("KILL {id}")).unwrap(),
        Ok(Vec::new())
    );
    raw::assert_connection_ended(&mut held);
}

#[test]
fn wrong_password_through_the_relay_gets_1045() {
    let dir = TempDir::new("relay-1045");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let out = mariadb(relay.port, USER, Some("not-the-password"), &[], "SELECT 1");
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("ERROR 1045 (28000)"), "{}", out.stderr);
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"denied\"}",
            1.0
        ),
        1.0
    );
}

#[test]
fn fifty_clients_at_once_cause_one_spawn_and_all_succeed() {
    let dir = TempDir::new("relay-storm");
    let starts = dir.path().join("starts.log");
    let shim = bin_path("server-shim");
    let script = format!(
        "echo started >> '{}'; exec '{}' run --listen 127.0.0.1:{{COMPUTE_PORT}} --data '{}' --key-file '{}'",
        starts.display(),
        shim.display(),
        dir.path().join("data").display(),
        dir.path().join("perceptron.key").display()
    );
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(vec!["sh".into(), "-c".into(), script]),
            ..RelayOptions::default()
        },
    );
    let port = relay.port;
    let clients: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || mariadb(port, USER, Some(PASSWORD), &[], "SELECT USER()"))
        })
        .collect();
    for c in clients {
        let out = c.join().expect("client thread");
        assert_eq!(out.code, Some(0), "{}\nlog:\n{}", out.stderr, relay.log());
        assert_eq!(out.stdout, "app@127.0.0.1\n");
    }
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    assert_eq!(
        started.lines().count(),
        1,
        "exactly one compute process was spawned"
    );
    assert_eq!(
        relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}"),
        1.0
    );
}

fn assert_all_get_1053_within(relay: &Relay, clients: usize, limit: Duration) {
    let port = relay.port;
    let t0 = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|_| std::thread::spawn(move || mariadb(port, USER, Some(PASSWORD), &[], "SELECT 1")))
        .collect();
    for h in handles {
        let out = h.join().expect("client thread");
        assert_eq!(out.code, Some(1), "{}", out.stderr);
        assert!(
            out.stderr.contains("ERROR 1053 (08S01)")
                && out.stderr.contains("Instance 'demo' could not be resumed"),
            "{}\nlog:\n{}",
            out.stderr,
            relay.log()
        );
    }
    assert!(
        t0.elapsed() < tests::scaled(limit),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_compute_that_exits_at_once_gives_every_waiting_client_1053_and_the_relay_keeps_serving() {
    let dir = TempDir::new("relay-exits");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(vec!["false".into()]),
            resume_timeout: "5s",
            ..RelayOptions::default()
        },
    );
    assert_all_get_1053_within(&relay, 5, Duration::from_secs(30));
    // The relay still serves, and the next connection tries again.
    assert_all_get_1053_within(&relay, 1, Duration::from_secs(30));
    assert!(
        relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"wake_compute_exited\"}") >= 2.0
    );
    assert_eq!(relay.state(), "failed");
}

#[test]
fn a_compute_that_never_listens_gives_every_waiting_client_1053_within_resume_timeout() {
    let dir = TempDir::new("relay-hangs");
    let marker = dir.path().join("sleeper.pid");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!("echo $$ > '{}'; exec sleep 1000", marker.display()),
            ]),
            resume_timeout: "2s",
            ..RelayOptions::default()
        },
    );
    assert_all_get_1053_within(&relay, 5, Duration::from_secs(2) + Duration::from_secs(10));
    // The compute that never became ready was killed, not leaked.
    let pid: u32 = std::fs::read_to_string(&marker)
        .expect("sleeper started")
        .trim()
        .parse()
        .expect("pid");
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !pid_alive(pid)),
        "sleeper {pid} still alive"
    );
    // And the relay keeps greeting new clients.
    assert!(tests::wait_for_greeting(relay.port, Instant::now(), tests::READY_TIMEOUT).is_ok());
}

#[test]
fn the_relay_holds_no_credential_in_memory_or_state() {
    let dir = TempDir::new("relay-nocreds");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    // Several logins on the perceptron route (pausing in between), plus a wrong password.
    for round in 0..3 {
        let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT USER()");
        assert_eq!(
            out.code,
            Some(0),
            "round {round}: {}\n{}",
            out.stderr,
            relay.log()
        );
        relay.pause();
    }
    let _ = mariadb(relay.port, USER, Some("wrong-password"), &[], "SELECT 1");
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            3.0
        ),
        3.0
    );

    let needles = credential_needles(PASSWORD);
    let relay_pid = relay.child.pid().expect("relay pid");
    let in_relay = scan_memory(relay_pid, &needles);
    assert!(in_relay.is_empty(), "relay memory holds {in_relay:?}");
    let in_state = scan_files(&dir.path().join("state"), &needles);
    assert!(in_state.is_empty(), "relay state_dir holds {in_state:?}");

    // The same scan of the compute finds its stored hash: the scan works.
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let shim_pid = relay.compute_pid().expect("compute pid file");
    let in_shim = scan_memory(shim_pid, &needles);
    assert!(
        in_shim.iter().any(|n| n.starts_with("SHA1(SHA1(pw))")),
        "the scan should find the shim's stored hash; found {in_shim:?}"
    );
}

#[test]
fn mysql_connector_logs_in_and_change_user_gets_a_clear_error() {
    // mysql-connector-python sends connect attributes the greeting did not offer and an
    // empty database name; both must still log in through the perceptron. COM_CHANGE_USER
    // on a dual-mode session is answered with ERR 1047, never a silent OK.
    let dir = TempDir::new("relay-connector");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let out = tests::python(
        relay.port,
        &format!(
            "import os, mysql.connector\n\
             c = mysql.connector.connect(host='127.0.0.1', port=int(os.environ['PORT']), user='{USER}', password='{PASSWORD}', ssl_disabled=True, use_pure=True)\n\
             cur = c.cursor(); cur.execute('SELECT USER()'); print(cur.fetchone()[0])\n\
             try:\n    c.cmd_change_user(username='other', password='x')\n    print('changed')\n\
             except mysql.connector.Error as e:\n    print(e.errno)\n"
        ),
        Duration::from_secs(30),
    );
    assert_eq!(
        out.stdout,
        "app@127.0.0.1\n1047\n",
        "{}\n{}",
        out.stderr,
        relay.log()
    );
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            1.0
        ),
        1.0
    );
}

/// Before: the shim's greeting and login OK said autocommit was off, so PyMySQL (and
/// mysqlclient) never sent `SET autocommit=0`, every statement committed on its own and
/// `rollback()` silently kept the row (SQLAlchemy's `Session.rollback()` too). With
/// autocommit off, `CREATE TABLE rb.t` without a current database works (DDL runs outside
/// any transaction). The first connection is relayed by the perceptron (the instance is
/// paused), the later ones take the direct route.
#[test]
fn pymysql_and_sqlalchemy_rollbacks_are_kept_on_both_routes() {
    let dir = TempDir::new("relay-rollback");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let out = tests::python(
        relay.port,
        &format!(
            "import os, pymysql, urllib.parse\n\
             from sqlalchemy import create_engine, text\n\
             port = int(os.environ['PORT'])\n\
             def conn(db=None): return pymysql.connect(host='127.0.0.1', port=port, user='{USER}', password='{PASSWORD}', database=db)\n\
             c = conn(); cur = c.cursor()\n\
             cur.execute('CREATE DATABASE rb'); cur.execute('CREATE TABLE rb.t (id INT)'); cur.execute('USE rb')\n\
             print('autocommit', c.get_autocommit())\n\
             cur.execute('INSERT INTO t VALUES (1)'); c.rollback()\n\
             cur.execute('INSERT INTO t VALUES (2)'); c.commit()\n\
             def ids():\n    o = conn('rb'); k = o.cursor(); k.execute('SELECT id FROM t ORDER BY id'); return [r[0] for r in k.fetchall()]\n\
             print('pymysql', ids())\n\
             e = create_engine('mysql+pymysql://{USER}:%s@127.0.0.1:%d/rb' % (urllib.parse.quote_plus('{PASSWORD}'), port))\n\
             with e.connect() as x:\n    x.execute(text('INSERT INTO t VALUES (3)')); x.rollback()\n    x.execute(text('INSERT INTO t VALUES (4)')); x.commit()\n\
             print('sqlalchemy', ids())\n"
        ),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.stdout,
        "autocommit False\npymysql [2]\nsqlalchemy [2, 4]\n",
        "{}\n{}",
        out.stderr,
        relay.log()
    );
    assert_eq!(
        relay.metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}"),
        1.0,
        "the first connection was relayed"
    );
}

/// Statements of many packets arrive whole on both routes: PyMySQL's `executemany` of ten
/// 80 kB rows (one 800 kB multi-row `INSERT`, as PyMySQL's own `test_BLOB` sends) and one
/// 17 MB `INSERT`, longer than a packet's 16 MB, so the client splits it; every value is
/// read back and compared. First on the perceptron route (the instance is paused, the
/// connection wakes it and is held), then on the direct route (it runs).
#[test]
fn statements_longer_than_a_packet_arrive_whole_on_both_routes() {
    let dir = TempDir::new("relay-large-statements");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let code = format!(
        r#"
import os, pymysql, sys
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="{USER}",
                    password="{PASSWORD}", autocommit=True)
cur = c.cursor()
table = sys.argv[1]
cur.execute("CREATE DATABASE IF NOT EXISTS big")
cur.execute(f"CREATE TABLE big.{{table}} (i INT, v LONGTEXT)")
# Every printable character but none the same in a row, quotes and backslashes included.
row = lambda i: "".join(chr(32 + (i + k) % 95) for k in range(80_000))
cur.executemany(f"INSERT INTO big.{{table}} VALUES (%s, %s)", [(i, row(i)) for i in range(10)])
large = "'\\" + "x" * (17 << 20)
cur.execute(f"INSERT INTO big.{{table}} VALUES (%s, %s)", (10, large))
cur.execute(f"SELECT i, v FROM big.{{table}} ORDER BY i")
got = cur.fetchall()
want = [(i, row(i)) for i in range(10)] + [(10, large)]
assert len(got) == len(want), len(got)
for (gi, gv), (wi, wv) in zip(got, want):
    assert gi == wi and gv == wv, (gi, len(gv), len(wv))
print("whole", len(got))
"#
    );
    let relayed = |table: &str| {
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", &code, table])
            .env("PORT", relay.port.to_string());
        tests::run_with_input(&mut cmd, b"", Duration::from_secs(180))
    };
    assert_eq!(relay.state(), "paused");
    let held = relayed("held");
    assert_eq!(
        held.stdout.trim(),
        "whole 11",
        "{}\nlog:\n{}",
        held.stderr,
        relay.log()
    );
    assert!(relay.logged("relayed login accepted"), "{}", relay.log());
    assert_eq!(relay.state(), "running");
    let direct = relayed("direct");
    assert_eq!(
        direct.stdout.trim(),
        "whole 11",
        "{}\nlog:\n{}",
        direct.stderr,
        relay.log()
    );
    assert_eq!(
        relay.metric_reaching(
            "relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}",
            1.0
        ),
        1.0,
        "the second connection took the direct route\nlog:\n{}",
        relay.log()
    );
}
