//! `server-shim` end to end: real processes, the real `mariadb` CLI, PyMySQL and
//! mysql-connector-python, and a raw socket playing the relay for relayed logins (P6/P7).
//!
//! Build the binary first: `cargo build -p server-shim && cargo test -p tests`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_LONG_PASSWORD, CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use authplugin::packet::{HandshakeResponse41, HandshakeV10};
use authplugin::payload::{self, Binding, LoginClaim, PLUGIN_NAME};
use authplugin::{
    AuthPlugin, KeyId, KeyRing, PerceptronKey, Scramble, compute_proof, native_password,
};
use tests::{Shim, TempDir, add_user, mariadb, mariadb_script, python, raw};
use zeroize::Zeroizing;

const APP_PW: &str = "app-secret-pw";
const ROOT_PW: &str = "root-secret-pw";

/// A data directory with `app` (password), `root` (admin) and `guest` (empty password).
fn data_dir(tmp: &TempDir) -> std::path::PathBuf {
    let data = tmp.path().join("data");
    add_user(&data, "app", APP_PW, false);
    add_user(&data, "root", ROOT_PW, true);
    add_user(&data, "guest", "", false);
    data
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn direct_login_accepts_right_password_and_refuses_wrong_or_unknown() {
    let tmp = TempDir::new("direct-login");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);

    let ok = mariadb(shim.port, "app", Some(APP_PW), &[], "SELECT USER()");
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    assert_eq!(ok.stdout.trim(), "app@127.0.0.1");

    let wrong = mariadb(shim.port, "app", Some("nope"), &[], "SELECT 1");
    assert_ne!(wrong.code, Some(0));
    assert!(
        wrong.stderr.contains(
            "ERROR 1045 (28000): Access denied for user 'app'@'127.0.0.1' (using password: YES)"
        ),
        "{}",
        wrong.stderr
    );

    let unknown = mariadb(shim.port, "ghost", Some("x"), &[], "SELECT 1");
    assert!(
        unknown.stderr.contains("ERROR 1045 (28000)"),
        "{}",
        unknown.stderr
    );

    let empty = mariadb(shim.port, "guest", None, &[], "SELECT CURRENT_USER()");
    assert_eq!(empty.code, Some(0), "{}", empty.stderr);
    assert_eq!(empty.stdout.trim(), "guest@%");
    // An empty-password account refuses a password, and says "using password: YES".
    let guest_pw = mariadb(shim.port, "guest", Some("x"), &[], "SELECT 1");
    assert!(
        guest_pw.stderr.contains("ERROR 1045 (28000)"),
        "{}",
        guest_pw.stderr
    );
    // A password account refuses an empty answer: "using password: NO".
    let no_pw = mariadb(shim.port, "app", None, &[], "SELECT 1");
    assert!(
        no_pw.stderr.contains("(using password: NO)"),
        "{}",
        no_pw.stderr
    );

    let log = shim.log();
    assert!(log.contains("kind=\"wrong_answer\""), "{log}");
    assert!(log.contains("kind=\"unknown_user\""), "{log}");
    assert!(!log.contains(APP_PW), "a password reached the log");
}

#[test]
fn greeting_reports_version_fresh_scramble_and_increasing_connection_ids() {
    let tmp = TempDir::new("greeting");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let mut s = raw::connect(shim.port).unwrap();
        let (seq, payload) = raw::read_packet(&mut s).unwrap();
        assert_eq!(seq, 0);
        let g = HandshakeV10::decode(&payload).unwrap();
        assert_eq!(g.server_version, b"8.0.36-perceptron-shim");
        assert_eq!(
            g.auth_plugin_name.as_deref(),
            Some(&b"mysql_native_password"[..])
        );
        seen.push((g.connection_id, g.scramble().unwrap()));
    }
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].1 != w[1].1), "scramble reused");
}

