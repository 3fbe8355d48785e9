//! server-shim runs everyday MySQL: the statements a new user types first, the
//! metadata tools read, and a `mariadb-dump` of a shim database restored into another, all
//! through the stock `mariadb` CLI and `mariadb-dump` against a real `server-shim` process.
//!
//! Build the binary first: `cargo build -p server-shim && cargo test -p tests`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::process::Command;
use std::time::Duration;

use tests::{Shim, TempDir, mariadb, mariadb_script, ok, run_with_input, shim_with_admin};

const PW: &str = "root-secret-pw";

fn shim(tmp: &TempDir) -> Shim {
    shim_with_admin(tmp, "root", PW)
}

/// Runs the PyMySQL `script` (given the shim's port and root's password as `sys.argv[1]`
/// and `[2]`) within `timeout`; its output, once it has ended well.
fn pymysql_script(port: u16, script: &str, timeout: Duration) -> String {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, &port.to_string(), PW]);
    let out = run_with_input(&mut cmd, b"", timeout);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout
}

/// The first hour of a new user, as the issue found it failing on GlueSQL.
const SHOP: &str = "
CREATE DATABASE shop;
USE shop;
CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2));
INSERT INTO items VALUES (1, 'apple', 1.5), (2, 'Pear', 2), (3, 'fig', 0.25);
CREATE TABLE customers (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  email VARCHAR(100) NOT NULL,
  vip TINYINT(1) NOT NULL DEFAULT 0,
  tier ENUM('free', 'pro') NOT NULL DEFAULT 'free',
  created DATETIME DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
CREATE TABLE orders (
  id INT AUTO_INCREMENT PRIMARY KEY,
  customer_id BIGINT UNSIGNED NOT NULL REFERENCES customers (id),
  item_id INT NOT NULL,
  qty INT NOT NULL DEFAULT 1,
  KEY by_item (item_id)
);
CREATE INDEX items_by_name ON items (name);
INSERT INTO customers (email) VALUES ('a@example.com'), ('b@example.com');
INSERT INTO orders (customer_id, item_id, qty) VALUES (1, 1, 3), (2, 2, 1), (1, 3, 2);
";

#[test]
fn everyday_mysql_runs_unchanged() {
    let tmp = TempDir::new("shim-sql-everyday");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(port, "root", Some(PW), &[], SHOP));

    // Expressions before USE, qualified names, case-insensitive text comparison.
    assert_eq!(
        ok(&mariadb(port, "root", Some(PW), &[], "SELECT 41+1")).trim(),
        "42"
    );
    assert_eq!(
        ok(&mariadb(
            port,
            "root",
            Some(PW),
            &[],
            "SELECT id, name, price FROM shop.items WHERE name = 'APPLE'"
        )),
        "1\tapple\t1.50\n"
    );
    // Joins, aggregates, UNION, LIMIT a, b.
    let report = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SELECT c.email, SUM(o.qty), COUNT(DISTINCT i.id) FROM orders o \
         JOIN customers c ON c.id = o.customer_id JOIN items i ON i.id = o.item_id \
         GROUP BY c.email ORDER BY c.email",
    );
    assert_eq!(ok(&report), "a@example.com\t5\t2\nb@example.com\t1\t1\n");
    let union = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SELECT name FROM items WHERE id = 1 UNION SELECT email FROM customers ORDER BY 1 LIMIT 1, 2",
    );
    assert_eq!(ok(&union), "apple\nb@example.com\n");
    // AUTO_INCREMENT and LAST_INSERT_ID, ON DUPLICATE KEY UPDATE, REPLACE.
    let ids = mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "INSERT INTO customers (email) VALUES ('c@example.com'); SELECT LAST_INSERT_ID();
         INSERT INTO items VALUES (1, 'apple', 9.99) ON DUPLICATE KEY UPDATE price = VALUES(price);
         REPLACE INTO items VALUES (3, 'fig', 0.5);
         SELECT id, price FROM items ORDER BY id;",
    );
    assert_eq!(ok(&ids), "3\n1\t9.99\n2\t2.00\n3\t0.50\n");
    // ENUM refuses what it does not list; UNIQUE refuses a duplicate.
    let bad = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "INSERT INTO customers (email, tier) VALUES ('d@example.com', 'gold')",
    );
    assert_ne!(bad.code, Some(0), "an ENUM took a value outside its list");
    let dup = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "INSERT INTO customers (email) VALUES ('a@example.com')",
    );
    assert!(dup.stderr.contains("ERROR 1062"), "{}", dup.stderr);
}

/// Before: `SET SESSION sql_mode = ...` was accepted and `SELECT @@SESSION.sql_mode` still
/// answered `''`, `@@sql_auto_is_null` (Django's first query) was unknown (1193), and user
/// variables read as NULL.
#[test]
fn a_session_reads_back_the_variables_it_set() {
    let tmp = TempDir::new("shim-sql-variables");
    let shim = shim(&tmp);
    let set = mariadb_script(
        shim.port,
        "root",
        Some(PW),
        &[],
        "SET SESSION sql_mode = 'ANSI_QUOTES,STRICT_TRANS_TABLES', @@session.wait_timeout = 600;
         SELECT @@SESSION.sql_mode, @@wait_timeout, @@sql_auto_is_null;
         SET sql_mode = CONCAT(@@sql_mode, ',NO_ZERO_DATE');
         SELECT @@sql_mode;
         SET @old_checks = @@foreign_key_checks, foreign_key_checks = 0, @note = 'x';
         SELECT @@foreign_key_checks, @old_checks, @note, @never;
         SET foreign_key_checks = @old_checks;
         SELECT @@foreign_key_checks;",
    );
    // An expression the shim does not evaluate changes nothing; a dump's save and restore
    // of a variable through a user variable works.
    assert_eq!(
        ok(&set),
        "ANSI_QUOTES,STRICT_TRANS_TABLES\t600\t0\nANSI_QUOTES,STRICT_TRANS_TABLES\n\
         0\t1\tx\tNULL\n1\n"
    );
    // Another session starts from the defaults.
    let fresh = mariadb(
        shim.port,
        "root",
        Some(PW),
        &[],
        "SELECT @@sql_mode, @@wait_timeout",
    );
    assert_eq!(ok(&fresh), "STRICT_TRANS_TABLES\t28800\n");

    // Variables and the session's functions inside any statement: Django's first query
    // (1105 `unrecognized token: "@"` before), CONNECTION_ID() and USER() beside a table,
    // a user variable in a WHERE clause.
    let django = mariadb(
        shim.port,
        "root",
        Some(PW),
        &[],
        "SELECT VERSION(), @@sql_mode, @@default_storage_engine, @@sql_auto_is_null, \
         @@lower_case_table_names, CONVERT_TZ('2001-01-01 01:00:00', 'UTC', 'UTC') IS NOT NULL",
    );
    assert_eq!(
        ok(&django),
        "8.0.36-perceptron-shim\tSTRICT_TRANS_TABLES\tSQLite\t0\t0\t1\n"
    );
    ok(&mariadb_script(shim.port, "root", Some(PW), &[], SHOP));
    let session = mariadb_script(
        shim.port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SELECT CONNECTION_ID() > 0, USER() LIKE 'root@%', CURRENT_USER() FROM items LIMIT 1;
         SET @wanted = 2; SELECT name FROM items WHERE id = @wanted;
         SELECT CONVERT_TZ('2001-01-01 01:00:00', 'UTC', 'Europe/Paris');
         SELECT DATE_ADD('2020-01-31', INTERVAL 1 MONTH), NOW() + INTERVAL 1 DAY > NOW();",
    );
    assert_eq!(ok(&session), "1\t1\troot@%\nPear\nNULL\n2020-02-29\t1\n");
}

