//! Tests of the whole translation: the SQLite text, and that it runs and behaves in an
//! in-memory SQLite.

use rusqlite::Connection;

use super::{Change, StatementKind, expr::ENGINE_FUNCTIONS, strip_comments, translate};

/// The translated statements of `mysql`, without the strict-mode checks on each column's
/// values (`ddl::value_checks`, whose own tests show them).
fn sql(mysql: &str) -> Vec<String> {
    checked_sql(mysql)
        .iter()
        .map(|s| without_value_checks(s))
        .collect()
}

/// The translated statements of `mysql`, as the shim runs them.
fn checked_sql(mysql: &str) -> Vec<String> {
    translate(mysql)
        .unwrap_or_else(|e| panic!("{mysql}: {e}"))
        .statements
}

/// `s` without its `` CONSTRAINT `mysql_... ` CHECK (...)`` clauses.
fn without_value_checks(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(" CONSTRAINT `mysql_") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let open = after.find(" CHECK (").unwrap() + " CHECK ".len();
        let mut depth = 0;
        let mut end = open;
        for (i, c) in after[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i + 1;
                break;
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Translates and runs each statement in `db`.
fn run(db: &Connection, mysql: &str) {
    for s in checked_sql(mysql) {
        db.execute_batch(&s)
            .unwrap_or_else(|e| panic!("{mysql}\n  -> {s}\n  {e}"));
    }
}

/// Translates and runs a query returning one text column per row.
fn rows(db: &Connection, mysql: &str) -> Vec<String> {
    let statements = sql(mysql);
    let [query] = statements.as_slice() else {
        panic!("{statements:?}")
    };
    let mut stmt = db.prepare(query).unwrap_or_else(|e| panic!("{query}: {e}"));
    stmt.query_map([], |r| {
        let v: rusqlite::types::Value = r.get(0)?;
        Ok(match v {
            rusqlite::types::Value::Null => "NULL".to_owned(),
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Real(f) => f.to_string(),
            rusqlite::types::Value::Text(t) => t,
            rusqlite::types::Value::Blob(b) => format!("{b:?}"),
        })
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn code(mysql: &str) -> u16 {
    translate(mysql)
        .map(|t| panic!("{mysql} translated: {t:?}"))
        .unwrap_or_else(|e| e.code())
}

fn db() -> Connection {
    let db = Connection::open_in_memory().unwrap();
    // The collation, `LIKE` and `CAST AS CHAR`.
    crate::mysql_text_functions::register(&db, &std::sync::Arc::default()).unwrap();
    // `mysql_round`, which a DECIMAL column's triggers call; the typed arguments' functions,
    // which see no declared types here (the engine's tests cover those).
    crate::mysql_numeric_functions::register(&db).unwrap();
    crate::typed_values::register(&db, &std::sync::Arc::default()).unwrap();
    db
}

const DUMP_TABLE: &str = "CREATE TABLE `items` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `name` varchar(40) NOT NULL DEFAULT '',
  `price` decimal(10,2) DEFAULT NULL,
  `created` datetime DEFAULT current_timestamp(),
  `kind` enum('a','b') DEFAULT 'a',
  PRIMARY KEY (`id`),
  UNIQUE KEY `name` (`name`),
  KEY `price_idx` (`price`)
) ENGINE=InnoDB AUTO_INCREMENT=3 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;";

#[test]
fn translates_mariadb_dump_table() {
    assert_eq!(
        sql(DUMP_TABLE),
        [
            "CREATE TABLE `items` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, \
             `name` VARCHAR(40) COLLATE mysql_general_ci NOT NULL DEFAULT '', \
             `price` DECIMAL(10,2) DEFAULT NULL, \
             `created` DATETIME DEFAULT CURRENT_TIMESTAMP, \
             `kind` TEXT COLLATE mysql_general_ci CONSTRAINT `enum` CHECK (`kind` IN ('a', 'b')) DEFAULT 'a')",
            "CREATE UNIQUE INDEX `items__name` ON `items` (`name`)",
            "CREATE INDEX `items__price_idx` ON `items` (`price`)",
            "CREATE TRIGGER `items__price__rounding_insert` AFTER INSERT ON `items` FOR EACH ROW \
             WHEN NEW.`price` IS NOT mysql_round(NEW.`price`, 2) BEGIN UPDATE `items` SET \
             `price` = mysql_round(NEW.`price`, 2) WHERE rowid = NEW.rowid; END",
            "CREATE TRIGGER `items__price__rounding_update` AFTER UPDATE OF `price` ON `items` \
             FOR EACH ROW WHEN NEW.`price` IS NOT mysql_round(NEW.`price`, 2) BEGIN UPDATE \
             `items` SET `price` = mysql_round(NEW.`price`, 2) WHERE rowid = NEW.rowid; END",
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('items', 2)",
        ]
    );
    assert_eq!(translate(DUMP_TABLE).unwrap().kind, StatementKind::Ddl);
}

#[test]
fn runs_mariadb_dump_table_and_rows() {
    let db = db();
    run(&db, DUMP_TABLE);
    let insert = translate(
        "INSERT INTO `items` VALUES (1,'x',1.50,'2024-01-01 00:00:00','a'),(2,'y',2.00,'2024-01-02 00:00:00','b')",
    )
    .unwrap();
    assert_eq!(insert.kind, StatementKind::Insert);
    run(
        &db,
        "INSERT INTO `items` VALUES (1,'x',1.50,'2024-01-01 00:00:00','a'),(2,'y',2.00,'2024-01-02 00:00:00','b')",
    );
    run(&db, "INSERT INTO items (name) VALUES ('z')");
    assert_eq!(db.last_insert_rowid(), 3);
    assert_eq!(rows(&db, "SELECT kind FROM items WHERE id = 3"), ["a"]);
    assert_eq!(
        rows(&db, "SELECT created IS NOT NULL FROM items WHERE id = 3"),
        ["1"]
    );
    // The declared types survive for PRAGMA table_info.
    let types: Vec<String> = db
        .prepare("SELECT type FROM pragma_table_info('items')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        types,
        [
            "INTEGER",
            "VARCHAR(40)",
            "DECIMAL(10,2)",
            "DATETIME",
            "TEXT"
        ]
    );
}

#[test]
fn auto_increment_yields_one_two_three() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT)",
    );
    for n in 1..=3 {
        run(&db, "INSERT INTO t (v) VALUES (0)");
        assert_eq!(db.last_insert_rowid(), n);
    }
    run(&db, "INSERT INTO t (id, v) VALUES (NULL, 0)");
    assert_eq!(db.last_insert_rowid(), 4);
}

#[test]
fn keeps_mysql_types_as_declared_types() {
    assert_eq!(
        sql(
            "CREATE TABLE t (a TINYINT(1), b BIGINT(20) UNSIGNED ZEROFILL, c INT(11) UNSIGNED, d TIMESTAMP NULL, \
             e TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin COMMENT 'x', f BLOB, g JSON, h DOUBLE, i CHAR(2))"
        ),
        [
            "CREATE TABLE `t` (`a` TINYINT(1), `b` BIGINT UNSIGNED, `c` INT UNSIGNED, `d` TIMESTAMP, \
          `e` TEXT COLLATE mysql_bin, `f` BLOB, `g` JSON, `h` DOUBLE, `i` CHAR(2) COLLATE mysql_general_ci)"
        ]
    );
}

#[test]
fn declares_bool_as_tinyint_1() {
    assert_eq!(
        sql("CREATE TABLE t (a BOOL NOT NULL, b BOOLEAN DEFAULT TRUE)"),
        ["CREATE TABLE `t` (`a` TINYINT(1) NOT NULL, `b` TINYINT(1) DEFAULT true)"]
    );
}

/// `DOUBLE(M,D)` and `REAL(M,D)` lose their deprecated display width; `FLOAT(M,D)` keeps it,
/// and its values are stored as MySQL stores them, rounded to `D` decimals and then to a
/// 4-byte float, as a plain `FLOAT`'s to the float.
#[test]
fn keeps_float_scale_and_drops_double_display_width() {
    let out = sql(
        "CREATE TABLE t (a float(10,2) NOT NULL default '0.00', b DOUBLE (8, 3), c REAL(5,1), d FLOAT(7))",
    );
    assert_eq!(
        out.first().map(String::as_str),
        Some(
            "CREATE TABLE `t` (`a` FLOAT(10,2) NOT NULL DEFAULT '0.00', `b` DOUBLE, `c` REAL, `d` FLOAT(7))"
        )
    );
    let rounding: Vec<&str> = out
        .iter()
        .skip(1)
        .filter_map(|t| {
            t.split_once(" WHEN ")?
                .1
                .split_once(" BEGIN ")
                .map(|(w, _)| w)
        })
        .collect();
    assert_eq!(
        rounding,
        [
            "NEW.`a` IS NOT mysql_float(mysql_round(NEW.`a`, 2))",
            "NEW.`a` IS NOT mysql_float(mysql_round(NEW.`a`, 2))",
            "NEW.`d` IS NOT mysql_float(NEW.`d`)",
            "NEW.`d` IS NOT mysql_float(NEW.`d`)",
        ]
    );
}

#[test]
fn compares_varchar_case_insensitively() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (name VARCHAR(10), code VARCHAR(10) COLLATE utf8mb4_bin)",
    );
    run(&db, "INSERT INTO t VALUES ('Alice', 'Alice')");
    assert_eq!(
        rows(&db, "SELECT name FROM t WHERE name = 'ALICE'"),
        ["Alice"]
    );
    assert!(rows(&db, "SELECT name FROM t WHERE code = 'ALICE'").is_empty());
}

