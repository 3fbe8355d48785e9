//! Held connections spliced in the kernel (docs/kernel-splice.md): a connection that woke
//! its instance is carried by the kernel once it has sent a few commands, byte for byte, and
//! a compute that dies under it closes the client at once. These sessions are on loopback,
//! so spliced below TCP by default (a TC program rewrites their segments), and through their
//! sockets (the sockhash) with `splice_below_tcp = false`.
//!
//! Skipped, with the reason printed, only where the kernel refuses the program (no sockmap,
//! no CAP_BPF); a relay built without clang fails the test (scripts/test installs clang).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::Read as _;
use std::net::TcpStream;
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER, logged_number};
use tests::{TempDir, raw};

/// A relay whose held connections may be spliced (`park = false`); `None` (with the reason
/// printed) where this kernel cannot splice.
fn splicing_relay(dir: &std::path::Path) -> Option<Relay> {
    splicing_relay_with(dir, None)
}

/// As [`splicing_relay`], with the compute `command` ([`RelayOptions::command`]).
fn splicing_relay_with(dir: &std::path::Path, command: Option<Vec<String>>) -> Option<Relay> {
    splicing_relay_of(
        dir,
        RelayOptions {
            command,
            instance_toml: "park = false\n".into(),
            ..RelayOptions::default()
        },
    )
}

/// A relay started with `options`, if it splices held connections (see [`splicing_relay`]).
fn splicing_relay_of(dir: &std::path::Path, options: RelayOptions) -> Option<Relay> {
    let relay = Relay::start(dir, options);
    if relay.logged("held connections are spliced in the kernel") {
        return Some(relay);
    }
    let log = relay.log();
    assert!(
        !log.contains("built without it"),
        "the relay was built without the kernel splice (is clang installed?)\n{log}"
    );
    assert!(
        log.contains("the kernel splice is not available"),
        "the relay says nothing of the kernel splice\n{log}"
    );
    eprintln!("skipped: this kernel cannot splice held connections\n{log}");
    None
}

/// How many commands a held session sends on the pump before the relay splices it, at the
/// end of the last one's response (the relay's `SPLICE_AFTER_COMMANDS`).
const SPLICE_AFTER_COMMANDS: usize = 8;

const SPLICED: &str = "relay_spliced_sessions{instance=\"demo\"}";

/// Sends the commands after which the relay splices the session, and waits until it has
/// (not `SELECT 1`: a pool's keepalive query is not use, and does not count).
fn until_spliced(relay: &Relay, s: &mut TcpStream) {
    for _ in 0..SPLICE_AFTER_COMMANDS {
        assert_eq!(raw::one_row(s, "SELECT 1 + 1").as_deref(), Some("2"));
    }
    assert_eq!(relay.metric_reaching(SPLICED, 1.0), 1.0, "{}", relay.log());
}

fn login(relay: &Relay) -> TcpStream {
    let s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}\n{}", relay.log()));
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    s
}

/// Asks for `rows` rows of 200 bytes (`printf('%0200d', x)` over 1..=rows) and checks each
/// byte for byte.
fn query_numbered_rows(s: &mut TcpStream, rows: usize) {
    let sql = format!(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) \
         SELECT printf('%0200d', x) FROM n"
    );
    let mut payload = vec![0x03];
    payload.extend_from_slice(sql.as_bytes());
    raw::write_packet(s, 0, &payload).unwrap();
    let (_, columns) = raw::read_packet(s).unwrap();
    assert_eq!(columns, [1], "one column");
    raw::read_packet(s).unwrap(); // the column definition
    let (_, eof) = raw::read_packet(s).unwrap();
    assert_eq!(eof.first(), Some(&0xFE));
    for x in 1..=rows {
        let (_, row) = raw::read_packet(s).unwrap();
        let want = format!("{x:0200}");
        assert_eq!(row.first(), Some(&200), "row {x}");
        assert_eq!(&row[1..], want.as_bytes(), "row {x}");
    }
    let (_, end) = raw::read_packet(s).unwrap();
    assert!(end.first() == Some(&0xFE) && end.len() < 9, "{end:?}");
}