#[test]
fn metadata_answers_what_tools_read() {
    let tmp = TempDir::new("shim-sql-metadata");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(port, "root", Some(PW), &[], SHOP));
    let create = ok(&mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SHOW CREATE TABLE customers",
    ))
    .to_owned();
    for part in [
        "CREATE TABLE `customers`",
        "`email` varchar(100) NOT NULL",
        "PRIMARY KEY (`id`)",
        "UNIQUE KEY `email` (`email`)",
    ] {
        assert!(create.contains(part), "{part} missing from {create}");
    }
    // The same without a current database, the table qualified (mariadb-dump, Alembic):
    // before, `DESCRIBE shop.customers` looked for a table `shop` and the rest was 1046.
    let qualified = mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "SHOW CREATE TABLE shop.customers; DESCRIBE shop.customers;
         SHOW COLUMNS FROM customers FROM shop; SHOW INDEX FROM shop.customers;",
    );
    let qualified = ok(&qualified);
    assert!(qualified.starts_with(create.trim_end()), "{qualified}");
    assert_eq!(
        qualified.matches("email\tvarchar(100)\tNO\tUNI").count(),
        2,
        "{qualified}"
    );
    let index = ok(&mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SHOW INDEX FROM orders",
    ))
    .to_owned();
    assert!(index.contains("\tPRIMARY\t1\tid\t"), "{index}");
    assert!(index.contains("\tby_item\t1\titem_id\t"), "{index}");
    let status = ok(&mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SHOW TABLE STATUS LIKE 'cust%'",
    ))
    .to_owned();
    assert!(
        status.starts_with("customers\tInnoDB\t10\tDynamic\t") && status.lines().count() == 1,
        "{status}"
    );
    let full = ok(&mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SHOW FULL COLUMNS FROM customers",
    ))
    .to_owned();
    assert!(
        full.contains("email\tvarchar(100)\tutf8mb4_general_ci\tNO\tUNI\tNULL\t\t"),
        "{full}"
    );
    assert!(
        full.contains("id\tint(11)\tNULL\tNO\tPRI\tNULL\tauto_increment\t"),
        "{full}"
    );
    let columns = ok(&mariadb(
        port,
        "root",
        Some(PW),
        &[],
        "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_KEY FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = 'shop' AND TABLE_NAME = 'items' ORDER BY ORDINAL_POSITION",
    ))
    .to_owned();
    assert_eq!(
        columns,
        "items\tid\tint\tPRI\nitems\tname\tvarchar\tMUL\nitems\tprice\tdecimal\t\n"
    );
}

#[test]
fn mariadb_dump_restores_into_another_database() {
    let tmp = TempDir::new("shim-sql-dump");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(port, "root", Some(PW), &[], SHOP));
    // A child table whose name sorts before its parent's: the dump creates and fills it
    // first, so the restore needs the dump's FOREIGN_KEY_CHECKS=0.
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "CREATE TABLE addresses (id INT PRIMARY KEY, customer_id BIGINT UNSIGNED NOT NULL,
           FOREIGN KEY (customer_id) REFERENCES customers (id));
         INSERT INTO addresses VALUES (1, 2);",
    ));
    // The everyday options: one consistent snapshot (a transaction, a savepoint per table),
    // routines and events (none here).
    let mut dump = Command::new("mariadb-dump");
    dump.arg("-h127.0.0.1").arg(format!("-P{port}")).args([
        "-uroot",
        &format!("-p{PW}"),
        "--skip-ssl",
        "--single-transaction",
        "--routines",
        "--events",
        "shop",
    ]);
    let dumped = run_with_input(&mut dump, b"", Duration::from_secs(60));
    let text = ok(&dumped).to_owned();
    assert!(text.contains("INSERT INTO `items`"), "{text}");
    assert!(
        text.find("INSERT INTO `addresses`") < text.find("CREATE TABLE `customers`"),
        "{text}"
    );
    ok(&mariadb(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE copy",
    ));
    ok(&mariadb_script(port, "root", Some(PW), &["-Dcopy"], &text));
    for table in ["items", "customers", "orders", "addresses"] {
        let query = format!("SELECT * FROM {table} ORDER BY 1");
        let original = ok(&mariadb(port, "root", Some(PW), &["-Dshop"], &query)).to_owned();
        let restored = ok(&mariadb(port, "root", Some(PW), &["-Dcopy"], &query)).to_owned();
        assert_eq!(original, restored, "{table} differs after the restore");
        assert!(!original.is_empty());
    }
}

/// sysbench through libmysqlclient, whose later executions of a statement leave out the
/// parameters' types. Before: opensrv read those one byte early (server-shim's
/// `stream::execute_types`), so the run had no error but its point selects looked for other
/// ids and each delete-and-insert stored a row with an empty `c` and `c`'s text in `pad`;
/// with the columns' strict checks it failed with 1406.
#[test]
fn sysbench_oltp_read_write_prepares_and_runs_without_errors() {
    let tmp = TempDir::new("shim-sql-sysbench");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE sbtest",
    ));
    let sysbench =
        |phase: &str, extra: &[&str]| tests::sysbench_read_write(port, "root", PW, phase, extra);
    ok(&sysbench("prepare", &[]));
    // A fixed number of transactions, however fast the machine.
    let run = sysbench("run", &["--threads=2", "--events=200", "--time=0"]);
    let out = ok(&run);
    assert!(
        out.contains("transactions:                        200 "),
        "{out}"
    );
    assert!(
        out.contains("ignored errors:                      0 "),
        "{out}"
    );
    // Every row as sysbench writes it: `c` 119 characters, `pad` 59 (each delete of an id
    // is followed by an insert of the same id).
    let rows = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dsbtest"],
        "SELECT COUNT(*), SUM(LENGTH(c) = 119), SUM(LENGTH(pad) = 59) FROM sbtest1",
    );
    let counts: Vec<&str> = ok(&rows).split_whitespace().collect();
    assert!(
        counts.len() == 3 && counts.iter().all(|n| *n == counts[0]) && counts[0] != "0",
        "rows, rows with c as written, with pad as written: {counts:?}"
    );
}

/// Savepoints: SQLite's own inside a transaction; one set before the transaction touched a
/// database marks its start; outside a transaction there is none to go back to (1305).
#[test]
fn savepoints_roll_back_what_came_after_them() {
    let tmp = TempDir::new("shim-sql-savepoints");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(port, "root", Some(PW), &[], SHOP));
    let out = mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "START TRANSACTION; SAVEPOINT first;
         INSERT INTO items VALUES (10, 'kiwi', 1);
         SAVEPOINT second; INSERT INTO items VALUES (11, 'lime', 1);
         ROLLBACK TO SAVEPOINT second; RELEASE SAVEPOINT second; COMMIT;
         START TRANSACTION; SAVEPOINT s; INSERT INTO items VALUES (12, 'plum', 1);
         ROLLBACK TO s; COMMIT;
         SELECT id FROM items WHERE id >= 10;",
    );
    assert_eq!(ok(&out), "10\n");
    let outside = mariadb(
        port,
        "root",
        Some(PW),
        &["-Dshop"],
        "SAVEPOINT x; ROLLBACK TO SAVEPOINT x",
    );
    assert!(
        outside.stderr.contains("ERROR 1305")
            && outside.stderr.contains("SAVEPOINT x does not exist"),
        "{}",
        outside.stderr
    );
}

#[test]
fn a_database_dropped_and_created_again_is_seen_anew_from_other_databases() {
    let tmp = TempDir::new("shim-sql-reattach");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE shop; CREATE DATABASE crm;
         CREATE TABLE crm.t (id INT); INSERT INTO crm.t VALUES (1);",
    ));
    let read = || mariadb(port, "root", Some(PW), &["-Dshop"], "SELECT id FROM crm.t");
    assert_eq!(ok(&read()), "1\n");
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "DROP DATABASE crm; CREATE DATABASE crm;
         CREATE TABLE crm.t (id INT); INSERT INTO crm.t VALUES (2);",
    ));
    // shop's connection had the old crm attached; it must read the new one.
    assert_eq!(ok(&read()), "2\n");
}

#[test]
fn transactions_ddl_and_insert_ids_behave_like_mysql() {
    let tmp = TempDir::new("shim-sql-txn");
    let shim = shim(&tmp);
    let port = shim.port;
    // Without a database, writes are refused (they would land nowhere), not kept in memory.
    let nowhere = mariadb(port, "root", Some(PW), &[], "CREATE TABLE t (id INT)");
    assert!(nowhere.stderr.contains("ERROR 1046"), "{}", nowhere.stderr);
    ok(&mariadb(port, "root", Some(PW), &[], "CREATE DATABASE app"));
    // DDL commits, even with autocommit off; the rows after it are rolled back.
    let out = mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dapp"],
        "SET autocommit = 0;
         CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, body TEXT);
         INSERT INTO notes (body) VALUES ('see information_schema.tables');
         ROLLBACK;
         SELECT COUNT(*) FROM notes;",
    );
    assert_eq!(ok(&out), "0\n");
    // A multi-row INSERT's LAST_INSERT_ID is its first id, as in MySQL; a string that
    // mentions information_schema is just a string.
    let out = mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dapp"],
        "INSERT INTO notes (body) VALUES ('a'), ('see information_schema.tables'), ('c');
         SELECT LAST_INSERT_ID();
         SELECT body FROM notes WHERE id = 2;",
    );
    assert_eq!(ok(&out), "1\nsee information_schema.tables\n");
}