#[test]
fn enum_rejects_value_outside_it() {
    let db = db();
    run(&db, "CREATE TABLE t (k ENUM('small','large') NOT NULL)");
    run(&db, "INSERT INTO t VALUES ('small')");
    let bad = sql("INSERT INTO t VALUES ('medium')");
    assert!(db.execute_batch(&bad[0]).is_err());
}

#[test]
fn set_accepts_subsets_only() {
    let db = db();
    run(&db, "CREATE TABLE t (s SET('x','y','z'))");
    run(&db, "INSERT INTO t VALUES ('x,z'), (''), ('z,y'), (NULL)");
    assert!(
        db.execute_batch(&sql("INSERT INTO t VALUES ('x,w')")[0])
            .is_err()
    );
}

#[test]
fn on_update_current_timestamp_sets_column_when_row_changes() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT, ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)",
    );
    run(
        &db,
        "INSERT INTO t (id, v, ts) VALUES (1, 1, '2000-01-01 00:00:00')",
    );
    run(&db, "UPDATE t SET v = 2 WHERE id = 1");
    assert_eq!(rows(&db, "SELECT ts > '2000-01-01 00:00:00' FROM t"), ["1"]);
    run(&db, "UPDATE t SET ts = '2001-01-01 00:00:00' WHERE id = 1");
    assert_eq!(rows(&db, "SELECT ts FROM t"), ["2001-01-01 00:00:00"]);
}

#[test]
fn inline_keys_become_uniquely_named_indexes() {
    assert_eq!(
        sql(
            "CREATE TABLE IF NOT EXISTS s.t (a INT UNIQUE, b VARCHAR(200), KEY (b(10)) USING BTREE, INDEX (b), \
             FULLTEXT KEY ft (b), CONSTRAINT fk FOREIGN KEY (a) REFERENCES s.u (id) ON DELETE CASCADE)"
        ),
        [
            "CREATE TABLE IF NOT EXISTS `s`.`t` (`a` INT, `b` VARCHAR(200) COLLATE mysql_general_ci, \
             CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `u` (`id`) ON DELETE CASCADE)",
            "CREATE UNIQUE INDEX IF NOT EXISTS `s`.`t__a` ON `t` (`a`)",
            "CREATE INDEX IF NOT EXISTS `s`.`t__b` ON `t` (`b`)",
            "CREATE INDEX IF NOT EXISTS `s`.`t__b_2` ON `t` (`b`)",
        ]
    );
}

#[test]
fn foreign_keys_are_enforced() {
    let db = db();
    db.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    run(
        &db,
        "CREATE TABLE p (id INT NOT NULL AUTO_INCREMENT, PRIMARY KEY (id))",
    );
    run(
        &db,
        "CREATE TABLE c (id INT PRIMARY KEY, p INT REFERENCES p (id))",
    );
    run(&db, "INSERT INTO p VALUES (1)");
    run(&db, "INSERT INTO c VALUES (1, 1)");
    assert!(
        db.execute_batch(&sql("INSERT INTO c VALUES (2, 9)")[0])
            .is_err()
    );
}

#[test]
fn index_statements() {
    assert_eq!(
        sql("CREATE UNIQUE INDEX i USING BTREE ON t (a(10), b DESC)"),
        ["CREATE UNIQUE INDEX `t__i` ON `t` (a, b DESC)"]
    );
    assert_eq!(
        sql("CREATE INDEX i ON t (a) USING HASH"),
        ["CREATE INDEX `t__i` ON `t` (a)"]
    );
    assert_eq!(sql("DROP INDEX i ON db.t"), ["DROP INDEX `db`.`t__i`"]);
    assert_eq!(
        sql("DROP INDEX IF EXISTS `i` ON `t` ALGORITHM=INPLACE"),
        ["DROP INDEX IF EXISTS `t__i`"]
    );
    let db = db();
    run(&db, "CREATE TABLE t (a INT, b INT)");
    run(&db, "CREATE INDEX i ON t (a)");
    run(&db, "DROP INDEX i ON t");
}

#[test]
fn tables_views_truncate_rename() {
    let db = db();
    run(&db, "CREATE TABLE a (x INT)");
    run(&db, "CREATE TABLE b (x INT)");
    run(&db, "INSERT INTO a VALUES (1), (2)");
    assert_eq!(sql("TRUNCATE TABLE a"), ["DELETE FROM `a`"]);
    assert_eq!(translate("TRUNCATE a").unwrap().kind, StatementKind::Ddl);
    run(&db, "TRUNCATE a");
    assert!(rows(&db, "SELECT x FROM a").is_empty());
    assert_eq!(
        sql("RENAME TABLE a TO c, b TO d"),
        [
            "ALTER TABLE `a` RENAME TO `c`",
            "ALTER TABLE `b` RENAME TO `d`"
        ]
    );
    run(&db, "RENAME TABLE a TO c, b TO d");
    run(&db, "CREATE VIEW v AS SELECT x FROM c");
    run(&db, "CREATE OR REPLACE VIEW v AS SELECT x FROM d");
    run(&db, "DROP VIEW v");
    assert_eq!(
        sql("DROP TABLE IF EXISTS c, d"),
        ["DROP TABLE IF EXISTS `c`", "DROP TABLE IF EXISTS `d`"]
    );
    run(&db, "DROP TABLE IF EXISTS c, d");
}

#[test]
fn alter_table_what_sqlite_supports() {
    let db = db();
    run(&db, "CREATE TABLE t (a INT, b INT)");
    assert_eq!(
        sql("ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x', DROP COLUMN b"),
        [
            "ALTER TABLE `t` ADD COLUMN `c` VARCHAR(5) COLLATE mysql_general_ci NOT NULL DEFAULT 'x'",
            "ALTER TABLE `t` DROP COLUMN `b`"
        ]
    );
    run(
        &db,
        "ALTER TABLE t ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x', DROP COLUMN b",
    );
    run(&db, "ALTER TABLE t RENAME COLUMN a TO z");
    run(&db, "ALTER TABLE t ADD INDEX iz (z)");
    run(&db, "ALTER TABLE t ADD UNIQUE KEY uc (c)");
    run(&db, "ALTER TABLE t RENAME TO u");
    assert_eq!(rows(&db, "SELECT c FROM u"), Vec::<String>::new());
}