/// With a key file, the greeting is the plain one every client reads, and the shim proves
/// the key to a login that asks for it with a Hello: in the auth switch, after its scramble,
/// bound to the Hello's nonce (a relay with another key refuses it). The relay's payload,
/// signed for that scramble, then logs in.
#[test]
fn the_key_is_proven_in_the_auth_switch_to_a_login_that_asks() {
    let tmp = TempDir::new("switch-proof");
    let key_file = tmp.path().join("perceptron.key");
    let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    authplugin::key_file::append(&key_file, &key).unwrap();
    let shim = Shim::start(&data_dir(&tmp), Some(&key_file), &[]);
    let mut greeting = raw::connect(shim.port).unwrap();
    let (_, payload) = raw::read_packet(&mut greeting).unwrap();
    assert_eq!(
        HandshakeV10::decode(&payload).unwrap().server_version,
        b"8.0.36-perceptron-shim"
    );
    let hello = compute_proof::Hello::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    let mut greeted = None;
    let (mut s, switch, _) = relayed_login(shim.port, "app", "", |b| {
        greeted = Some(b.clone());
        hello.encode()
    });
    let b = greeted.unwrap();
    let switch = authplugin::packet::AuthSwitchRequest::decode(&switch).unwrap();
    assert_eq!(switch.plugin_name, b"mysql_native_password");
    let (scramble, proof) = compute_proof::switch_proof(&switch.plugin_data).unwrap();
    assert_eq!(scramble, b);
    let ring = KeyRing::new(vec![key.clone()]).unwrap();
    assert_eq!(
        hello.verify_proof(proof, &scramble, &ring),
        Ok(KeyId::new("k1").unwrap())
    );
    let other = KeyRing::new(vec![PerceptronKey::generate(
        KeyId::new("k1").unwrap(),
        &mut rand::rngs::OsRng,
    )])
    .unwrap();
    assert_eq!(
        hello.verify_proof(proof, &scramble, &other),
        Err(compute_proof::ProofError::BadTag)
    );
    let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let answer = sign(&key, &claim(APP_PW, &scramble_a), now_ms(), &b, "app", "");
    raw::write_packet(&mut s, 3, &answer).unwrap();
    let (seq, ok) = raw::read_packet(&mut s).unwrap();
    assert_eq!(
        (seq, ok.first()),
        (4, Some(&0x00)),
        "{:?}",
        raw::err_of(&ok)
    );
    assert_eq!(
        raw::one_row(&mut s, "SELECT USER()").as_deref(),
        Some("app@10.9.8.7")
    );
}