/// What migration tools emit after a table exists (Django's `auth` migrations, Alembic,
/// Rails): `ADD CONSTRAINT .. FOREIGN KEY`, `MODIFY`, `CHANGE`, `ALTER COLUMN .. SET|DROP
/// DEFAULT`, `ADD CHECK`. SQLite cannot do them in place: the shim rebuilds the table, and
/// its rows, indexes, `ON UPDATE` trigger and the new constraints all hold afterwards. A
/// foreign key the rows already break is refused (1452) and changes nothing.
#[test]
fn alter_table_changes_columns_and_adds_constraints() {
    let tmp = TempDir::new("shim-sql-alter");
    let shim = shim(&tmp);
    let port = shim.port;
    let run = |sql: &str| mariadb_script(port, "root", Some(PW), &["-Dapp"], sql);
    ok(&mariadb(port, "root", Some(PW), &[], "CREATE DATABASE app"));
    ok(&run(
        "CREATE TABLE groups_ (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL);
         CREATE TABLE members (
           id INT AUTO_INCREMENT PRIMARY KEY,
           group_id INT NOT NULL,
           nick VARCHAR(10) NOT NULL DEFAULT 'x',
           seen TIMESTAMP NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP,
           KEY by_nick (nick)
         );
         INSERT INTO groups_ (name) VALUES ('staff'), ('users');
         INSERT INTO members (group_id, nick) VALUES (1, 'ann'), (2, 'bob');",
    ));
    ok(&run(
        "ALTER TABLE members ADD CONSTRAINT members_group_fk FOREIGN KEY (group_id) REFERENCES groups_ (id);
         ALTER TABLE members MODIFY nick VARCHAR(40) NOT NULL;
         ALTER TABLE members CHANGE nick handle VARCHAR(40) NOT NULL;
         ALTER TABLE members ALTER COLUMN handle SET DEFAULT 'anon';
         ALTER TABLE members ADD CONSTRAINT positive CHECK (group_id > 0);",
    ));
    // The rows, the renamed column and its new default.
    let out = run("INSERT INTO members (group_id) VALUES (2);
         SELECT CONCAT(id, ':', group_id, ':', handle) FROM members ORDER BY id;");
    assert_eq!(ok(&out), "1:1:ann\n2:2:bob\n3:2:anon\n");
    let out = run("SHOW CREATE TABLE members");
    let create = ok(&out);
    for want in [
        "`handle` varchar(40) NOT NULL DEFAULT 'anon'",
        "FOREIGN KEY (`group_id`) REFERENCES `groups_` (`id`)",
        "KEY `by_nick` (`handle`)",
    ] {
        assert!(create.contains(want), "{want}\n{create}");
    }
    // The new foreign key and check hold.
    let refused = run("INSERT INTO members (group_id, handle) VALUES (9, 'eve')");
    assert!(refused.stderr.contains("ERROR 1452"), "{}", refused.stderr);
    // ... from the parent's side too: a referenced group cannot go (1451, as in MySQL).
    let refused = run("DELETE FROM groups_ WHERE id = 1");
    assert!(refused.stderr.contains("ERROR 1451"), "{}", refused.stderr);
    // MySQL says 3819; opensrv-mysql's error codes end before it (docs/server-shim.md).
    let refused = run("INSERT INTO members (group_id, handle) VALUES (0, 'eve')");
    assert!(
        refused.stderr.contains("ERROR 1265") && refused.stderr.contains("positive"),
        "{}",
        refused.stderr
    );
    // The ON UPDATE trigger survived: an update of another column stamps `seen`.
    let out = run("UPDATE members SET handle = 'annie' WHERE id = 1;
         SELECT seen IS NOT NULL FROM members WHERE id = 1;");
    assert_eq!(ok(&out), "1\n");
    // DROP DEFAULT: a NOT NULL column without a default needs a value again.
    ok(&run("ALTER TABLE members ALTER COLUMN handle DROP DEFAULT"));
    let refused = run("INSERT INTO members (group_id) VALUES (1)");
    assert!(
        refused.stderr.contains("ERROR 1364") || refused.stderr.contains("ERROR 1048"),
        "{}",
        refused.stderr
    );
    // A foreign key the rows break: refused, and the table is as it was.
    ok(&run(
        "CREATE TABLE notes (id INT PRIMARY KEY, member INT); INSERT INTO notes VALUES (1, 77);",
    ));
    let refused = run("ALTER TABLE notes ADD FOREIGN KEY (member) REFERENCES members (id)");
    assert!(refused.stderr.contains("ERROR 1452"), "{}", refused.stderr);
    let out = run("SHOW CREATE TABLE notes");
    let create = ok(&out);
    assert!(!create.contains("FOREIGN KEY"), "{create}");
    assert_eq!(ok(&run("SELECT member FROM notes")), "77\n");
    // A column the table does not have.
    let refused = run("ALTER TABLE notes MODIFY nope INT");
    assert!(refused.stderr.contains("ERROR 1054"), "{}", refused.stderr);
}

/// Aggregates of a column are typed after it, as MySQL types them: `SUM` of a
/// `DECIMAL(10,2)` prints two decimals, `AVG` six, `MIN`/`MAX` of a `DATETIME` are date-times
/// (Go's driver scans them into a time), and a date stored alone in a `DATETIME` reads as its
/// midnight.
#[test]
fn aggregates_keep_their_columns_types() {
    let tmp = TempDir::new("shim-sql-aggregates");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb(port, "root", Some(PW), &[], "CREATE DATABASE app"));
    let out = mariadb_script(
        port,
        "root",
        Some(PW),
        &["-Dapp"],
        "CREATE TABLE d (x DECIMAL(10,2), n INT, t DATETIME);
         INSERT INTO d VALUES (5, 1, '2020-01-01 10:00:00'), (8.5, 2, '2021-01-01');
         SELECT SUM(x), AVG(x), MIN(x), MAX(d.t), MIN(t), AVG(n), SUM(n) AS total FROM d;
         SELECT t FROM d ORDER BY t DESC LIMIT 1;",
    );
    assert_eq!(
        ok(&out),
        "13.50\t6.750000\t5.00\t2021-01-01 00:00:00\t2020-01-01 10:00:00\t1.5000\t3\n\
         2021-01-01 00:00:00\n"
    );
}

/// Runs `body` (Python) with `a` and `b`, two cursors of two PyMySQL sessions on database
/// `app` as root (autocommit, a 20 s read timeout); what it printed.
fn two_sessions(port: u16, body: &str) -> String {
    let code = format!(
        r#"
import os, pymysql
def connect():
    return pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="root",
                           password={PW:?}, database="app", autocommit=True,
                           read_timeout=20)
a, b = connect().cursor(), connect().cursor()
{body}"#
    );
    ok(&tests::python(port, &code, Duration::from_secs(60))).to_owned()
}

/// `FOUND_ROWS()` and `ROW_COUNT()` are each session's own, as in MySQL, though every
/// session of a database runs its statements on one engine connection: two sessions
/// interleaved each read back their own last statement's.
#[test]
fn found_rows_and_row_count_are_per_session() {
    let tmp = TempDir::new("shim-sql-counts");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE app; USE app;
         CREATE TABLE t (id INT PRIMARY KEY, x INT);
         INSERT INTO t VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0);",
    ));
    let out = two_sessions(
        port,
        r#"a.execute("SELECT * FROM t WHERE id <= 3")
b.execute("SELECT * FROM t")
a.execute("SELECT FOUND_ROWS()"); fa = a.fetchone()[0]
b.execute("SELECT FOUND_ROWS()"); fb = b.fetchone()[0]
a.execute("UPDATE t SET x = 1 WHERE id <= 2")
b.execute("DELETE FROM t WHERE id = 5")
a.execute("SELECT ROW_COUNT()"); ra = a.fetchone()[0]
b.execute("SELECT ROW_COUNT()"); rb = b.fetchone()[0]
print(fa, fb, ra, rb)
"#,
    );
    assert_eq!(out, "3 5 2 1\n");
}