#[test]
fn on_duplicate_key_update_really_updates() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (id INT PRIMARY KEY, n INT, hits INT DEFAULT 0)",
    );
    let t = translate("INSERT INTO t (id, n) VALUES (?, ?) ON DUPLICATE KEY UPDATE n = VALUES(n), hits = hits + 1").unwrap();
    assert_eq!(t.kind, StatementKind::Insert);
    assert_eq!(
        t.statements,
        [
            "INSERT INTO t (id, n) VALUES (?, ?) ON CONFLICT DO UPDATE SET n = excluded.n, hits = hits + 1"
        ]
    );
    for n in [10, 20] {
        db.execute(&t.statements[0], rusqlite::params![1, n])
            .unwrap();
    }
    assert_eq!(rows(&db, "SELECT CONCAT(n, '/', hits) FROM t"), ["20/1"]);
    run(
        &db,
        "INSERT INTO t (id, n) VALUES (1, 30) AS new ON DUPLICATE KEY UPDATE n = new.n",
    );
    run(
        &db,
        "INSERT INTO t (id, n) SELECT id, n + 1 FROM t ON DUPLICATE KEY UPDATE n = VALUES(n)",
    );
    assert_eq!(rows(&db, "SELECT n FROM t"), ["31"]);
    // `VALUES(c)` anywhere in the new value (the hand-written walk this replaced missed it
    // under IS NULL, CAST, IN, ...).
    assert_eq!(
        sql(
            "INSERT INTO t (id, n) VALUES (1, 2) ON DUPLICATE KEY UPDATE n = CASE WHEN VALUES(n) IS NULL THEN n ELSE VALUES(n) END"
        ),
        [
            "INSERT INTO t (id, n) VALUES (1, 2) ON CONFLICT DO UPDATE SET n = CASE WHEN excluded.n IS NULL THEN n ELSE excluded.n END"
        ]
    );
}

#[test]
fn replace_and_insert_ignore() {
    let db = db();
    run(&db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(5))");
    let r = translate("REPLACE INTO t VALUES (1, 'a')").unwrap();
    assert_eq!(
        (r.kind, r.statements[0].as_str()),
        (
            StatementKind::Replace,
            "INSERT OR REPLACE INTO t VALUES (1, 'a')"
        )
    );
    run(&db, "REPLACE INTO t VALUES (1, 'a')");
    run(&db, "REPLACE INTO t VALUES (1, 'b')");
    // A taken key skips the row; a value the column cannot hold is refused, not skipped.
    assert_eq!(
        sql("INSERT IGNORE INTO t VALUES (1, 'c')"),
        ["INSERT INTO t VALUES (1, 'c') ON CONFLICT DO NOTHING"]
    );
    assert_eq!(
        sql("INSERT IGNORE INTO t SELECT 1, 'c'"),
        ["INSERT INTO t SELECT 1, 'c' WHERE true ON CONFLICT DO NOTHING"]
    );
    run(&db, "INSERT IGNORE INTO t VALUES (1, 'c')");
    assert_eq!(rows(&db, "SELECT v FROM t"), ["b"]);
    let refused = db
        .execute_batch(&checked_sql("INSERT IGNORE INTO t VALUES (2, 'toolong')")[0])
        .unwrap_err();
    assert!(refused.to_string().contains("mysql_length v"), "{refused}");
}

#[test]
fn limit_offset_and_dual() {
    let db = db();
    run(&db, "CREATE TABLE t (n INT)");
    run(&db, "INSERT INTO t VALUES (1), (2), (3), (4)");
    assert_eq!(
        rows(&db, "SELECT n FROM t ORDER BY n LIMIT 1, 2"),
        ["2", "3"]
    );
    assert_eq!(sql("SELECT 1 + 1 FROM DUAL"), ["SELECT 1 + 1"]);
    assert_eq!(
        sql("SELECT n FROM t UNION ALL SELECT n FROM t"),
        ["SELECT n FROM t UNION ALL SELECT n FROM t"]
    );
    assert_eq!(translate("SELECT 1").unwrap().kind, StatementKind::Query);
}

#[test]
fn placeholders_survive_in_order() {
    assert_eq!(
        sql("SELECT a FROM t WHERE a = ? AND b IN (?, ?)"),
        ["SELECT a FROM t WHERE a = ? AND b IN (?, ?)"]
    );
    // `LIMIT ?, ?` prints as LIMIT .. OFFSET .., so the numbers stay to bind right.
    assert_eq!(
        sql("SELECT n FROM t LIMIT ?, ?"),
        ["SELECT n FROM t LIMIT ?2 OFFSET ?1"]
    );
    let db = db();
    run(&db, "CREATE TABLE t (n INT)");
    run(&db, "INSERT INTO t VALUES (1), (2), (3), (4)");
    let q = sql("SELECT n FROM t ORDER BY n LIMIT ?, ?");
    let got: Vec<i64> = db
        .prepare(&q[0])
        .unwrap()
        .query_map([1, 2], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, [2, 3]);
}

#[test]
fn update_and_delete_with_limit() {
    let db = db();
    run(&db, "CREATE TABLE t (n INT, f INT DEFAULT 0)");
    run(&db, "INSERT INTO t (n) VALUES (1), (2), (3), (4)");
    let u = translate("UPDATE t SET f = ? WHERE n > ? ORDER BY n DESC LIMIT ?").unwrap();
    assert_eq!(u.kind, StatementKind::Update);
    assert_eq!(
        u.statements,
        [
            "UPDATE t SET f = ? WHERE rowid IN (SELECT rowid FROM t WHERE n > ? ORDER BY n DESC LIMIT ?)"
        ]
    );
    db.execute(&u.statements[0], [1, 1, 2]).unwrap();
    assert_eq!(
        rows(&db, "SELECT n FROM t WHERE f = 1 ORDER BY n"),
        ["3", "4"]
    );
    let d = translate("DELETE FROM t ORDER BY n LIMIT 1").unwrap();
    assert_eq!(d.kind, StatementKind::Delete);
    run(&db, "DELETE FROM t ORDER BY n LIMIT 1");
    // With a WHERE too (the token rewrite this replaced wrote a second WHERE: ERR 1064).
    assert_eq!(
        sql("DELETE FROM t WHERE f = 0 ORDER BY n DESC LIMIT 1"),
        ["DELETE FROM t WHERE rowid IN (SELECT rowid FROM t WHERE f = 0 ORDER BY n DESC LIMIT 1)"]
    );
    run(&db, "DELETE FROM t WHERE f = 0 ORDER BY n DESC LIMIT 1");
    assert_eq!(rows(&db, "SELECT n FROM t ORDER BY n"), ["3", "4"]);
}