/// Plays the relay's P6 against the shim: reads the greeting (scramble B), signs a payload
/// over it with `make`, sends a HandshakeResponse41 with plugin `perceptron_dual_auth`.
/// Returns the socket, the reply packet and the payload sent.
fn relayed_login(
    port: u16,
    user: &str,
    database: &str,
    make: impl FnOnce(&Scramble) -> Vec<u8>,
) -> (std::net::TcpStream, Vec<u8>, Vec<u8>) {
    let mut s = raw::connect(port).unwrap();
    let (_, greeting) = raw::read_packet(&mut s).unwrap();
    let scramble_b = HandshakeV10::decode(&greeting).unwrap().scramble().unwrap();
    let payload = make(&scramble_b);
    let response = HandshakeResponse41 {
        client_flag: CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CLIENT_CONNECT_WITH_DB,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: user.as_bytes().to_vec(),
        auth_response: Zeroizing::new(payload.clone()),
        database: Some(database.as_bytes().to_vec()),
        client_plugin_name: Some(PLUGIN_NAME.as_bytes().to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    raw::write_packet(&mut s, 1, &response.to_bytes()).unwrap();
    let (seq, reply) = raw::read_packet(&mut s).unwrap();
    assert_eq!(seq, 2, "reply sequence id");
    (s, reply, payload)
}

fn claim(password: &str, scramble_a: &Scramble) -> LoginClaim {
    LoginClaim {
        scramble_a: scramble_a.clone(),
        answer_a: Zeroizing::new(native_password::token(password.as_bytes(), scramble_a)),
        client_plugin: AuthPlugin::MysqlNativePassword,
        client_addr: "10.9.8.7:40001".into(),
    }
}

fn sign(
    key: &PerceptronKey,
    claim: &LoginClaim,
    issued_at_ms: u64,
    scramble_b: &Scramble,
    user: &str,
    db: &str,
) -> Vec<u8> {
    payload::encode_signed(
        claim,
        key,
        issued_at_ms,
        &Binding {
            scramble_b,
            user: user.as_bytes(),
            database: db.as_bytes(),
        },
    )
    .unwrap()
}

fn assert_denied(reply: &[u8]) {
    let (code, message) = raw::err_of(reply);
    assert_eq!(code, 1045, "{message}");
    assert!(
        message.starts_with("Access denied for user 'app'@"),
        "{message}"
    );
}

#[test]
fn relayed_login_verifies_payload_and_refuses_every_forgery() {
    let tmp = TempDir::new("relayed");
    let data = data_dir(&tmp);
    let key_file = tmp.path().join("perceptron.key");
    let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    authplugin::key_file::append(&key_file, &key).unwrap();
    let shim = Shim::start(&data, Some(&key_file), &[]);
    let setup = mariadb(
        shim.port,
        "root",
        Some(ROOT_PW),
        &[],
        "CREATE DATABASE shop",
    );
    assert_eq!(setup.code, Some(0), "{}", setup.stderr);

    // Valid: OK, then the session runs as `app`, from the client address the relay vouched for.
    let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (mut s, reply, sent) = relayed_login(shim.port, "app", "shop", |b| {
        sign(
            &key,
            &claim(APP_PW, &scramble_a),
            now_ms(),
            b,
            "app",
            "shop",
        )
    });
    assert_eq!(reply.first(), Some(&0x00), "{:?}", raw::err_of(&reply));
    // opensrv read a lenenc auth_response of this size with our plugin name.
    assert!(
        (100..=200).contains(&sent.len()),
        "payload is {} bytes",
        sent.len()
    );
    let rows = raw::query(&mut s, "SELECT USER(), DATABASE()")
        .unwrap()
        .unwrap();
    assert_eq!(rows, vec![Some("app@10.9.8.7".to_owned())]);
    drop(s);

    // The same bytes on a new connection: scramble B differs, so the MAC fails.
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |_| sent.clone());
    assert_denied(&reply);

    // A true replay: the same scramble A, correctly re-signed for the new scramble B.
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        sign(
            &key,
            &claim(APP_PW, &scramble_a),
            now_ms(),
            b,
            "app",
            "shop",
        )
    });
    assert_denied(&reply);

    // Tampered MAC.
    let fresh = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        let mut p = sign(&key, &claim(APP_PW, &fresh), now_ms(), b, "app", "shop");
        if let Some(last) = p.last_mut() {
            *last ^= 1;
        }
        p
    });
    assert_denied(&reply);

    // Signed with a key the shim does not have.
    let stranger = PerceptronKey::generate(KeyId::new("k9").unwrap(), &mut rand::rngs::OsRng);
    let fresh = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        sign(
            &stranger,
            &claim(APP_PW, &fresh),
            now_ms(),
            b,
            "app",
            "shop",
        )
    });
    assert_denied(&reply);

    // Expired: issued ten minutes ago.
    let fresh = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        sign(
            &key,
            &claim(APP_PW, &fresh),
            now_ms() - 600_000,
            b,
            "app",
            "shop",
        )
    });
    assert_denied(&reply);

    // Wrong answer A (the client typed the wrong password).
    let fresh = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        sign(&key, &claim("wrong", &fresh), now_ms(), b, "app", "shop")
    });
    assert_denied(&reply);

    // Signed for another database than the login names.
    let fresh = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, reply, _) = relayed_login(shim.port, "app", "shop", |b| {
        sign(&key, &claim(APP_PW, &fresh), now_ms(), b, "app", "other")
    });
    assert_denied(&reply);

    let log = shim.log();
    for kind in [
        "bad_mac",
        "replayed",
        "unknown_key_id",
        "outside_window",
        "wrong_answer",
    ] {
        assert!(
            log.contains(&format!("kind=\"{kind}\"")),
            "{kind} not logged:\n{log}"
        );
    }
    let key_line = std::fs::read_to_string(&key_file).unwrap();
    let secret_hex = key_line
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.split_whitespace().nth(1))
        .unwrap();
    assert!(!log.contains(secret_hex), "the key reached the log");
    assert!(!log.contains(APP_PW), "a password reached the log");
}

#[test]
fn relayed_login_is_refused_without_key_file_while_direct_works() {
    let tmp = TempDir::new("no-key");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    let a = Scramble::generate(&mut rand::rngs::OsRng);
    let (_s, reply, _) = relayed_login(shim.port, "app", "", |b| {
        sign(&key, &claim(APP_PW, &a), now_ms(), b, "app", "")
    });
    assert_denied(&reply);
    assert!(shim.log().contains("kind=\"no_key_ring\""));
    let direct = mariadb(shim.port, "app", Some(APP_PW), &[], "SELECT 1");
    assert_eq!(direct.code, Some(0), "{}", direct.stderr);
}