/// A plain read outside a transaction does not wait for another session's open transaction:
/// it sees what was committed (as InnoDB's consistent read does), and the other session's
/// rows once it commits. Reads of a session inside its own transaction see its own writes.
#[test]
fn reads_do_not_wait_for_another_sessions_transaction() {
    let tmp = TempDir::new("shim-sql-readers");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE app; USE app; CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1);",
    ));
    let out = two_sessions(
        port,
        r#"a.execute("BEGIN")
a.execute("INSERT INTO t VALUES (2)")
a.execute("SELECT COUNT(*) FROM t"); own = a.fetchone()[0]
b.execute("SELECT COUNT(*) FROM t"); before = b.fetchone()[0]
a.execute("COMMIT")
b.execute("SELECT COUNT(*) FROM t"); after = b.fetchone()[0]
print(own, before, after)
"#,
    );
    assert_eq!(out, "2 1 2\n");
}

/// A transaction's reads before its first write take no lock, and see one snapshot, the
/// first read's, as InnoDB's consistent reads in a `REPEATABLE READ` transaction do: another
/// session's transaction writes and commits meanwhile, unseen. The first write takes the
/// lock and sees the database as it is then (InnoDB's writes read the latest rows too); a
/// locking read (`FOR UPDATE`) waits for the lock as a write does.
#[test]
fn a_transactions_reads_see_one_snapshot_until_it_writes() {
    let tmp = TempDir::new("shim-sql-snapshot");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb_script(
        port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE app; USE app; CREATE TABLE t (id INT PRIMARY KEY, x INT);
         INSERT INTO t VALUES (1, 10);",
    ));
    let out = two_sessions(
        port,
        r#"a.execute("BEGIN")
a.execute("SELECT x FROM t WHERE id = 1"); first = a.fetchone()[0]
b.execute("BEGIN")
b.execute("UPDATE t SET x = 20 WHERE id = 1")
b.execute("INSERT INTO t VALUES (2, 0)")
b.execute("COMMIT")
a.execute("SELECT x FROM t WHERE id = 1"); again = a.fetchone()[0]
a.execute("SELECT COUNT(*) FROM t"); rows = a.fetchone()[0]
a.execute("UPDATE t SET x = x + 1 WHERE id = 1")
a.execute("SELECT x FROM t WHERE id = 1"); written = a.fetchone()[0]
b.execute("BEGIN")
b.execute("SELECT x FROM t WHERE id = 1"); other = b.fetchone()[0]
a.execute("COMMIT")
b.execute("SELECT x FROM t WHERE id = 1 AND 'for update' <> ''"); still = b.fetchone()[0]
b.execute("SELECT x FROM t WHERE id = 1 FOR UPDATE"); locked = b.fetchone()[0]
b.execute("COMMIT")
print(first, again, rows, written, other, still, locked)
"#,
    );
    // `still`: the words in a string lock nothing, the snapshot goes on.
    assert_eq!(out, "10 10 1 21 20 20 21\n");
    // Two transactions idle after a read leave plain reads, `information_schema` and
    // `SHOW CREATE TABLE` free; `SERIALIZABLE` transactions take the lock at their read,
    // so a read-then-write in two of them loses no update.
    let out = two_sessions(
        port,
        r#"a.execute("BEGIN"); a.execute("SELECT COUNT(*) FROM t")
b.execute("BEGIN"); b.execute("SELECT COUNT(*) FROM t")
import pymysql
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user="root",
                    password=a.connection.password, database="app", autocommit=True,
                    read_timeout=20).cursor()
c.execute("SELECT COUNT(*) FROM t"); plain = c.fetchone()[0]
c.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app'")
tables = c.fetchone()[0]
c.execute("SHOW CREATE TABLE t"); shown = c.fetchone()[1].startswith("CREATE TABLE")
a.execute("COMMIT"); b.execute("COMMIT")
# Nor does a transaction that has written keep SHOW waiting (mariadb-dump's first step).
a.execute("BEGIN"); a.execute("INSERT INTO t VALUES (3, 0)")
c.execute("SHOW TABLES"); shown = shown and c.fetchall() == (("t",),)
a.execute("ROLLBACK")
a.execute("SET SESSION transaction_isolation = 'SERIALIZABLE'")
b.execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
def add_five(s):
    s.execute("BEGIN"); s.execute("SELECT x FROM t WHERE id = 1"); seen = s.fetchone()[0]
    s.execute("UPDATE t SET x = %s WHERE id = 1", (seen + 5,)); s.execute("COMMIT")
import threading
a.execute("BEGIN"); a.execute("SELECT x FROM t WHERE id = 1"); seen = a.fetchone()[0]
other = threading.Thread(target=add_five, args=(b,)); other.start()
a.execute("UPDATE t SET x = %s WHERE id = 1", (seen + 5,)); a.execute("COMMIT")
other.join()
c.execute("SELECT x FROM t WHERE id = 1")
print(plain, tables, shown, c.fetchone()[0])
"#,
    );
    assert_eq!(out, "2 1 True 31\n");
}

/// A read connection whose schema changed under it (another connection ran `ALTER TABLE`)
/// answers `SELECT *` with the table's columns as they are now.
#[test]
fn a_read_after_alter_table_sees_the_new_columns() {
    let tmp = TempDir::new("shim-sql-read-after-alter");
    let shim = shim(&tmp);
    let run = |sql: &str| mariadb_script(shim.port, "root", Some(PW), &[], sql);
    ok(&run(
        "CREATE DATABASE shop; USE shop; CREATE TABLE items (id INT PRIMARY KEY, name TEXT);
         INSERT INTO items VALUES (1, 'apple');",
    ));
    let read = || run("USE shop; SELECT * FROM items");
    assert_eq!(ok(&read()), "1\tapple\n");
    ok(&run(
        "USE shop; ALTER TABLE items ADD COLUMN qty INT NOT NULL DEFAULT 3",
    ));
    assert_eq!(ok(&read()), "1\tapple\t3\n");
}

/// `SHOW [FULL] PROCESSLIST` lists the connections as MySQL 8 does: each one's id, user,
/// host, database, whether it runs a statement and which (its first 100 characters unless
/// `FULL`); an admin sees all of them, another account its own. Before: 1235.
#[test]
fn show_processlist_lists_the_connections_a_user_may_see() {
    let tmp = TempDir::new("shim-processlist");
    let data = tmp.path().join("data");
    tests::add_user(&data, "root", PW, true);
    tests::add_user(&data, "app", "app-secret-pw", false);
    let shim = Shim::start(&data, None, &[]);
    let script = r#"
import sys, threading, pymysql
port, pw = int(sys.argv[1]), sys.argv[2]
def connect(user, password, **kw):
    return pymysql.connect(host="127.0.0.1", port=port, user=user, password=password,
                           autocommit=True, **kw)
root, app = connect("root", pw), connect("app", "app-secret-pw")
root.cursor().execute("CREATE DATABASE p")
app.cursor().execute("USE p")
sleeper = connect("root", pw)
asleep = threading.Thread(target=lambda: sleeper.cursor().execute(
    "SELECT SLEEP(600) /* " + "x" * 120 + " */"))
asleep.start()
cur = root.cursor()
# Until the sleep has begun: a process list is a state to wait for, not a time.
while True:
    cur.execute("SHOW PROCESSLIST")
    rows = cur.fetchall()
    if any(r[7] and r[7].startswith("SELECT SLEEP") for r in rows):
        break
print([d[0] for d in cur.description])
ids = {"root": root.thread_id(), "app": app.thread_id(), "sleeper": sleeper.thread_id()}
for name, id in sorted(ids.items()):
    row = [r for r in rows if r[0] == id][0]
    print(name, row[1:5], len(row[7] or ""))
cur.execute("SHOW FULL PROCESSLIST")
print("full", max(len(r[7] or "") for r in cur.fetchall()))
a = app.cursor()
a.execute("SHOW PROCESSLIST")
print("app sees", [r[1] for r in a.fetchall()])
cur.execute("KILL QUERY %d" % ids["sleeper"])
asleep.join()
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(120)),
        "['Id', 'User', 'Host', 'db', 'Command', 'Time', 'State', 'Info']\n\
         app ('app', '127.0.0.1', 'p', 'Sleep') 0\n\
         root ('root', '127.0.0.1', None, 'Query') 16\n\
         sleeper ('root', '127.0.0.1', None, 'Query') 100\n\
         full 144\n\
         app sees ['app']\n"
    );
}