#[test]
fn string_literals_keep_their_mysql_value() {
    let db = db();
    assert_eq!(
        sql(r"SELECT 'it\'s', 'a\\b', 'x\ny', 'q''q', _utf8mb4'u'"),
        ["SELECT 'it''s', 'a\\b', 'x\ny', 'q''q', 'u'"]
    );
    assert_eq!(rows(&db, r"SELECT 'it\'s'"), ["it's"]);
    assert_eq!(rows(&db, r"SELECT 'a\\b'"), ["a\\b"]);
    assert_eq!(rows(&db, r"SELECT 'x\ny'"), ["x\ny"]);
    assert_eq!(rows(&db, r#"SELECT "dq""#), ["dq"]);
    // The engine's MySQL HEX (mysql_functions' tests run it).
    assert_eq!(
        sql(r"SELECT HEX('a\0b')")[0],
        "SELECT mysql_hex((CAST(X'610062' AS TEXT)))"
    );
}

#[test]
fn functions_and_operators() {
    let db = db();
    assert_eq!(rows(&db, "SELECT CONCAT('a', 1, 'b')"), ["a1b"]);
    assert_eq!(rows(&db, "SELECT CONCAT('a', NULL) IS NULL"), ["1"]);
    assert_eq!(rows(&db, "SELECT IFNULL(NULL, 'x')"), ["x"]);
    assert_eq!(rows(&db, "SELECT IF(1 > 2, 'y', 'n')"), ["n"]);
    assert_eq!(rows(&db, "SELECT 7 DIV 2"), ["3"]);
    assert_eq!(rows(&db, "SELECT 1 + 7 DIV 2 * 2"), ["7"]);
    // The engine's function (a fraction kept, as MySQL's): its own tests run it.
    assert_eq!(
        sql("SELECT 7 MOD 3 + MOD(8, 3), 1.5 % 1, ROUND(x, 2)"),
        ["SELECT mysql_mod(7, 3) + mysql_mod(8, 3), mysql_mod(1.5, 1), mysql_round(x, 2)"]
    );
    // Two string literals: MariaDB's case-insensitive comparison, not SQLite's bytes.
    assert_eq!(
        sql("SELECT 'a' = 'A', x = 'A'"),
        ["SELECT mysql_compare_ci('a', 'A') = 0, x = 'A'"]
    );
    // The engine's function (rounding as MySQL does): mysql_functions' tests run it.
    assert_eq!(
        sql("SELECT CAST('12abc' AS SIGNED)"),
        ["SELECT mysql_cast_signed('12abc')"]
    );
    assert_eq!(rows(&db, "SELECT CAST(5 AS CHAR)"), ["5"]);
    assert_eq!(
        rows(&db, "SELECT CAST('2024-01-02 03:04:05' AS DATE)"),
        ["2024-01-02"]
    );
    assert_eq!(rows(&db, "SELECT NULL <=> NULL"), ["1"]);
    assert_eq!(rows(&db, "SELECT 0 || 1"), ["1"]);
    assert_eq!(rows(&db, "SELECT LOCATE('b', 'abc')"), ["2"]);
    assert_eq!(rows(&db, "SELECT GREATEST(1, 5, 3)"), ["5"]);
    assert_eq!(rows(&db, "SELECT UCASE(SUBSTRING('hello', 2, 3))"), ["ELL"]);
    assert_eq!(
        rows(
            &db,
            "SELECT CHAR_LENGTH(NOW()) = 19 AND CURDATE() = DATE(NOW())"
        ),
        ["1"]
    );
    run(&db, "CREATE TABLE g (v VARCHAR(3))");
    run(&db, "INSERT INTO g VALUES ('b'), ('a')");
    assert_eq!(
        rows(
            &db,
            "SELECT GROUP_CONCAT(v ORDER BY v SEPARATOR '-') FROM g"
        ),
        ["a-b"]
    );
    // Left for the engine to register, under the MySQL name.
    assert!(ENGINE_FUNCTIONS.contains(&"DATE_FORMAT"));
    assert_eq!(
        sql("SELECT DATE_FORMAT(NOW(), '%Y'), LAST_INSERT_ID()"),
        ["SELECT DATE_FORMAT(CURRENT_TIMESTAMP, '%Y'), LAST_INSERT_ID()"]
    );
}

#[test]
fn versioned_comments_run_their_text() {
    assert_eq!(
        sql("/*!40101 CREATE TABLE t (a INT) */"),
        ["CREATE TABLE `t` (`a` INT)"]
    );
    assert_eq!(sql("SELECT /*!50003 1 + */ 2 -- three\n"), ["SELECT 1 + 2"]);
    assert_eq!(
        code("/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */"),
        1235
    );
    assert_eq!(code("/*!40101 SET NAMES utf8mb4 */"), 1235);
    // What the session classifies instead.
    assert_eq!(
        strip_comments("/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;")
            .unwrap(),
        "SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT"
    );
}

#[test]
fn lock_tables_is_accepted_with_nothing_to_run() {
    for s in ["LOCK TABLES `items` WRITE", "UNLOCK TABLES"] {
        let t = translate(s).unwrap();
        assert_eq!((t.statements.len(), t.kind), (0, StatementKind::Other));
        assert!(!t.kind.commits_implicitly());
    }
    assert!(StatementKind::Ddl.commits_implicitly());
    assert!(!StatementKind::Insert.commits_implicitly());
}

#[test]
fn rejects_syntax_errors_with_1064() {
    for s in [
        "SELEC 1",
        "SELECT FROM WHERE",
        "CREATE TABLE (",
        "SELECT 'unterminated",
        "SELECT 1 DIV",
        "SELECT 1; SELECT 2",
    ] {
        assert_eq!(code(s), 1064, "{s}");
    }
    assert_eq!(code("/* only a comment */"), 1065);
}

#[test]
fn rejects_what_is_not_ours_with_1235() {
    for s in [
        "SHOW TABLES",
        "SET autocommit = 1",
        "USE shop",
        "BEGIN",
        "COMMIT",
        "CREATE DATABASE x",
        "DROP DATABASE x",
    ] {
        assert_eq!(code(s), 1235, "{s}");
    }
}

/// What SQLite's `ALTER TABLE` cannot do is described as a table rebuild for the engine,
/// with each definition printed as `CREATE TABLE` prints it and a literal restored.
#[test]
fn column_changes_and_new_constraints_become_a_table_rebuild() {
    let t = translate(
        "ALTER TABLE shop.t CHANGE a b VARCHAR(5) NOT NULL DEFAULT 'x' UNIQUE, \
         ALTER COLUMN c SET DEFAULT 'it''s', ALTER COLUMN d DROP DEFAULT, \
         ADD CONSTRAINT fk FOREIGN KEY (b) REFERENCES u (id) ON DELETE CASCADE, \
         ADD CHECK (e > 0)",
    )
    .unwrap();
    assert_eq!(
        t.statements,
        ["CREATE UNIQUE INDEX `shop`.`t__b` ON `t` (`b`)"]
    );
    let rebuild = t.rebuild.unwrap();
    assert_eq!(
        (rebuild.schema.as_deref(), rebuild.table.as_str()),
        (Some("shop"), "t")
    );
    assert_eq!(
        rebuild.changes,
        [
            Change::Column {
                old: "a".into(),
                new: "b".into(),
                definition: "`b` VARCHAR(5) COLLATE mysql_general_ci CONSTRAINT `mysql_length b` \
                             CHECK (length(`b`) <= 5) NOT NULL DEFAULT 'x'"
                    .into(),
                on_update: false,
            },
            Change::Default {
                column: "c".into(),
                default: Some("'it''s'".into()),
            },
            Change::Default {
                column: "d".into(),
                default: None,
            },
            Change::Constraint(
                "CONSTRAINT `fk` FOREIGN KEY (`b`) REFERENCES `u` (`id`) ON DELETE CASCADE".into()
            ),
            Change::Constraint("CHECK (e > 0)".into()),
        ]
    );
}

/// The arguments whose answer depends on their column's declared type name the column, for
/// the engine to look up, in the select list and its subqueries; a JSON key does not.
#[test]
fn marks_the_arguments_a_declared_type_decides() {
    use super::{TypedArgument, TypedColumn};
    let t = translate(
        "SELECT JSON_ARRAY(d, 1), JSON_OBJECT(k, o.j), ROUND(f, 1), ROUND(2.5), \
         COALESCE((SELECT JSON_ARRAYAGG(JSON_ARRAY(x, o.d)) FROM other), JSON_ARRAY()) \
         FROM shop.orders o",
    )
    .unwrap();
    let typed = |table: &str, c: &str| TypedColumn {
        schema: (table == "orders").then(|| "shop".into()),
        table: table.into(),
        column: c.into(),
    };
    let column = |table: &str, c: &str| TypedArgument::Column(typed(table, c));
    assert_eq!(
        t.typed_columns,
        vec![
            column("orders", "d"),
            column("orders", "j"),
            column("orders", "f"),
            // The subquery's table's, or else the outer one's (a correlated name).
            TypedArgument::AnyOf(vec![typed("other", "x"), typed("orders", "x")]),
            // Qualified by the outer query's table.
            column("orders", "d"),
        ]
    );
    let statement = &t.statements[0];
    for call in [
        "mysql_json_typed(d, 0)",
        "mysql_json_typed(o.j, 1)",
        "mysql_round_typed(f, 1, 2)",
        "mysql_round(2.5)",
        "mysql_json_typed(x, 3)",
        "mysql_json_typed(o.d, 4)",
    ] {
        assert!(statement.contains(call), "{call} in {statement}");
    }
    // A double as written is rounded as a double, whatever table there is.
    let rounded = &translate("SELECT ROUND(1.015e0, 2)").unwrap().statements[0];
    assert!(
        rounded.contains("mysql_round_typed(1.015e0, 2, -1)"),
        "{rounded}"
    );
    // The same expression in the other clauses, so GROUP BY groups by what is shown.
    let grouped =
        &translate("SELECT ROUND(f, 1) FROM t GROUP BY ROUND(f, 1) HAVING ROUND(f, 1) > 1")
            .unwrap()
            .statements[0];
    assert_eq!(
        grouped.matches("mysql_round_typed(f, 1, ").count(),
        3,
        "{grouped}"
    );
    // The functions are the translation's own: a client naming them gets 1305.
    assert_eq!(code("SELECT mysql_round_typed(1.25, 1, 0)"), 1305);
    assert_eq!(code("SELECT MYSQL_JSON_TYPED('x', 0)"), 1305);
    // Two tables and an unqualified name: the engine looks for it in each, in order.
    let joined = |table: &str| TypedColumn {
        schema: None,
        table: table.into(),
        column: "d".into(),
    };
    assert_eq!(
        translate("SELECT JSON_ARRAY(d) FROM a JOIN b ON 1")
            .unwrap()
            .typed_columns,
        [TypedArgument::AnyOf(vec![joined("a"), joined("b")])]
    );
    // A derived table's name hides an outer table of that name; its column that is not a
    // table's is not typed (`n.d` is 7 here, not `n`'s DECIMAL).
    assert!(
        translate("UPDATE n SET s = (SELECT CONCAT(n.d) FROM (SELECT 7 AS d) n) WHERE id = 1")
            .unwrap()
            .typed_columns
            .is_empty()
    );
    // A table's column named with its database (`shop.orders.d`).
    assert_eq!(
        translate("SELECT CONCAT(shop.orders.d) FROM shop.orders")
            .unwrap()
            .typed_columns,
        [column("orders", "d")]
    );
    // Through a derived table of one table's every column (Drizzle's relational queries).
    assert_eq!(
        translate(
            "SELECT JSON_ARRAY(title, price, n) FROM \
             (SELECT *, row_number() OVER (ORDER BY id) AS n FROM posts p) p"
        )
        .unwrap()
        .typed_columns,
        vec![column("posts", "title"), column("posts", "price")]
    );
    // In a common table expression's body, and through its columns (a name alone is the
    // expression's, not a table's of that name).
    let with = translate(
        "WITH c AS (SELECT CONCAT(d) AS s, d FROM items), items AS (SELECT 7 AS d) \
         SELECT CONCAT(c.d), CONCAT(items.d) FROM c, items",
    )
    .unwrap();
    assert_eq!(
        with.typed_columns,
        [column("items", "d"), column("items", "d")]
    );
    // A branch of IF or COALESCE beside a string is read as text (`IF(c, d, 'none')` is
    // `12.50`); the value of a column that is not alone as its type (`CONCAT(-d)`).
    let branches = translate("SELECT IF(x, d, 'none'), COALESCE(d, 0), CONCAT(-d) FROM items")
        .unwrap()
        .typed_columns;
    assert!(
        matches!(
            branches.as_slice(),
            [TypedArgument::Column(_), TypedArgument::Number(_)]
        ),
        "{branches:?}"
    );
    // Not in a comparison, where MySQL compares such a string with a number as numbers.
    for sql in [
        "SELECT id FROM items WHERE COALESCE(d, 'n/a') > 10",
        "DELETE FROM items WHERE IFNULL(d, '') IN (3, 50)",
        "UPDATE items SET n = 1 WHERE CASE WHEN x THEN d ELSE 'x' END = 3",
    ] {
        assert!(translate(sql).unwrap().typed_columns.is_empty(), "{sql}");
    }
    // Stored: an assignment, an inserted row's value.
    for sql in [
        "UPDATE items SET s = IF(x, d, 'none')",
        "INSERT INTO items (s) SELECT COALESCE(d, 'none') FROM other",
    ] {
        assert_eq!(translate(sql).unwrap().typed_columns.len(), 1, "{sql}");
    }
}

/// A write reads a column as text as a query does: `UPDATE`'s `SET` and `WHERE` (also under
/// a `LIMIT`, which chooses the rows by rowid), `DELETE`'s `WHERE`, `INSERT`'s rows and its
/// `SELECT`, inside `CASE` and `IN`.
#[test]
fn marks_the_arguments_of_a_write() {
    use super::{TypedArgument, TypedColumn};
    let column = |c: &str| {
        TypedArgument::Column(TypedColumn {
            schema: None,
            table: "t".into(),
            column: c.into(),
        })
    };
    let update = translate(
        "UPDATE t SET s = CONCAT(d), n = CASE WHEN e LIKE '1.50' THEN 1 END \
         WHERE CONCAT(f) IN ('x', CONCAT(g)) LIMIT 1",
    )
    .unwrap();
    assert_eq!(
        update.typed_columns,
        ["d", "e", "f", "g"].map(column),
        "{:?}",
        update.statements
    );
    assert!(
        update.statements[0]
            .contains("rowid IN (SELECT rowid FROM t WHERE (mysql_text_typed(f, 2) || '')"),
        "{:?}",
        update.statements
    );
    let delete = translate("DELETE FROM t WHERE d LIKE '12.00'").unwrap();
    assert_eq!(delete.typed_columns, [column("d")]);
    let insert = translate("INSERT INTO u (s) SELECT CONCAT(d) FROM t").unwrap();
    assert_eq!(insert.typed_columns, [column("d")]);
    let values = translate("INSERT INTO u (s, n) VALUES (CONCAT(0.1 + 0.2), DEFAULT)").unwrap();
    assert!(
        matches!(values.typed_columns.as_slice(), [TypedArgument::Number(_)]),
        "{:?}",
        values.typed_columns
    );
}
/// The MySQL type of each result column SQLite cannot type, for the engine to resolve.
#[test]
fn types_the_result_columns_sqlite_cannot() {
    use super::{ResultAggregate, ResultOperator, ResultType};
    let of = |sql: &str| translate(sql).unwrap().result_types;
    let column = |schema: Option<&str>, table: &str, column: &str| ResultType::Column {
        schema: schema.map(str::to_owned),
        table: table.into(),
        column: column.into(),
    };
    let agg = |kind, t| Some(ResultType::Aggregate(kind, Box::new(t)));
    assert_eq!(
        of("SELECT id, SUM(price) AS total, max(o.at) FROM shop.orders o JOIN items i ON 1"),
        [
            None,
            // Unqualified with two tables: which one's is not known here.
            None,
            agg(
                ResultAggregate::MinOrMax,
                column(Some("shop"), "orders", "at")
            ),
        ]
    );
    assert_eq!(
        of("SELECT AVG(n), MIN(t.x) FROM t"),
        [
            agg(ResultAggregate::Avg, column(None, "t", "n")),
            agg(ResultAggregate::MinOrMax, column(None, "t", "x")),
        ]
    );
    // Operators as written (the translation divides as reals), literals by their text.
    let arithmetic = |op, l, r| Some(ResultType::Arithmetic(op, Box::new(l), Box::new(r)));
    assert_eq!(
        of("SELECT 7 / 2, 2.50 * d, 1e0 + 1, DATE(at), CAST(x AS DATETIME) FROM t"),
        [
            arithmetic(
                ResultOperator::Divide,
                ResultType::Integer,
                ResultType::Integer
            ),
            arithmetic(
                ResultOperator::Multiply,
                ResultType::Decimal(2),
                column(None, "t", "d")
            ),
            arithmetic(
                ResultOperator::AddOrSubtract,
                ResultType::Double,
                ResultType::Integer
            ),
            Some(ResultType::Date),
            Some(ResultType::DateTime),
        ]
    );
    // A derived table's columns are its select list's.
    assert_eq!(
        of("SELECT SUM(x) FROM (SELECT 1 AS x UNION ALL SELECT 2) t"),
        [agg(ResultAggregate::Sum, ResultType::Integer)]
    );
    // Nothing to line up, or nothing to find.
    assert!(of("SELECT *, MAX(x) FROM t").is_empty());
    assert!(of("SELECT MAX(x) FROM t UNION SELECT 1").is_empty());
    assert!(of("SELECT x, 'a', UPPER(x) FROM t").is_empty());
    // The branches of IF, CASE and COALESCE share a type, NULL takes theirs.
    let x = || column(None, "t", "x");
    assert_eq!(
        of("SELECT COALESCE(x, 1), IF(x > 0, x, NULL), CASE WHEN x THEN 1.5 END FROM t"),
        [
            Some(ResultType::Common(vec![x(), ResultType::Integer])),
            Some(ResultType::Common(vec![x(), ResultType::Null])),
            Some(ResultType::Common(vec![
                ResultType::Decimal(1),
                ResultType::Null
            ])),
        ]
    );
    // A common table expression's columns are its select list's; a recursive one's, its
    // first part's.
    assert_eq!(
        of("WITH c AS (SELECT x * 2 AS y FROM t) SELECT y FROM c"),
        [arithmetic(
            ResultOperator::Multiply,
            x(),
            ResultType::Integer
        )]
    );
    assert_eq!(
        of("WITH RECURSIVE r (n) AS (SELECT 1.5 UNION ALL SELECT n * 2 FROM r) SELECT n FROM r"),
        [Some(ResultType::Decimal(1))]
    );
    // A table's column is SQLite's to type, through a common table expression too.
    assert!(of("WITH c AS (SELECT x FROM t) SELECT x FROM c").is_empty());
}

#[test]
fn rejects_unmappable_constructs_with_1235() {
    for s in [
        "ALTER TABLE t MODIFY a BIGINT FIRST",
        "ALTER TABLE t CHANGE a b INT AFTER c",
        "ALTER TABLE t ADD COLUMN c INT AFTER a",
        "ALTER TABLE t ADD PRIMARY KEY (a)",
        "CREATE TABLE t2 LIKE t",
        "CREATE TABLE t (a INT AUTO_INCREMENT, b INT, PRIMARY KEY (a, b))",
        "CREATE TABLE t (a INT, ts TIMESTAMP ON UPDATE 5)",
        "SELECT INTERVAL 1 DAY FROM t",
        "SELECT EXTRACT(YEAR FROM a) FROM t",
        "SELECT 1 XOR 0",
        "SELECT CAST(a AS YEAR) FROM t",
        "SELECT a INTO @x FROM t",
        "UPDATE a JOIN b ON a.id = b.id SET a.x = b.x",
        "DELETE a, b FROM a JOIN b ON a.id = b.id",
        "RENAME TABLE a.t TO b.t",
        "SELECT GROUP_CONCAT(DISTINCT a SEPARATOR ';') FROM t",
        // SQLite's would be shared by every session of the database (docs/server-shim.md).
        "CREATE TEMPORARY TABLE t (a INT)",
        "CREATE TEMPORARY TABLE IF NOT EXISTS t AS SELECT 1 AS a",
        "CREATE TEMPORARY VIEW v AS SELECT 1",
    ] {
        assert_eq!(code(s), 1235, "{s}");
    }
}

#[test]
fn drops_select_modifiers_that_only_tune_execution() {
    let db = db();
    assert_eq!(
        sql("SELECT /*!40001 SQL_NO_CACHE */ a FROM t"),
        ["SELECT a FROM t"]
    );
    assert_eq!(rows(&db, "SELECT SQL_NO_CACHE HIGH_PRIORITY 1"), ["1"]);
}

#[test]
fn sql_calc_found_rows_with_a_limit_adds_a_count_without_it() {
    let t = translate(
        "SELECT SQL_CALC_FOUND_ROWS p.ID FROM wp_posts p WHERE p.title LIKE '%a%' \
         ORDER BY p.title LIKE '%a%' DESC LIMIT ?, ?",
    )
    .unwrap();
    assert_eq!(
        t.statements,
        [
            "SELECT p.ID FROM wp_posts p WHERE mysql_text_typed(p.title, 0) LIKE '%a%' \
             ESCAPE '\\' ORDER BY mysql_text_typed(p.title, 1) LIKE '%a%' ESCAPE '\\' DESC \
             LIMIT ?2 OFFSET ?1"
        ]
    );
    assert_eq!(
        t.found_rows.as_deref(),
        Some(
            "SELECT COUNT(*) FROM (SELECT p.ID FROM wp_posts p WHERE mysql_text_typed(p.title, 0) \
             LIKE '%a%' ESCAPE '\\')"
        )
    );
    // Without a LIMIT the rows sent are the rows found; in a subquery it is not MySQL's.
    assert_eq!(
        translate("SELECT SQL_CALC_FOUND_ROWS a FROM t")
            .unwrap()
            .found_rows,
        None
    );
    let inner = translate("SELECT a FROM (SELECT SQL_CALC_FOUND_ROWS a FROM t LIMIT 1) x LIMIT 1");
    assert_eq!(inner.unwrap().found_rows, None);
}

#[test]
fn unaliased_expressions_keep_the_text_the_client_wrote_as_their_names() {
    let names = |sql: &str| translate(sql).unwrap().column_names;
    let text = |n: &str| Some(n.to_owned());
    assert_eq!(
        names("SELECT id, t.v, id+1, 'abc', COUNT( * ), @@sql_mode, x AS y FROM t GROUP BY id"),
        [
            None,
            None,
            text("id+1"),
            text("abc"),
            text("COUNT( * )"),
            text("@@sql_mode"),
            None
        ]
    );
    // From the first SELECT of a UNION; subqueries and parentheses stay inside their item.
    assert_eq!(
        names("SELECT IF(a, (SELECT 1, 2), 'n'), a FROM t UNION SELECT 1, 2"),
        [text("IF(a, (SELECT 1, 2), 'n')"), None]
    );
    assert_eq!(
        names("SELECT SQL_CALC_FOUND_ROWS DISTINCT a*2 FROM t LIMIT 1"),
        [text("a*2")]
    );
    // A parenthesised column is the column; a column named like a keyword stays in its item.
    assert_eq!(
        names("SELECT DISTINCT(a), (t.b), t.limit+1 FROM t"),
        [None, None, text("t.limit+1")]
    );
    // Nothing to rename, or nothing that can be matched item for item.
    for sql in [
        "SELECT a, b FROM t",
        "SELECT *, a+1 FROM t",
        "WITH c AS (SELECT 1) SELECT 1+1 FROM c",
        "INSERT INTO t SELECT 1+1",
    ] {
        assert!(names(sql).is_empty(), "{sql}");
    }
}

#[test]
fn accepts_dump_key_toggles_with_nothing_to_run() {
    for s in [
        "/*!40000 ALTER TABLE `items` DISABLE KEYS */",
        "ALTER TABLE shop.items ENABLE KEYS",
    ] {
        let t = translate(s).unwrap();
        assert_eq!(
            (t.statements.len(), t.kind),
            (0, StatementKind::Other),
            "{s}"
        );
    }
}

#[test]
fn translates_the_fuzz_corpus_without_a_panic() {
    // On a thread with the stack the server's translating threads get: sqlparser and the
    // rewrite recurse once per nesting level, and a debug build's frames are large.
    std::thread::Builder::new()
        .stack_size(super::THREAD_STACK_BYTES)
        .spawn(|| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fuzz/corpus/shim_sql_translate");
            let mut seen = 0;
            for entry in std::fs::read_dir(&dir).unwrap() {
                let bytes = std::fs::read(entry.unwrap().path()).unwrap();
                if let Ok(sql) = std::str::from_utf8(&bytes) {
                    let _ = super::translate_unguarded(sql, Some("db"));
                    seen += 1;
                }
            }
            assert!(seen >= 7, "corpus missing: {}", dir.display());
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn finds_schema_qualifiers_outside_strings() {
    assert!(super::names_schema(
        "SELECT * FROM INFORMATION_SCHEMA.TABLES",
        "information_schema"
    ));
    assert!(!super::names_schema(
        "INSERT INTO notes VALUES ('see information_schema.tables')",
        "information_schema"
    ));
    assert!(!super::names_schema(
        "CREATE TABLE t (information_schema_ver INT)",
        "information_schema"
    ));
}

#[test]
fn refuses_operator_chains_too_long_to_walk() {
    // On a thread with the stack the shim's runtime threads get.
    std::thread::Builder::new()
        .stack_size(super::THREAD_STACK_BYTES)
        .spawn(|| {
            let chain = |n: usize| format!("SELECT 1{}", "+1".repeat(n));
            assert!(translate(&chain(1000)).is_ok());
            assert_eq!(translate(&chain(1001)).unwrap_err().code(), 1235);
            assert_eq!(translate(&chain(50_000)).unwrap_err().code(), 1235);
            // Many short expressions are fine: the chain restarts at each comma.
            let row = format!("({})", vec!["-1"; 50].join(", "));
            let insert = format!("INSERT INTO t VALUES {}", vec![row; 200].join(", "));
            assert!(translate(&insert).is_ok());
        })
        .unwrap()
        .join()
        .unwrap();
}

/// What sqlparser 0.64 reads differently from 0.52, and how the translation reads it.
#[test]
fn reads_what_sqlparser_0_64_changed() {
    // A backslash before `_`/`%` is kept, as MySQL keeps it, and LIKE gets MySQL's escape.
    assert_eq!(
        sql("SELECT a FROM t WHERE a LIKE 'r\\_%'"),
        ["SELECT a FROM t WHERE mysql_text_typed(a, 0) LIKE 'r\\_%' ESCAPE '\\'"]
    );
    // The last COLLATE of a column wins.
    assert_eq!(
        sql("CREATE TABLE t (a CHAR(10) COLLATE latin1_swedish_ci NOT NULL COLLATE latin1_bin)"),
        ["CREATE TABLE `t` (`a` CHAR(10) COLLATE mysql_bin NOT NULL)"]
    );
    assert_eq!(
        sql("RENAME TABLE a TO b, s.c TO s.d"),
        [
            "ALTER TABLE `a` RENAME TO `b`",
            "ALTER TABLE `s`.`c` RENAME TO `d`"
        ]
    );
    assert_eq!(
        sql("SELECT 7 MOD 2, 7 DIV 2"),
        ["SELECT mysql_mod(7, 2), CAST(7 / 2 AS INTEGER)"]
    );
}

/// `@@x` and `@x` inside a statement read the session's variables through the engine's
/// functions (Django's first query mixes them with functions; dumps use `@OLD_X`).
#[test]
fn reads_variables_inside_statements() {
    assert_eq!(
        sql("SELECT VERSION(), @@sql_mode, @@SESSION.Time_Zone, @n FROM t WHERE id = @n"),
        ["SELECT VERSION(), mysql_system_variable('sql_mode'), \
          mysql_system_variable('time_zone'), mysql_user_variable('n') FROM t \
          WHERE id = mysql_user_variable('n')"]
    );
}

/// `+ INTERVAL`, `- INTERVAL`, `DATE_ADD`, `DATE_SUB` (1235 before): the engine's date
/// arithmetic, with MySQL's month rules.
#[test]
fn date_arithmetic_with_intervals() {
    assert_eq!(
        sql("SELECT NOW() + INTERVAL 1 DAY, DATE_SUB(d, INTERVAL '2' MONTH) FROM t"),
        [
            "SELECT mysql_date_add(CURRENT_TIMESTAMP, 1, 'day'), mysql_date_add(d, -'2', 'month') FROM t"
        ]
    );
    let db = db();
    crate::mysql_functions::register(&db, "", &std::sync::Arc::default()).unwrap();
    for (mysql, want) in [
        ("DATE_ADD('2020-01-31', INTERVAL 1 MONTH)", "2020-02-29"),
        ("'2020-03-31' - INTERVAL 1 MONTH", "2020-02-29"),
        (
            "INTERVAL 2 HOUR + '2020-01-01 23:00:00'",
            "2020-01-02 01:00:00",
        ),
        (
            "DATE_ADD('2020-01-01', INTERVAL 90 MINUTE)",
            "2020-01-01 01:30:00",
        ),
        ("ADDDATE('2021-12-31', INTERVAL 1 YEAR)", "2022-12-31"),
        ("DATE_SUB('2020-01-01', INTERVAL 1 WEEK)", "2019-12-25"),
        ("DATE_ADD(NULL, INTERVAL 1 DAY)", "NULL"),
    ] {
        assert_eq!(rows(&db, &format!("SELECT {mysql}")), [want], "{mysql}");
    }
    // An interval on its own means nothing; the compound units (`HOUR_MINUTE`) are not
    // parsed at all (1064).
    assert_eq!(code("SELECT INTERVAL 1 DAY"), 1235);
}

/// Multi-table DELETE whose targets are one table (1235 before): through a join, and
/// WordPress's self-join that drops a transient with its timeout. Two tables stay refused.
#[test]
fn multi_table_delete_of_one_table() {
    let db = db();
    crate::mysql_functions::register(&db, "", &std::sync::Arc::default()).unwrap();
    run(
        &db,
        "CREATE TABLE country (code CHAR(3) PRIMARY KEY, name VARCHAR(20))",
    );
    run(&db, "CREATE TABLE city (id INT PRIMARY KEY, cc CHAR(3))");
    run(
        &db,
        "INSERT INTO country VALUES ('FRA', 'France'), ('ITA', 'Italy')",
    );
    run(
        &db,
        "INSERT INTO city VALUES (1, 'FRA'), (2, 'ITA'), (3, 'FRA')",
    );
    run(
        &db,
        "DELETE c FROM city c JOIN country k ON k.code = c.cc WHERE k.name = 'France'",
    );
    assert_eq!(rows(&db, "SELECT id FROM city"), ["2"]);
    run(
        &db,
        "DELETE FROM city USING city, country WHERE city.cc = country.code",
    );
    assert!(rows(&db, "SELECT id FROM city").is_empty());

    run(
        &db,
        "CREATE TABLE wp_options (option_id INT PRIMARY KEY, option_name VARCHAR(191), option_value TEXT)",
    );
    run(
        &db,
        "INSERT INTO wp_options VALUES (1, '_transient_a', 'x'), (2, '_transient_timeout_a', 'expired'), \
         (3, '_transient_b', 'y'), (4, '_transient_timeout_b', '999'), (5, 'siteurl', 'z')",
    );
    run(
        &db,
        "DELETE a, b FROM wp_options a, wp_options b \
         WHERE a.option_name LIKE '%transient%' \
         AND a.option_name NOT LIKE '%transient_timeout%' \
         AND b.option_name = CONCAT('_transient_timeout_', SUBSTRING(a.option_name, 12)) \
         AND b.option_value = 'expired'",
    );
    assert_eq!(
        rows(&db, "SELECT option_id FROM wp_options ORDER BY option_id"),
        ["3", "4", "5"]
    );
    assert_eq!(
        code("DELETE c, k FROM city c JOIN country k ON k.code = c.cc"),
        1235
    );
}

/// MySQL's LIKE escapes with a backslash by default: `\_` is a literal underscore (WordPress's
/// `esc_like`). Before, the backslash was dropped and `\_` became a wildcard.
#[test]
fn like_escapes_with_a_backslash_as_in_mysql() {
    let db = db();
    for (mysql, want) in [
        ("SELECT '_transient_a' LIKE '\\_transient\\_%'", "1"),
        ("SELECT 'xtransientya' LIKE '\\_transient\\_%'", "0"),
        ("SELECT '50%' LIKE '50\\%'", "1"),
        ("SELECT '500' LIKE '50\\%'", "0"),
        ("SELECT 'a_b' NOT LIKE 'a\\_b'", "0"),
        ("SELECT 'a|b' LIKE 'a||b' ESCAPE '|'", "1"),
        ("SELECT 'a_b' LIKE 'a|_b' ESCAPE '|'", "1"),
        ("SELECT '\\_'", "\\_"),
    ] {
        assert_eq!(rows(&db, mysql), [want], "{mysql}");
    }
}

/// MySQL's `INSERT … SET` (node-mysql2's `INSERT INTO t SET ?`, which its own suite uses): the
/// `VALUES` row it means, `DEFAULT` and `ON DUPLICATE KEY UPDATE` included.
#[test]
fn insert_set_is_the_values_row_it_means() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, n INT DEFAULT 5, s VARCHAR(9) DEFAULT 'd')",
    );
    assert_eq!(
        sql("INSERT INTO t SET n = ?, s = 'x'"),
        ["INSERT INTO t (n, s) VALUES (?, 'x')"]
    );
    run(&db, "INSERT INTO t SET n = 1, s = DEFAULT");
    run(&db, "INSERT INTO t SET s = 'y'");
    run(
        &db,
        "INSERT INTO t SET id = 1, n = 2 ON DUPLICATE KEY UPDATE n = 9",
    );
    assert_eq!(
        rows(&db, "SELECT CONCAT(id, ':', n, ':', s) FROM t ORDER BY id"),
        ["1:9:d", "2:5:y"]
    );
}

/// `DEFAULT` in a `VALUES` row (TypeORM's `save()`, Drizzle's `insert()`): the column is left
/// out, so it gets its default (an `AUTO_INCREMENT` column its next id).
#[test]
fn default_in_values_leaves_the_column_out() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, n INT DEFAULT 5, s VARCHAR(9) DEFAULT 'd')",
    );
    assert_eq!(
        sql("INSERT INTO t (id, n, s) VALUES (DEFAULT, ?, DEFAULT), (default, ?, DEFAULT)"),
        ["INSERT INTO t (n) VALUES (?), (?)"]
    );
    run(&db, "INSERT INTO t (id, n, s) VALUES (DEFAULT, 1, DEFAULT)");
    run(
        &db,
        "INSERT INTO t (id, n, s) VALUES (DEFAULT, DEFAULT, DEFAULT)",
    );
    run(
        &db,
        "INSERT INTO t (id, n, s) VALUES (DEFAULT, 7, 'x'), (DEFAULT, 8, 'y')",
    );
    assert_eq!(
        rows(&db, "SELECT CONCAT(id, ':', n, ':', s) FROM t ORDER BY id"),
        ["1:1:d", "2:5:d", "3:7:x", "4:8:y"]
    );
    // A quoted `DEFAULT` is a column name, not the keyword.
    assert_eq!(
        sql("INSERT INTO t (id, n) VALUES (`DEFAULT`, 1)"),
        ["INSERT INTO t (id, n) VALUES (`DEFAULT`, 1)"]
    );
    // Rows that leave other columns to their defaults (Drizzle's batch insert): one INSERT
    // per run of rows alike, in order, which the engine runs as one statement.
    assert_eq!(
        sql(
            "INSERT INTO t (id, n, s) VALUES (DEFAULT, ?, DEFAULT), (DEFAULT, ?, DEFAULT), \
             (DEFAULT, ?, ?), (DEFAULT, DEFAULT, DEFAULT), (DEFAULT, DEFAULT, DEFAULT)"
        ),
        [
            "INSERT INTO t (n) VALUES (?), (?)",
            "INSERT INTO t (n, s) VALUES (?, ?)",
            "INSERT INTO t DEFAULT VALUES",
            "INSERT INTO t DEFAULT VALUES"
        ]
    );
    for refused in [
        "INSERT INTO t VALUES (DEFAULT, 1, 'x')",
        "INSERT INTO t (id, n) VALUES (DEFAULT, 1), (2, DEFAULT) ON DUPLICATE KEY UPDATE n = 1",
    ] {
        assert_eq!(code(refused), 1235, "{refused}");
    }
}