#[test]
fn cli_session_runs_crud_transactions_and_survives_errors() {
    let tmp = TempDir::new("cli-session");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let script = "\
CREATE DATABASE shop;
SHOW DATABASES;
USE shop;
CREATE TABLE items (id INT PRIMARY KEY, name TEXT, qty INT);
INSERT INTO items VALUES (1, 'apple', 5), (2, 'pear', 7), (3, 'plum', 1);
SELEKT oops;
SELECT * FROM missing_table;
INSERT INTO items VALUES (1, 'dup', 0);
UPDATE items SET qty = qty + 10 WHERE id = 2;
DELETE FROM items WHERE id = 3;
SELECT id, name, qty FROM items ORDER BY id;
BEGIN;
INSERT INTO items VALUES (9, 'ghost', 0);
DELETE FROM items WHERE id = 1;
ROLLBACK;
SELECT COUNT(*) FROM items;
START TRANSACTION;
INSERT INTO items VALUES (4, 'fig', 2);
COMMIT;
SELECT name FROM items WHERE qty < 10 ORDER BY name;
SELECT COUNT(*), SUM(qty) FROM items;
SHOW TABLES;
USE nowhere;
SELECT DATABASE();
";
    let out = mariadb_script(shim.port, "app", Some(APP_PW), &["--force"], script);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "shop",
            "1\tapple\t5",
            "2\tpear\t17",
            "2",
            "apple",
            "fig",
            "3\t24",
            "items",
            "shop",
        ],
        "stderr:\n{}",
        out.stderr
    );
    for expected in [
        "ERROR 1064 (42000)",
        "ERROR 1146 (42S02)",
        "ERROR 1062 (23000)",
        "ERROR 1049 (42000)",
    ] {
        assert!(
            out.stderr.contains(expected),
            "{expected} missing:\n{}",
            out.stderr
        );
    }
    let no_db = mariadb(shim.port, "app", Some(APP_PW), &[], "SELECT * FROM items");
    assert!(
        no_db.stderr.contains("ERROR 1046 (3D000)"),
        "{}",
        no_db.stderr
    );
    let exists = mariadb(shim.port, "app", Some(APP_PW), &[], "CREATE DATABASE shop");
    assert!(exists.stderr.contains("ERROR 1007"), "{}", exists.stderr);
    let dup_table = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &["-Dshop"],
        "CREATE TABLE items (id INT)",
    );
    assert!(
        dup_table.stderr.contains("ERROR 1050 (42S01)"),
        "{}",
        dup_table.stderr
    );
    let bad_col = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &["-Dshop"],
        "SELECT nope FROM items",
    );
    assert!(
        bad_col.stderr.contains("ERROR 1054 (42S22)"),
        "{}",
        bad_col.stderr
    );
}

#[test]
fn committed_rows_and_accounts_survive_kill_9() {
    let tmp = TempDir::new("kill9");
    let data = data_dir(&tmp);
    let mut shim = Shim::start(&data, None, &[]);
    let setup = mariadb(
        shim.port,
        "root",
        Some(ROOT_PW),
        &[],
        "CREATE DATABASE keep; USE keep; CREATE TABLE t (id INT PRIMARY KEY, v TEXT); \
         INSERT INTO t VALUES (1, 'one'), (2, 'two'); \
         BEGIN; INSERT INTO t VALUES (3, 'three'); COMMIT; \
         CREATE USER 'late'@'%' IDENTIFIED BY 'late-pw'",
    );
    assert_eq!(setup.code, Some(0), "{}", setup.stderr);
    // A non-admin cannot manage accounts.
    let denied = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &[],
        "CREATE USER 'x'@'%' IDENTIFIED BY 'y'",
    );
    assert!(
        denied.stderr.contains("ERROR 1227 (42000)"),
        "{}",
        denied.stderr
    );

    shim.child.kill9();
    let shim = Shim::start(&data, None, &[]);
    let rows = mariadb(
        shim.port,
        "late",
        Some("late-pw"),
        &["-Dkeep"],
        "SELECT id, v FROM t ORDER BY id",
    );
    assert_eq!(rows.code, Some(0), "{}", rows.stderr);
    assert_eq!(rows.stdout, "1\tone\n2\ttwo\n3\tthree\n");

    // ALTER and DROP USER persist too.
    let admin = mariadb(
        shim.port,
        "root",
        Some(ROOT_PW),
        &[],
        "ALTER USER 'late'@'%' IDENTIFIED BY 'new-pw'; DROP USER 'app'@'%'",
    );
    assert_eq!(admin.code, Some(0), "{}", admin.stderr);
    let new_pw = mariadb(shim.port, "late", Some("new-pw"), &[], "SELECT 1");
    assert_eq!(new_pw.code, Some(0), "{}", new_pw.stderr);
    let gone = mariadb(shim.port, "app", Some(APP_PW), &[], "SELECT 1");
    assert!(gone.stderr.contains("ERROR 1045"), "{}", gone.stderr);
    let accounts = std::fs::read_to_string(data.join("accounts")).unwrap();
    assert!(!accounts.contains("new-pw") && !accounts.contains(ROOT_PW));
}