/// `KILL QUERY id` ends another connection's running statement (it gets ERR 1317 and goes
/// on); `KILL id` ends the connection. Only the connection's own user or an admin may (1095),
/// an unknown id is 1094, and a connection that kills itself gets 1317 and is closed.
#[test]
fn kill_ends_a_statement_or_a_connection_for_its_owner_or_an_admin() {
    let tmp = TempDir::new("shim-kill");
    let data = tmp.path().join("data");
    tests::add_user(&data, "root", PW, true);
    tests::add_user(&data, "app", "app-secret-pw", false);
    tests::add_user(&data, "other", "other-secret-pw", false);
    let shim = Shim::start(&data, None, &[]);
    let login = |user: &str, pw: &str| {
        tests::raw::login(shim.port, user, pw, None)
            .unwrap()
            .unwrap_or_else(|e| panic!("{user}: {e:?}"))
    };
    let (mut root, mut app, mut other) = (
        login("root", PW),
        login("app", "app-secret-pw"),
        login("other", "other-secret-pw"),
    );
    let query = |s: &mut std::net::TcpStream, sql: &str| tests::raw::query(s, sql).unwrap();
    assert!(query(&mut root, "CREATE DATABASE k").is_ok());
    assert!(query(&mut app, "USE k").is_ok());
    let id = tests::raw::one_row(&mut app, "SELECT CONNECTION_ID()").unwrap();
    assert_eq!(
        query(&mut root, "KILL QUERY 4000000000"),
        Err((1094, "Unknown thread id: 4000000000".into()))
    );

    // A statement that would run for minutes.
    let payload = b"\x03WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n \
        WHERE x < 2000000000) SELECT count(*) FROM n";
    tests::raw::write_packet(&mut app, 0, payload).unwrap();
    assert_eq!(
        query(&mut other, &format!("KILL QUERY {id}")),
        Err((1095, format!("You are not owner of thread {id}")))
    );
    // Asked again until the statement has started and the answer comes.
    app.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = std::time::Instant::now() + tests::scaled(Duration::from_secs(30));
    loop {
        assert_eq!(
            query(&mut root, &format!("KILL QUERY {id}")),
            Ok(Vec::new())
        );
        if app.peek(&mut [0]).is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the statement went on"
        );
    }
    app.set_read_timeout(Some(tests::scaled(tests::IO_TIMEOUT)))
        .unwrap();
    let (_, err) = tests::raw::read_packet(&mut app).unwrap();
    assert_eq!(
        tests::raw::err_of(&err),
        (1317, "Query execution was interrupted".into())
    );
    // The connection goes on, in its database.
    assert_eq!(
        tests::raw::one_row(&mut app, "SELECT DATABASE()").as_deref(),
        Some("k")
    );

    // Its own user ends it.
    let mut app2 = login("app", "app-secret-pw");
    assert_eq!(query(&mut app2, &format!("KILL {id}")), Ok(Vec::new()));
    tests::raw::assert_connection_ended(&mut app);
    // Killing itself: 1317, then the close.
    let own = tests::raw::one_row(&mut app2, "SELECT CONNECTION_ID()").unwrap();
    assert_eq!(
        query(&mut app2, &format!("KILL CONNECTION {own}")),
        Err((1317, "Query execution was interrupted".into()))
    );
    tests::raw::assert_connection_ended(&mut app2);
    // Gone from the process list once its task has ended (a moment after the close).
    let deadline = std::time::Instant::now() + tests::scaled(Duration::from_secs(10));
    let gone = Err((1094, format!("Unknown thread id: {own}")));
    while query(&mut root, &format!("KILL {own}")) != gone {
        assert!(std::time::Instant::now() < deadline, "{own} still listed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--log-failed-statements N`: a failed statement is logged with its error and its first N
/// characters, so a tool that swallows the error (drizzle-kit) leaves something to go on;
/// without it, the log has the code only (statement text can hold a password).
#[test]
fn failed_statements_are_logged_with_their_text_only_when_asked() {
    let tmp = TempDir::new("shim-sql-failed-log");
    let data = tmp.path().join("data");
    tests::add_user(&data, "root", PW, true);
    let failing = "SELECT secret_column FROM no_such_table";
    for (extra, logged) in [
        (&[][..], false),
        (&["--log-failed-statements", "20"][..], true),
    ] {
        let shim = Shim::start(&data, None, extra);
        let out = mariadb(
            shim.port,
            "root",
            Some(PW),
            &[],
            &format!("CREATE DATABASE IF NOT EXISTS d; USE d; {failing}"),
        );
        assert_ne!(out.code, Some(0));
        let log = shim.log();
        assert_eq!(log.contains("SELECT secret_column"), logged, "{log}");
        if logged {
            assert!(
                log.contains("statement=SELECT secret_column") && !log.contains(failing),
                "{log}"
            );
            assert!(
                log.contains("no_such_table"),
                "the error names the table: {log}"
            );
        }
    }
}

/// `ALTER TABLE ... DROP FOREIGN KEY`, by its declared name or the name InnoDB gives an
/// unnamed one (`<table>_ibfk_<n>`, what `SHOW CREATE TABLE` and `information_schema` show):
/// the table is rebuilt without it (a migration that changes a foreign key drops it first:
/// Django's, TypeORM's). A key the table does not have: ERR 1091.
#[test]
fn a_foreign_key_is_dropped_by_its_name() {
    let tmp = TempDir::new("shim-sql-drop-fk");
    let shim = shim(&tmp);
    let sql = |s: &str| mariadb(shim.port, "root", Some(PW), &["-N"], s);
    ok(&sql(
        "CREATE DATABASE d; USE d; CREATE TABLE p (id INT PRIMARY KEY); \
         CREATE TABLE c (id INT PRIMARY KEY, a INT, b INT, \
         CONSTRAINT fk_a FOREIGN KEY (a) REFERENCES p (id), FOREIGN KEY (b) REFERENCES p (id)); \
         INSERT INTO p VALUES (1)",
    ));
    ok(&sql(
        "USE d; ALTER TABLE c DROP FOREIGN KEY fk_a; INSERT INTO c VALUES (1, 99, 1)",
    ));
    let orphan = sql("USE d; INSERT INTO c VALUES (2, 1, 99)");
    assert!(
        orphan.stderr.contains("ERROR 1452"),
        "the other key holds: {orphan:?}"
    );
    ok(&sql(
        "USE d; ALTER TABLE c DROP FOREIGN KEY c_ibfk_1; INSERT INTO c VALUES (2, 1, 99)",
    ));
    let create = ok(&sql("USE d; SHOW CREATE TABLE c")).to_owned();
    assert!(!create.contains("FOREIGN KEY"), "{create}");
    let gone = sql("USE d; ALTER TABLE c DROP FOREIGN KEY fk_a");
    assert!(
        gone.stderr.contains(
            "ERROR 1091 (42000) at line 1: Can't DROP FOREIGN KEY `fk_a`; check that it exists"
        ),
        "{gone:?}"
    );
}

/// A column dropped from a table with `ON UPDATE CURRENT_TIMESTAMP` columns (TypeORM's
/// `@UpdateDateColumn`, Django's `auto_now`): the triggers behind them are made again over
/// the columns left, and still set the time on update. Before: SQLite refused the drop
/// ("error in trigger ... no such column").
#[test]
fn a_column_is_dropped_beside_an_on_update_timestamp() {
    let tmp = TempDir::new("shim-sql-drop-column");
    let shim = shim(&tmp);
    let sql = |s: &str| mariadb(shim.port, "root", Some(PW), &["-N"], s);
    ok(&sql(
        "CREATE DATABASE d; USE d; CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, \
         u DATETIME NOT NULL DEFAULT '2000-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP); \
         INSERT INTO t (id, a, b) VALUES (1, 1, 1)",
    ));
    ok(&sql("USE d; ALTER TABLE t DROP COLUMN a"));
    ok(&sql("USE d; UPDATE t SET b = 2 WHERE id = 1"));
    let out = ok(&sql("USE d; SELECT b, u > '2001-01-01' FROM t")).to_owned();
    assert_eq!(out.trim(), "2\t1", "the trigger still sets the time");
    ok(&sql(
        "USE d; ALTER TABLE t DROP COLUMN u; UPDATE t SET b = 3",
    ));
    // A table whose name holds another's: only its own triggers are made again.
    ok(&sql("USE d; CREATE TABLE p (id INT PRIMARY KEY, a INT, \
         u DATETIME NOT NULL DEFAULT '2000-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP); \
         CREATE TABLE xp (id INT PRIMARY KEY, a INT, \
         u DATETIME NOT NULL DEFAULT '2000-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP); \
         INSERT INTO p (id, a) VALUES (1, 1); ALTER TABLE xp DROP COLUMN a; \
         UPDATE p SET a = 2"));
    let out = ok(&sql("USE d; SELECT u > '2001-01-01' FROM p")).to_owned();
    assert_eq!(out.trim(), "1", "p's trigger is untouched");
}

/// `DECIMAL` values are stored at their scale, as MySQL stores them, whatever writes them and
/// however the table changes: a sum of three `1.005` in a `DECIMAL(10,2)` is `3.03`, they
/// equal `1.01`, and an `ON UPDATE` column's time is set only by a change the rounding leaves.
/// Before: the doubles were kept (`SUM` 3.02, `= 1.01` false).
#[test]
fn decimal_values_are_stored_at_their_scale() {
    let tmp = TempDir::new("shim-sql-decimal");
    let shim = shim(&tmp);
    let sql = |s: &str| mariadb(shim.port, "root", Some(PW), &["-N"], s);
    ok(&sql(
        "CREATE DATABASE d; USE d; CREATE TABLE t (id INT PRIMARY KEY, p DECIMAL(10,2), n INT, \
         u DATETIME NOT NULL DEFAULT '2000-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP); \
         INSERT INTO t (id, p, u) VALUES (1, 1.005, '2001-01-01 00:00:00'), (2, 1.005, \
         '2001-01-01 00:00:00'), (3, 1.005, '2001-01-01 00:00:00')",
    ));
    let out = ok(&sql("USE d; SELECT SUM(p), COUNT(*) FROM t WHERE p = 1.01")).to_owned();
    assert_eq!(out.trim(), "3.03\t3");
    // The rounding is not a change of the row: the insert's own time stays.
    let out = ok(&sql(
        "USE d; SELECT COUNT(*) FROM t WHERE u = '2001-01-01 00:00:00'",
    ))
    .to_owned();
    assert_eq!(out.trim(), "3");
    // Nor is an update to a value the column already holds once rounded; another is.
    ok(&sql(
        "USE d; UPDATE t SET p = 1.012 WHERE id = 1; UPDATE t SET p = 0.1 + 0.2 WHERE id = 2",
    ));
    let out = ok(&sql(
        "USE d; SELECT id, p, p * 3, u > '2002-01-01' FROM t ORDER BY id",
    ))
    .to_owned();
    assert_eq!(
        out,
        "1\t1.01\t3.03\t0\n2\t0.30\t0.90\t1\n3\t1.01\t3.03\t0\n"
    );
    // A narrower scale rounds what is stored; a dropped column leaves the rounding in place.
    ok(&sql(
        "USE d; ALTER TABLE t MODIFY p DECIMAL(10,1); ALTER TABLE t DROP COLUMN n; \
         INSERT INTO t (id, p) VALUES (4, 2.25)",
    ));
    let out = ok(&sql("USE d; SELECT SUM(p), MAX(p) FROM t")).to_owned();
    assert_eq!(out.trim(), "4.6\t2.3");
    let out = ok(&sql("USE d; SHOW CREATE TABLE t")).to_owned();
    assert!(
        out.contains(
            "`u` datetime NOT NULL DEFAULT '2000-01-01 00:00:00' ON UPDATE current_timestamp()"
        ),
        "{out}"
    );
}

/// A `FLOAT` holds a 4-byte float and is written with 6 significant digits, as MariaDB's:
/// `g * 2` of `14.96` is `29.920000076293945`, `g = 14.96` false, `1234567.89` shows as
/// `1234570`, and PyMySQL-style clients get MySQL's FLOAT type. Before: a double (`29.92`,
/// true, `1234567.89`). And `INSERT IGNORE` skips a row whose key is taken but refuses one
/// whose value its column cannot hold; before, such a row was dropped without a word.
#[test]
fn float_columns_hold_four_byte_floats_and_insert_ignore_loses_no_row() {
    let tmp = TempDir::new("shim-sql-float");
    let shim = shim(&tmp);
    let sql = |s: &str| mariadb(shim.port, "root", Some(PW), &["-N"], s);
    ok(&sql(
        "CREATE DATABASE d; USE d; CREATE TABLE t (id INT PRIMARY KEY, g FLOAT, h FLOAT(7,2), \
         k FLOAT UNSIGNED); INSERT INTO t VALUES (1, 14.96, 14.966, 1), (2, 1234567.89, 2, 2)",
    ));
    let out = ok(&sql(
        "USE d; SELECT id, g, g * 2, g = 14.96, h FROM t ORDER BY id",
    ))
    .to_owned();
    assert_eq!(
        out,
        "1\t14.96\t29.920000076293945\t0\t14.97\n2\t1234570\t2469135.75\t0\t2.00\n"
    );
    for (insert, code) in [
        ("INSERT INTO t (id, k) VALUES (3, -1)", "1264"),
        ("INSERT INTO t (id, g) VALUES (3, 3.5e38)", "1264"),
        ("INSERT IGNORE INTO t (id, k) VALUES (3, -1)", "1264"),
    ] {
        let refused = sql(&format!("USE d; {insert}"));
        assert!(
            refused.stderr.contains(&format!("ERROR {code}")),
            "{insert}: {refused:?}"
        );
    }
    ok(&sql(
        "USE d; INSERT IGNORE INTO t (id, g) VALUES (1, 5), (3, 6)",
    ));
    let out = ok(&sql("USE d; SELECT id, g FROM t ORDER BY id")).to_owned();
    assert_eq!(out, "1\t14.96\n2\t1234570\n3\t6\n");
}

/// `information_schema` is read as a plain read is: while another session holds a write
/// transaction, a relay's state read of an idle session (`information_schema.
/// SYSTEM_VARIABLES`) and an ORM's introspection (`TABLES`) are answered at once. Before: they
/// waited for the lock (the relay then closed the idle session when its read timed out).
#[test]
fn information_schema_does_not_wait_for_another_sessions_transaction() {
    use tests::raw;
    let tmp = TempDir::new("shim-sql-is-lock");
    let shim = shim(&tmp);
    ok(&mariadb(
        shim.port,
        "root",
        Some(PW),
        &[],
        "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)",
    ));
    let mut writer = raw::login(shim.port, "root", PW, Some("d"))
        .unwrap()
        .unwrap();
    raw::query(&mut writer, "BEGIN").unwrap().unwrap();
    raw::query(&mut writer, "INSERT INTO t VALUES (1)")
        .unwrap()
        .unwrap();
    let mut reader = raw::login(shim.port, "root", PW, Some("d"))
        .unwrap()
        .unwrap();
    for read in [
        "SELECT COUNT(*) FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = 'autocommit'",
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'd'",
    ] {
        assert_eq!(
            raw::query(&mut reader, read).unwrap(),
            Ok(vec![Some("1".to_owned())]),
            "{read}"
        );
    }
    // The writer's transaction was open all along, and is its own to commit.
    raw::query(&mut writer, "COMMIT").unwrap().unwrap();
    assert_eq!(
        raw::query(&mut reader, "SELECT COUNT(*) FROM t").unwrap(),
        Ok(vec![Some("1".to_owned())])
    );
}

/// `SLEEP` waits, as `docs/parking.md`'s example needs, without holding up other sessions, and
/// `KILL QUERY` ends it with 1317, with a database chosen (a read the shim would run on its
/// async runtime's thread) and without (the session's scratch database). Before: 1235, no
/// such function.
#[test]
fn sleep_waits_and_kill_query_ends_it() {
    use tests::raw;
    let tmp = TempDir::new("shim-sql-sleep");
    let shim = shim(&tmp);
    let port = shim.port;
    ok(&mariadb(port, "root", Some(PW), &[], "CREATE DATABASE nap"));
    assert_eq!(
        ok(&mariadb(
            port,
            "root",
            Some(PW),
            &[],
            "SELECT SLEEP(0.05), SLEEP(NULL), SLEEP(-1)"
        )),
        "0\t0\t0\n"
    );
    for database in [Some("nap"), None] {
        let mut sleeper = raw::login(port, "root", PW, database).unwrap().unwrap();
        let id = raw::one_row(&mut sleeper, "SELECT CONNECTION_ID()").unwrap();
        let asleep = std::thread::spawn(move || raw::query(&mut sleeper, "SELECT SLEEP(600)"));
        // Another session's read is answered while the sleep goes on.
        let mut other = raw::login(port, "root", PW, Some("nap")).unwrap().unwrap();
        assert_eq!(
            raw::query(&mut other, "SELECT 41 + 1").unwrap(),
            Ok(vec![Some("42".to_owned())])
        );
        assert!(!asleep.is_finished());
        // KILL QUERY before the statement starts kills nothing: again until it ends.
        let ended = tests::relay::Relay::wait_until(Duration::from_secs(60), || {
            if asleep.is_finished() {
                return true;
            }
            // Unknown (1094) once the killed statement's connection has gone.
            let killed = raw::query(&mut other, &format!("KILL QUERY {id}")).unwrap();
            assert!(
                matches!(killed, Ok(_) | Err((1094, _))),
                "{database:?}: {killed:?}"
            );
            false
        });
        assert!(ended, "{database:?}: KILL QUERY did not end the SLEEP");
        let (code, message) = asleep.join().unwrap().unwrap().unwrap_err();
        assert_eq!(code, 1317, "{database:?}: {message}");
    }
}

/// A write killed inside a transaction: SQLite rolls the whole transaction back (InnoDB
/// would undo the statement alone), so the client is told with 1213, as after InnoDB's
/// deadlock, and the session's transaction is over. Before: 1317, and the session went on as
/// if its transaction were open while its next statements committed on their own (a later
/// ROLLBACK said "no transaction is active").
#[test]
fn a_write_killed_in_a_transaction_says_the_transaction_was_rolled_back() {
    let tmp = TempDir::new("shim-sql-killed-write");
    let shim = shim(&tmp);
    let port = shim.port;
    let mut a = tests::raw::login(port, "root", PW, None).unwrap().unwrap();
    let mut b = tests::raw::login(port, "root", PW, None).unwrap().unwrap();
    for sql in [
        "CREATE DATABASE kt",
        "USE kt",
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 0)",
        "BEGIN",
        "INSERT INTO t VALUES (2, 0)",
    ] {
        assert!(matches!(tests::raw::query(&mut a, sql), Ok(Ok(_))), "{sql}");
    }
    let id = tests::raw::one_row(&mut a, "SELECT CONNECTION_ID()").unwrap();
    let writing = std::thread::spawn(move || {
        let r = tests::raw::query(&mut a, "UPDATE t SET v = SLEEP(600) WHERE id = 1");
        (a, r)
    });
    let ended = tests::relay::Relay::wait_until(Duration::from_secs(60), || {
        if writing.is_finished() {
            return true;
        }
        let _ = tests::raw::query(&mut b, &format!("KILL QUERY {id}"));
        false
    });
    assert!(ended, "KILL QUERY did not end the UPDATE");
    let (mut a, killed) = writing.join().unwrap();
    let (code, message) = killed.unwrap().unwrap_err();
    assert_eq!(code, 1213, "{message}");
    assert!(matches!(tests::raw::query(&mut a, "ROLLBACK"), Ok(Ok(_))));
    assert_eq!(
        tests::raw::query(&mut a, "SELECT id FROM t ORDER BY id").unwrap(),
        Ok(vec![Some("1".to_owned())])
    );
}

/// An `INSERT` whose rows leave different columns to their defaults (Drizzle's batch
/// insert, where one row sets a column another leaves out) runs as MySQL runs it: one
/// statement, its placeholders in order, all rows or none, all counted, the first id as its
/// insert id. Before: 1235.
#[test]
fn an_insert_whose_rows_default_different_columns_is_one_statement() {
    let tmp = TempDir::new("shim-sql-default-rows");
    let shim = shim(&tmp);
    let script = r#"
import sys, mysql.connector
c = mysql.connector.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root",
                            password=sys.argv[2], autocommit=True)
cur = c.cursor()
cur.execute("CREATE DATABASE d")
cur.execute("USE d")
cur.execute("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, n INT DEFAULT 5, "
            "s VARCHAR(9) DEFAULT 'd' UNIQUE)")
prepared = c.cursor(prepared=True)
prepared.execute("INSERT INTO t (id, n, s) VALUES (DEFAULT, %s, DEFAULT), (DEFAULT, %s, %s), "
                 "(DEFAULT, DEFAULT, %s)", (1, 2, "x", "y"))
print("prepared", prepared.rowcount, prepared.lastrowid)
cur.execute("SELECT LAST_INSERT_ID()")
print("last_insert_id", cur.fetchone()[0])
try:
    # The second part repeats 'x': the first part's row goes too.
    cur.execute("INSERT INTO t (id, n, s) VALUES (DEFAULT, 3, 'z'), (DEFAULT, DEFAULT, 'x')")
    print("duplicate accepted")
except mysql.connector.Error as e:
    print("duplicate", e.errno)
cur.execute("SELECT id, n, s FROM t ORDER BY id")
print("rows", cur.fetchall())
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(60)),
        "prepared 3 1\nlast_insert_id 1\nduplicate 1062\n\
         rows [(1, 1, 'd'), (2, 2, 'x'), (3, 5, 'y')]\n"
    );
}