/// `CURRENT_TIMESTAMP(p)` (TypeORM's `@CreateDateColumn` and `@UpdateDateColumn`): the
/// engine's clock with `p` decimals, in queries and as a column's default; `ON UPDATE` too.
#[test]
fn current_timestamp_takes_a_precision() {
    assert_eq!(
        sql("SELECT CURRENT_TIMESTAMP(6), NOW(3), NOW(0)"),
        ["SELECT mysql_now(6), mysql_now(3), CURRENT_TIMESTAMP"]
    );
    assert_eq!(code("SELECT NOW(7)"), 1235);
    let created = sql("CREATE TABLE t (id INT PRIMARY KEY, \
         created DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
         updated DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))");
    assert!(created[0].contains("DEFAULT (mysql_now(6))"), "{created:?}");
    assert!(
        created.iter().any(|s| s.contains("updated__on_update")),
        "{created:?}"
    );
}

/// `/` never truncates, as MySQL's; `DIV` does.
#[test]
fn division_is_exact_and_div_truncates() {
    let db = db();
    assert_eq!(rows(&db, "SELECT 7 / 2"), ["3.5"]);
    assert_eq!(rows(&db, "SELECT -7 DIV 2"), ["-3"]);
    assert_eq!(rows(&db, "SELECT 1 / 0"), ["NULL"]);
    assert_eq!(rows(&db, "SELECT 6 / 3"), ["2"]);
}