#[test]
fn fifty_concurrent_pymysql_sessions_insert_and_select() {
    let tmp = TempDir::new("concurrent");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let setup = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &[],
        "CREATE DATABASE load; USE load; CREATE TABLE hits (worker INT, n INT)",
    );
    assert_eq!(setup.code, Some(0), "{}", setup.stderr);
    let script = format!(
        r#"
import os, threading, pymysql
errors = []
def work(w):
    try:
        c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="app",
                            password="{APP_PW}", database="load", autocommit=True)
        cur = c.cursor()
        for n in range(10):
            cur.execute("INSERT INTO hits VALUES (%s, %s)", (w, n))
            cur.execute("SELECT COUNT(*) FROM hits WHERE worker = %s", (w,))
            assert cur.fetchone()[0] == n + 1
        c.close()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(w,)) for w in range(50)]
[t.start() for t in threads]
[t.join() for t in threads]
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="app",
                    password="{APP_PW}", database="load")
cur = c.cursor()
cur.execute("SELECT COUNT(*), COUNT(DISTINCT worker) FROM hits")
print(cur.fetchone(), len(errors), errors[:3])
"#
    );
    let out = python(shim.port, &script, Duration::from_secs(240));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "(500, 50) 0 []", "{}", out.stderr);
}

#[test]
fn drivers_connect_and_bind_parameters() {
    let tmp = TempDir::new("drivers");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let setup = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &[],
        "CREATE DATABASE drv; USE drv; CREATE TABLE people (id INT PRIMARY KEY, name TEXT)",
    );
    assert_eq!(setup.code, Some(0), "{}", setup.stderr);
    // PyMySQL: text protocol, client-side escaping with backslashes.
    let pymysql = format!(
        r#"
import os, pymysql
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="app",
                    password="{APP_PW}", database="drv")
cur = c.cursor()
cur.execute("SELECT @@session.transaction_isolation, @@max_allowed_packet, VERSION()")
print(cur.fetchone())
evil = "x\\' OR 1=1 -- "
cur.execute("INSERT INTO people VALUES (%s, %s)", (1, evil))
c.commit()
cur.execute("SELECT name FROM people WHERE id = %s", (1,))
print(cur.fetchone()[0] == evil)
"#
    );
    let out = python(shim.port, &pymysql, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "('REPEATABLE-READ', 67108864, '8.0.36-perceptron-shim')\nTrue\n"
    );
    // mysql-connector-python with server-side prepared statements (COM_STMT_*).
    let connector = format!(
        r#"
import os, mysql.connector
c = mysql.connector.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="app",
                            password="{APP_PW}", database="drv", use_pure=True,
                            ssl_disabled=True)