/// A statement whose string literals carry bytes that are not UTF-8 (PyMySQL's own
/// `_binary'...'` quoting of the bytes 0x00-0xFF, as its repository's version sends them, and
/// C's `mysql_real_escape_string`): stored and read back as MySQL does. Before: opensrv read
/// the text as UTF-8 and the connection was lost (2013).
#[test]
fn string_literals_that_are_not_utf8_are_stored_as_their_bytes() {
    let tmp = TempDir::new("shim-sql-binary-literals");
    let shim = shim(&tmp);
    let script = r#"
import sys, pymysql
from pymysql.constants import COMMAND
c = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", password=sys.argv[2],
                    autocommit=True)
cur = c.cursor()
cur.execute("CREATE DATABASE d")
cur.execute("USE d")
cur.execute("CREATE TABLE t (b VARBINARY(300))")
data = bytes(range(256))
escaped = data.replace(b"\\", b"\\\\").replace(b"'", b"\\'").replace(b"\0", b"\\0")
# The statement's own bytes, as a client that quotes binary data itself sends them.
c._execute_command(COMMAND.COM_QUERY, b"INSERT INTO t VALUES (_binary'" + escaped + b"')")
c._read_query_result()
cur.execute("SELECT b FROM t")
print("same bytes", cur.fetchone()[0] == data)
# Not UTF-8 in a name: an error, and the connection goes on.
try:
    c._execute_command(COMMAND.COM_QUERY, b"SELECT * FROM `\xff`")
    c._read_query_result()