/// An integer literal SQLite would keep as a float, losing digits, is refused.
#[test]
fn integers_beyond_bigint_are_refused_not_rounded() {
    assert_eq!(code("SELECT 18446744073709551615"), 1235);
    assert_eq!(
        sql("SELECT 9223372036854775807"),
        ["SELECT 9223372036854775807"]
    );
}

/// Strict mode, as MariaDB's default `sql_mode` has it: what SQLite would store and MariaDB
/// refuses is an error (`ddl::value_checks`), with MariaDB's code; what MariaDB converts
/// exactly is kept.
#[test]
fn columns_refuse_values_their_mysql_type_cannot_hold() {
    let db = db();
    run(
        &db,
        "CREATE TABLE t (a INT, t TINYINT, u INT UNSIGNED, b VARCHAR(3), c DECIMAL(5,2), \
         f DOUBLE, bi VARBINARY(2), j JSON)",
    );
    let refused = |set: &str| {
        let (column, value) = set.split_once(" = ").unwrap();
        let statements = checked_sql(&format!("INSERT INTO t ({column}) VALUES ({value})"));
        let err = db
            .execute_batch(&statements.join(";"))
            .map(|()| panic!("{set} was stored"))
            .unwrap_err();
        crate::sqlite::from_sqlite(&err, "shop").code()
    };
    for (set, code) in [
        ("a = 'abc'", 1366),
        ("a = ''", 1366),
        ("a = '12abc'", 1366),
        ("a = 1.5", 1366),
        ("t = 200", 1264),
        ("u = -1", 1264),
        ("b = 'toolong'", 1406),
        ("c = 12345", 1264),
        ("c = 'x'", 1366),
        ("f = 'x'", 1366),
        ("bi = 'héé'", 1406),
        ("j = 'not json'", 1366),
    ] {
        assert_eq!(refused(set), code, "{set}");
    }
    for set in [
        "a = '12'",
        "a = ' 7'",
        "a = true",
        "a = NULL",
        "t = -128",
        "u = 4294967295",
        "b = 'héé'",
        "c = 999.99",
        "c = '-12.5'",
        "f = 1e300",
        "bi = 'ab'",
        "j = '{\"a\": [1]}'",
    ] {
        let (column, value) = set.split_once(" = ").unwrap();
        run(&db, &format!("INSERT INTO t ({column}) VALUES ({value})"));
    }
    assert_eq!(
        rows(&db, "SELECT a FROM t WHERE a IS NOT NULL ORDER BY a"),
        ["1", "7", "12"]
    );
}