cur = c.cursor(prepared=True)
cur.execute("INSERT INTO people VALUES (?, ?)", (2, "Robert'); DROP TABLE people; --"))
cur.execute("INSERT INTO people VALUES (?, ?)", (3, "Zoë"))
c.commit()
cur.execute("SELECT id, name FROM people WHERE id >= ? ORDER BY id", (2,))
print(cur.fetchall())
cur.close()
cur = c.cursor()
cur.execute("SHOW VARIABLES LIKE 'sql_mode'")
print(cur.fetchall())
"#
    );
    let out = python(shim.port, &connector, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "[(2, \"Robert'); DROP TABLE people; --\"), (3, 'Zoë')]\n[('sql_mode', 'STRICT_TRANS_TABLES')]\n"
    );
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let tmp = TempDir::new("sigterm");
    let data = data_dir(&tmp);
    let mut shim = Shim::start(&data, None, &["--shutdown-grace", "5s"]);
    assert!(shim.log().contains("server-shim ready"), "{}", shim.log());
    assert!(shim.log().contains("startup_ms="), "{}", shim.log());
    let ok = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &[],
        "CREATE DATABASE s; USE s; CREATE TABLE t (a INT); INSERT INTO t VALUES (1)",
    );
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    // An idle connection must not hold the shutdown up.
    let _idle = raw::connect(shim.port).unwrap();
    let status = shim
        .child
        .signal_and_wait("TERM", Duration::from_secs(30))
        .expect("server-shim did not exit after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", shim.log());
    assert!(shim.log().contains("shutdown complete"), "{}", shim.log());
    let again = Shim::start(&data, None, &[]);
    let rows = mariadb(again.port, "app", Some(APP_PW), &["-Ds"], "SELECT a FROM t");
    assert_eq!(rows.stdout, "1\n", "{}", rows.stderr);
}