#[test]
fn a_held_connection_is_spliced_and_carries_every_byte() {
    carries_every_byte("park = false\n");
}

#[test]
fn a_held_connection_spliced_through_its_sockets_carries_every_byte() {
    carries_every_byte("park = false\nsplice_below_tcp = false\n");
}

/// A held session spliced on an instance defined with `instance_toml` carries 61 MB of rows
/// and a 16 MB value each way, in order, and its close; the relay's line says how it was
/// spliced.
fn carries_every_byte(instance_toml: &str) {
    let tmp = TempDir::new("splice-bytes");
    let Some(relay) = splicing_relay_of(
        tmp.path(),
        RelayOptions {
            instance_toml: instance_toml.into(),
            ..RelayOptions::default()
        },
    ) else {
        return;
    };
    let mut s = login(&relay);
    // A session of a few commands stays on the pump; the next command's response ends
    // on the kernel's side.
    for _ in 1..SPLICE_AFTER_COMMANDS {
        assert_eq!(raw::one_row(&mut s, "SELECT 1 + 1").as_deref(), Some("2"));
    }
    assert_eq!(relay.metric(SPLICED), 0.0);
    assert_eq!(raw::one_row(&mut s, "SELECT 2").as_deref(), Some("2"));
    assert_eq!(relay.metric_reaching(SPLICED, 1.0), 1.0, "{}", relay.log());
    // 300,000 rows of 200 bytes (61 MB) from the compute, in order.
    let rows = 300_000;
    query_numbered_rows(&mut s, rows);
    // A 15.3 MB value each way: sent in one command, read back in one row.
    let value = "0123456789abcdef".repeat(1_000_000);
    assert_eq!(
        raw::one_row(&mut s, &format!("SELECT length('{value}')")).as_deref(),
        Some("16000000")
    );
    let mut payload = b"\x03SELECT '".to_vec();
    payload.extend_from_slice(value.as_bytes());
    payload.push(b'\'');
    raw::write_packet(&mut s, 0, &payload).unwrap();
    let (_, columns) = raw::read_packet(&mut s).unwrap();
    assert_eq!(columns, [1], "one column");
    raw::read_packet(&mut s).unwrap(); // the column definition
    raw::read_packet(&mut s).unwrap(); // EOF
    let (_, row) = raw::read_packet(&mut s).unwrap();
    // A length-encoded string of 16,000,000 bytes: 0xFD and three bytes of length.
    assert_eq!(row[..4], [0xFD, 0x00, 0x24, 0xF4]);
    assert!(row[4..] == *value.as_bytes(), "the value came back changed");
    let (_, end) = raw::read_packet(&mut s).unwrap();
    assert_eq!(end.first(), Some(&0xFE));
    // COM_QUIT and the close: both sides closed, and the relay's line counts the bytes the
    // kernel carried.
    raw::write_packet(&mut s, 0, &[0x01]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    drop(s);
    let line = relay.closed_session();
    assert!(
        line.contains("spliced=true") && line.contains("ended_by=\"eof\""),
        "{line}"
    );
    // On loopback, below TCP where the relay could load that program, unless told not to.
    assert_eq!(
        line.contains("below_tcp=true"),
        relay.logged("spliced in the kernel below TCP")
            && !instance_toml.contains("splice_below_tcp"),
        "{line}"
    );
    assert!(
        logged_number(&line, "down") > 60_000_000 + 16_000_000,
        "{line}"
    );
}

/// Parking a spliced session (docs/kernel-splice.md): quiet between commands but for a
/// keepalive's pings (which the kernel carries, and which are not use), it is taken back
/// into the relay and parked on the frozen compute. Its next query thaws the compute and the
/// session goes back to the kernel; quiet again in an open transaction, it is parked again,
/// and a ping is answered there with the status flags read off the compute's last packet.
/// The transaction's next query thaws the same compute, back in the kernel a large result
/// still arrives whole, and the transaction commits.
#[test]
fn a_quiet_spliced_session_is_taken_back_parked_and_spliced_again() {
    let tmp = TempDir::new("splice-park");
    let Some(relay) = splicing_relay_of(
        tmp.path(),
        RelayOptions {
            idle_pause_after: "1s",
            ..RelayOptions::default()
        },
    ) else {
        return;
    };
    let spliced = SPLICED;
    let answered = "relay_parked_answers_total{instance=\"demo\",kind=\"ping\"}";
    let ping = |s: &mut TcpStream| {
        raw::write_packet(s, 0, &[0x0E]).unwrap();
        let (seq, ok) = raw::read_packet(s).unwrap();
        assert_eq!((seq, ok.first()), (1, Some(&0x00)), "{ok:?}");
        ok
    };
    let mut s = login(&relay);
    until_spliced(&relay, &mut s);
    let pid = relay.compute_pid().unwrap();
    let parked = Relay::wait_until(Duration::from_secs(60), || {
        ping(&mut s);
        relay.state() == "frozen"
    });
    assert!(parked, "pings kept the instance running:\n{}", relay.log());
    assert!(tests::cgroup::frozen(pid));
    assert_eq!(relay.metric(spliced), 0.0);

    for sql in [
        "CREATE DATABASE app",
        "USE app",
        "CREATE TABLE t (x INTEGER)",
        "BEGIN",
        "INSERT INTO t VALUES (1)",
    ] {
        let result = raw::query(&mut s, sql);
        assert!(matches!(result, Ok(Ok(_))), "{sql}: {result:?}");
    }
    assert_eq!(relay.compute_pid(), Some(pid));
    assert_eq!(relay.metric_reaching(spliced, 1.0), 1.0, "{}", relay.log());

    // Quiet in the transaction: parked again, the compute frozen under it.
    relay.wait_state("frozen", Duration::from_secs(60));
    assert!(tests::cgroup::frozen(pid));
    let (_, status) = relay.admin("GET", "/v1/instances");
    assert!(status.contains("\"parked_connections\": 1"), "{status}");
    let before = relay.metric(answered);
    let ok = ping(&mut s);
    let flags = u16::from_le_bytes([ok[3], ok[4]]);
    assert_eq!(
        flags & 0x0001,
        0x0001,
        "SERVER_STATUS_IN_TRANS: {flags:#06x}"
    );
    assert_eq!(relay.metric(answered), before + 1.0);
    assert!(tests::cgroup::frozen(pid), "the ping thawed the compute");

    // The next query thaws the same compute, in the same transaction, and the session goes
    // back to the kernel.
    assert_eq!(
        raw::one_row(&mut s, "SELECT count(*) FROM t").as_deref(),
        Some("1")
    );
    assert_eq!(relay.compute_pid(), Some(pid));
    assert_eq!(relay.metric_reaching(spliced, 1.0), 1.0, "{}", relay.log());
    let rows = 100_000;
    query_numbered_rows(&mut s, rows);
    assert!(matches!(raw::query(&mut s, "COMMIT"), Ok(Ok(_))));
    raw::write_packet(&mut s, 0, &[0x01]).unwrap();
    drop(s);
    let line = relay.closed_session();
    assert!(line.contains("spliced=true"), "{line}");
    assert!(!line.contains("taken_back=0"), "{line}");
    assert_eq!(
        line.contains("below_tcp=true"),
        relay.logged("spliced in the kernel below TCP"),
        "{line}"
    );
    assert!(logged_number(&line, "down") > 20_000_000, "{line}");
}

#[test]
fn a_compute_killed_under_a_spliced_session_closes_the_client_at_once() {
    let tmp = TempDir::new("splice-kill");
    let Some(relay) = splicing_relay(tmp.path()) else {
        return;
    };
    let mut s = login(&relay);
    until_spliced(&relay, &mut s);
    let pid = relay.compute_pid().unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    raw::assert_connection_ended(&mut s);
    drop(s);
    assert!(
        Relay::wait_until(Duration::from_secs(10), || relay.logged("session closed")),
        "{}",
        relay.log()
    );
}

/// Without CAP_BPF (and CAP_SYS_ADMIN, which also allows it) the relay says once why it
/// cannot splice, and held connections work on its pump.
#[test]
fn without_the_capability_held_connections_stay_on_the_pump() {
    let tmp = TempDir::new("splice-nocap");
    let relay = Relay::start(
        tmp.path(),
        RelayOptions {
            instance_toml: "park = false\n".into(),
            launcher: ["setpriv", "--bounding-set=-bpf,-sys_admin,-perfmon", "--"]
                .map(String::from)
                .to_vec(),
            ..RelayOptions::default()
        },
    );
    let log = relay.log();
    assert_eq!(
        log.matches("the kernel splice is not available").count(),
        1,
        "{log}"
    );
    let mut s = login(&relay);
    for _ in 0..=SPLICE_AFTER_COMMANDS {
        assert_eq!(raw::one_row(&mut s, "SELECT 6 * 7").as_deref(), Some("42"));
    }
    assert_eq!(relay.metric(SPLICED), 0.0);
    // `relay check` says the same, naming the key, and still passes the configuration.
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set=-bpf,-sys_admin,-perfmon", "--"])
        .arg(tests::bin_path("relay"))
        .args(["check", "--config"])
        .arg(relay.dir.join("relay.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains("instance[0].kernel_splice: warning: held connections will stay"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// sysbench `oltp_read_write` on connections that are all held and spliced: the compute
/// starts a second after the wake, so every connection sysbench opens is relayed.
#[test]
fn sysbench_oltp_read_write_runs_on_spliced_connections() {
    let tmp = TempDir::new("splice-sysbench");
    let dir = tmp.path().display().to_string();
    let shim = tests::bin_path("server-shim").display().to_string();
    let Some(relay) = splicing_relay_with(
        tmp.path(),
        Some(vec![
            "sh".into(),
            "-c".into(),
            format!(
                "sleep 1; exec {shim} run --listen 127.0.0.1:{{COMPUTE_PORT}} \
                 --data {dir}/data --key-file {dir}/perceptron.key"
            ),
        ]),
    ) else {
        return;
    };
    let port = relay.port;
    tests::ok(&tests::mariadb(
        port,
        USER,
        Some(PASSWORD),
        &[],
        "CREATE DATABASE sbtest",
    ));
    let sysbench = |phase: &str, extra: &[&str]| {
        tests::sysbench_read_write(port, USER, PASSWORD, phase, extra)
    };
    tests::ok(&sysbench("prepare", &[]));
    relay.pause();
    let spliced = |log: &str| {
        log.lines()
            .filter(|l| l.contains("session closed") && l.contains("spliced=true"))
            .count()
    };
    let before = spliced(&relay.log());
    let run = sysbench("run", &["--threads=4", "--events=400", "--time=0"]);
    let out = tests::ok(&run);
    assert!(
        out.contains("transactions:                        400 "),
        "{out}"
    );
    assert!(
        out.contains("ignored errors:                      0 "),
        "{out}"
    );
    assert!(
        Relay::wait_until(Duration::from_secs(10), || spliced(&relay.log()) - before
            == 4),
        "every sysbench connection held and spliced\n{}",
        relay.log()
    );
}

/// The relay killed with -9 under a spliced session: the kernel closes the relay's sockets
/// with the process, so the client sees its connection end at once, as with the pump (the
/// splice leaves nothing behind that would keep it open).
#[test]
fn the_relay_killed_under_a_spliced_session_ends_the_clients_connection() {
    let tmp = TempDir::new("splice-relay-kill");
    let Some(mut relay) = splicing_relay(tmp.path()) else {
        return;
    };
    let mut s = login(&relay);
    until_spliced(&relay, &mut s);
    // The compute outlives a killed relay; stopped by pid when the test ends.
    let _compute = tests::relay::KillOnDrop(relay.compute_pid());
    relay.child.kill9();
    raw::assert_connection_ended(&mut s);
}