/// A refusal names what it refuses, in the client's words.
#[test]
fn a_refused_statement_or_column_option_is_named() {
    for (sql, named) in [
        ("DROP PROCEDURE IF EXISTS `foo.bar`", "'DROP PROCEDURE'"),
        ("CALL foo()", "'CALL'"),
        (
            "CREATE TABLE g (id INT PRIMARY KEY, a INT /*!80003 SRID 0 */)",
            "'the column option SRID 0'",
        ),
    ] {
        let refused = translate(sql).unwrap_err();
        assert_eq!(refused.code(), 1235, "{sql}");
        assert!(
            refused.message.ends_with(named),
            "{sql}: {}",
            refused.message
        );
    }
}

/// MariaDB's `LOCK IN SHARE MODE` parses (and goes, as `FOR UPDATE` does: the session runs the
/// read under the database's lock); in a string it stays.
#[test]
fn lock_in_share_mode_is_read_and_dropped() {
    assert_eq!(
        translate("SELECT a FROM t WHERE a = 1 LOCK IN SHARE MODE")
            .unwrap()
            .statements,
        ["SELECT a FROM t WHERE a = 1"]
    );
    assert_eq!(
        translate("SELECT 'LOCK IN SHARE MODE'").unwrap().statements,
        ["SELECT 'LOCK IN SHARE MODE'"]
    );
    // With how long to wait, which MariaDB takes too.
    for wait in ["NOWAIT", "WAIT 5", "SKIP LOCKED"] {
        assert_eq!(
            translate(&format!("SELECT a FROM t LOCK IN SHARE MODE {wait}"))
                .unwrap()
                .statements,
            ["SELECT a FROM t"]
        );
    }
}