#[test]
fn field_list_reply_ends_with_a_short_eof_for_mariadb_tab_completion() {
    let tmp = TempDir::new("field-list");
    let shim = Shim::start(&data_dir(&tmp), None, &[]);
    let setup = mariadb(
        shim.port,
        "app",
        Some(APP_PW),
        &[],
        "CREATE DATABASE fl; USE fl; CREATE TABLE t (a INT)",
    );
    assert_eq!(setup.code, Some(0), "{}", setup.stderr);
    // A direct native login over a raw socket, then COM_FIELD_LIST as the CLI sends it after
    // `USE` (interactive mode, auto-rehash).
    let mut s = raw::connect(shim.port).unwrap();
    let (_, greeting) = raw::read_packet(&mut s).unwrap();
    let scramble = HandshakeV10::decode(&greeting).unwrap().scramble().unwrap();
    let login = HandshakeResponse41 {
        client_flag: CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_WITH_DB,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: b"app".to_vec(),
        auth_response: Zeroizing::new(native_password::token(APP_PW.as_bytes(), &scramble)),
        database: Some(b"fl".to_vec()),
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    raw::write_packet(&mut s, 1, &login.to_bytes()).unwrap();
    let (_, ok) = raw::read_packet(&mut s).unwrap();
    assert_eq!(ok.first(), Some(&0x00), "{:?}", raw::err_of(&ok));
    raw::write_packet(&mut s, 0, b"\x04t\0").unwrap();
    let (seq, eof) = raw::read_packet(&mut s).unwrap();
    assert_eq!(seq, 1);
    assert_eq!(eof.first(), Some(&0xFE));
    assert!(
        eof.len() < 8,
        "libmariadb needs an EOF shorter than 8 bytes: {eof:?}"
    );
    // The connection is still in step.
    let rows = raw::query(&mut s, "SELECT COUNT(*) FROM t")
        .unwrap()
        .unwrap();
    assert_eq!(rows, vec![Some("0".to_owned())]);
}

/// Resumption tickets on the wire (docs/protocol.md, "Resumable sessions"): a relayed login
/// that asks gets a ticket before its OK; the ticket reattaches the session once, and only
/// for its user, with the relay's key over the new connection's scramble; a ticket minted
/// with the relay's key, a replayed one, one for another user, one for another instance and
/// an expired one are each refused with the ERR 1045 of any refused login, the reason in
/// the shim's log.
#[test]
fn resumption_tickets_are_issued_and_redeemed_once_and_refused_otherwise() {
    use authplugin::{resume, ticket};
    let tmp = TempDir::new("tickets");
    let data = data_dir(&tmp);
    let key_file = tmp.path().join("perceptron.key");
    let relay_key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
    authplugin::key_file::append(&key_file, &relay_key).unwrap();
    let ticket_file = tmp.path().join("tickets.key");
    let ticket_key = PerceptronKey::generate(KeyId::new("t1").unwrap(), &mut rand::rngs::OsRng);
    authplugin::key_file::append(&ticket_file, &ticket_key).unwrap();
    let ticket_path = ticket_file.display().to_string();
    let shim = Shim::start(
        &data,
        Some(&key_file),
        &["--ticket-key-file", &ticket_path, "--instance", "demo"],
    );
    let addr = "10.9.8.7:40001";

    // A login that asks for a ticket: the ticket (AuthMoreData), then the OK.
    let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms());
    let (_s, first, _) = relayed_login(shim.port, "app", "", |b| {
        payload::encode_signed_with(
            &claim(APP_PW, &scramble_a),
            &relay_key,
            now_ms(),
            &Binding {
                scramble_b: b,
                user: b"app",
                database: b"",
            },
            Some(payload::FLAG_WANTS_TICKET),
        )
        .unwrap()
    });
    assert_eq!(first.first(), Some(&0x01), "{first:?}");
    let issued = first[1..].to_vec();
    assert!(issued.starts_with(&ticket::MAGIC));

    let resume = |user: &str, t: &[u8], key: &PerceptronKey| {
        let mut s = raw::connect(shim.port).unwrap();
        let (_, greeting) = raw::read_packet(&mut s).unwrap();
        let b = HandshakeV10::decode(&greeting).unwrap().scramble().unwrap();
        let binding = Binding {
            scramble_b: &b,
            user: user.as_bytes(),
            database: b"",
        };
        let p = resume::encode_signed(key, now_ms(), addr, t, &binding).unwrap();
        let response = HandshakeResponse41 {
            client_flag: CLIENT_LONG_PASSWORD
                | CLIENT_PROTOCOL_41
                | CLIENT_SECURE_CONNECTION
                | CLIENT_PLUGIN_AUTH
                | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: user.as_bytes().to_vec(),
            auth_response: Zeroizing::new(p),
            database: None,
            client_plugin_name: Some(PLUGIN_NAME.as_bytes().to_vec()),
            connect_attrs: None,
            zstd_compression_level: None,
        };
        raw::write_packet(&mut s, 1, &response.to_bytes()).unwrap();
        let (_, reply) = raw::read_packet(&mut s).unwrap();
        (s, reply)
    };

    // Another user's reattach with this ticket, and a ticket sealed with the relay's key
    // (which a relay holds, the compute's it does not), are refused; neither uses it up.
    assert_eq!(raw::err_of(&resume("root", &issued, &relay_key).1).0, 1045);
    let (_, claims) = ticket::decode(&issued).unwrap();
    let relay_minted = ticket::seal(&claims, &relay_key).unwrap();
    assert_denied(&resume("app", &relay_minted, &relay_key).1);
    let under_its_id = PerceptronKey::generate(KeyId::new("t1").unwrap(), &mut rand::rngs::OsRng);
    assert_denied(
        &resume(
            "app",
            &ticket::seal(&claims, &under_its_id).unwrap(),
            &relay_key,
        )
        .1,
    );
    let other = ticket::TicketClaims {
        instance: "other".into(),
        ..claims.clone()
    };
    assert_denied(
        &resume(
            "app",
            &ticket::seal(&other, &ticket_key).unwrap(),
            &relay_key,
        )
        .1,
    );
    let expired = ticket::TicketClaims {
        expires_ms: now_ms() - 1,
        ..claims
    };
    assert_denied(
        &resume(
            "app",
            &ticket::seal(&expired, &ticket_key).unwrap(),
            &relay_key,
        )
        .1,
    );

    // The reattach: the next ticket, then OK; the session runs as app from the client.
    let (mut s, reply) = resume("app", &issued, &relay_key);
    assert!(reply.starts_with(&[0x01]), "{reply:?}\n{}", shim.log());
    let (_, ok) = raw::read_packet(&mut s).unwrap();
    assert_eq!(ok.first(), Some(&0x00), "{ok:?}");
    let rows = raw::query(&mut s, "SELECT CURRENT_USER(), USER()")
        .unwrap()
        .unwrap();
    assert_eq!(rows.len(), 1);
    // Used once: the same ticket again is refused.
    assert_denied(&resume("app", &issued, &relay_key).1);
    let log = shim.log();
    for kind in [
        "ticket_wrong_user",
        "ticket_unknown_key_id",
        "ticket_bad_mac",
        "ticket_wrong_instance",
        "ticket_expired",
        "ticket_used",
    ] {
        assert!(log.contains(kind), "{kind}:\n{log}");
    }
}