except pymysql.MySQLError as e:
    print("name", e.args[0])
cur.execute("SELECT 1")
print("still connected", cur.fetchone()[0])
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(60)),
        "same bytes True\nname 1146\nstill connected 1\n"
    );
}

/// What a session sets is followed or refused, never accepted and answered otherwise: a time
/// zone, a character set or a `sql_mode` flag the shim does not follow gets 1231; under
/// `ANSI`, a statement that reads otherwise (a double-quoted name, `||`) gets 1235 and the
/// rest runs; under `NO_BACKSLASH_ESCAPES` the OK packets say so, PyMySQL quotes by doubling
/// and a backslash gets 1235; `max_execution_time` and the `MAX_EXECUTION_TIME` hint
/// interrupt a `SELECT`; `wait_timeout` closes an idle connection. Before: each was accepted
/// and changed nothing (PyMySQL's own `test_escape_string`, `test_execution_time_limit` and
/// `test_connection_gone_away` failed).
#[test]
fn session_settings_are_followed_or_refused() {
    let tmp = TempDir::new("shim-sql-settings");
    let shim = shim(&tmp);
    let script = r#"
import sys, pymysql
def connect(**kw):
    return pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root",
                           password=sys.argv[2], autocommit=True, **kw)
def outcome(cur, sql):
    try:
        cur.execute(sql)
        return "ok"
    except pymysql.MySQLError as e:
        return str(e.args[0])
c = connect()
cur = c.cursor()
print("time_zone", outcome(cur, "SET time_zone = '+08:00'"), outcome(cur, "SET time_zone = 'UTC'"))
print("names", outcome(cur, "SET NAMES latin1"), outcome(cur, "SET NAMES utf8mb4"))
print("mode", outcome(cur, "SET sql_mode = 'HIGH_NOT_PRECEDENCE'"))
print("ansi", outcome(cur, "SET sql_mode = 'ANSI,STRICT_TRANS_TABLES'"),
      outcome(cur, 'SELECT "x"'), outcome(cur, "SELECT 'a' || 'b'"), outcome(cur, "SELECT 'x'"))
cur.execute("SET sql_mode = 'NO_BACKSLASH_ESCAPES'")
print("escaped", c.escape("it's"), outcome(cur, "SELECT " + c.escape("a\\b")))
cur.execute("SET sql_mode = DEFAULT")
print("hint", outcome(cur, "SELECT /*+ MAX_EXECUTION_TIME(100) */ SLEEP(600)"))
cur.execute("SET max_execution_time = 100")
print("variable", outcome(cur, "SELECT SLEEP(600)"), outcome(cur, "SELECT 1"))
cur.execute("SET wait_timeout = 1")
# The server ends the idle connection: its socket reads the end of the stream.
c._sock.settimeout(120)
print("closed", c._sock.recv(1) == b"")
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(180)),
        "time_zone 1231 ok\nnames 1231 ok\nmode 1231\nansi ok 1235 1235 ok\n\
         escaped 'it''s' 1235\nhint 3024\nvariable 3024 ok\nclosed True\n"
    );
}

/// Each result column names its table as the statement calls it (the alias where the table
/// has one), so a client tells two columns of the same name apart (PyMySQL's `DictCursor`:
/// `b.value`; its own suite's `test_issue_79`); a value a column refuses says which row, as
/// MySQL says. Before: no table (the second `value` overwrote the first), no row.
#[test]
fn result_columns_name_their_tables_and_refused_values_their_row() {
    let tmp = TempDir::new("shim-sql-tables");
    let shim = shim(&tmp);
    let script = r#"
import sys, pymysql, pymysql.cursors
c = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", password=sys.argv[2],
                    autocommit=True, cursorclass=pymysql.cursors.DictCursor)
cur = c.cursor()
for sql in ["CREATE DATABASE d", "USE d", "CREATE TABLE a (id INT, value INT)",
            "CREATE TABLE b (id INT, value VARCHAR(2))", "INSERT INTO a VALUES (1, 11)",
            "INSERT INTO b VALUES (1, 'bb')"]:
    cur.execute(sql)
cur.execute("SELECT * FROM a JOIN b ON a.id = b.id")
print(cur.fetchall())
cur.execute("SELECT *, 1 + 1 AS two FROM a x JOIN b y ON x.id = y.id")
print(cur.fetchall(), [f.table_name for f in cur._result.fields])
try:
    cur.execute("INSERT INTO b VALUES (2, 'ok'), (3, 'too long')")
except pymysql.MySQLError as e:
    print(e.args)
# Rows that leave different columns to their defaults run as parts: still the client's row.
cur.execute("CREATE TABLE c (id INT, s VARCHAR(2), n INT DEFAULT 7)")
try:
    cur.execute("INSERT INTO c (id, s, n) VALUES (1, 'a', DEFAULT), (2, 'b', 1), (3, 'long', DEFAULT)")
except pymysql.MySQLError as e:
    print(e.args)
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(60)),
        "[{'id': 1, 'value': 11, 'b.id': 1, 'b.value': 'bb'}]\n\
         [{'id': 1, 'value': 11, 'y.id': 1, 'y.value': 'bb', 'two': 2}] ['x', 'x', 'y', 'y', '']\n\
         (1406, \"Data too long for column 'value' at row 2\")\n\
         (1406, \"Data too long for column 's' at row 3\")\n"
    );
}

/// A result set ends with the session's status flags and the count of its statement's
/// notes, as MariaDB ends one, and the OKs of `COM_PING` and `USE` have the flags too.
/// Before, opensrv wrote 0 for both: PyMySQL said autocommit was off after any `SELECT`, a
/// relay took the `SELECT` of an open transaction for the end of it, and `warning_count` was
/// 0 (PyMySQL's own `test_warnings` failed).
#[test]
fn a_result_sets_end_says_the_sessions_status_and_its_notes() {
    let tmp = TempDir::new("shim-sql-result-end");
    let shim = shim(&tmp);
    let script = r#"
import sys, pymysql
c = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", password=sys.argv[2],
                    autocommit=True)
IN_TRANS = 1
cur = c.cursor()
cur.execute("SELECT 1")
print("autocommit", c.get_autocommit())
c.begin()
cur.execute("SELECT 1")
print("in transaction", bool(c.server_status & IN_TRANS), c.get_autocommit())
c.ping(reconnect=False)
print("after ping", bool(c.server_status & IN_TRANS))
c.commit()
cur.execute("SELECT 1")
print("committed", bool(c.server_status & IN_TRANS))
cur.execute("SELECT CAST('abc' AS SIGNED), CAST('1x' AS SIGNED)")
print("warnings", cur.warning_count)
cur.execute("SELECT 2")
print("none of its own", cur.warning_count)
u = c.cursor(pymysql.cursors.SSCursor)
u.execute("SELECT CAST('abc' AS SIGNED)")
u.fetchall()
print("unbuffered", u.warning_count)
# The flags after what opensrv would answer itself: a USE sent as a query, the one query it
# knows. A driver that forgets NO_BACKSLASH_ESCAPES escapes a quote with a backslash, which
# that mode reads as text: the quote would then end the string.
NO_BACKSLASH_ESCAPES = 512
cur.execute("CREATE DATABASE d")
cur.execute("SET sql_mode = 'NO_BACKSLASH_ESCAPES'")
c.begin()
cur.execute("USE d")
print("use", bool(c.server_status & NO_BACKSLASH_ESCAPES), bool(c.server_status & IN_TRANS))
cur.execute("SELECT @@max_allowed_packet")
print("max_allowed_packet", bool(c.server_status & NO_BACKSLASH_ESCAPES), cur.fetchall())
cur.execute("SELECT %s", ("' OR 1=1 -- ",))
print("escaped", cur.fetchall())
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(60)),
        "autocommit True\nin transaction True True\nafter ping True\ncommitted False\n\
         warnings 2\nnone of its own 0\nunbuffered 1\nuse True True\n\
         max_allowed_packet True ((67108864,),)\nescaped ((\"' OR 1=1 -- \",),)\n"
    );
}

/// A `DROP TABLE IF EXISTS` of a missing table leaves MySQL's note (1051, counted in the OK
/// packet, listed by `SHOW WARNINGS`), which outlives statements that use no table and goes
/// with the next one that does, as in MariaDB. Before: no note, and `SHOW WARNINGS` was
/// always empty (PyMySQL's own `test_warnings` failed).
#[test]
fn a_missing_tables_drop_leaves_a_note() {
    let tmp = TempDir::new("shim-sql-warnings");
    let shim = shim(&tmp);
    let script = r#"
import sys, pymysql
c = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", password=sys.argv[2],
                    autocommit=True)
cur = c.cursor()
cur.execute("CREATE DATABASE d")
cur.execute("USE d")
cur.execute("DROP TABLE IF EXISTS `no_such_table`")
print("count", cur.warning_count)
cur.execute("SELECT 1")
cur.execute("SHOW WARNINGS")
print("kept", cur.fetchall())
cur.execute("CREATE TABLE t (a INT)")
print("count", cur.warning_count)
cur.execute("SHOW WARNINGS")
print("cleared", cur.fetchall())
"#;
    assert_eq!(
        pymysql_script(shim.port, script, Duration::from_secs(60)),
        "count 1\nkept (('Note', 1051, \"Unknown table 'd.no_such_table'\"),)\ncount 0\ncleared ()\n"
    );
}
