//! Real application pools as child programs, for the parking and resumable-session tests: each
//! opens a one-connection pool against `PORT` as `DB_USER`/`DB_PASSWORD`, prints its session's
//! `CONNECTION_ID()`, waits for a line on standard input, queries through the pool again and
//! prints `CONNECTION_ID()`, then exits 0.

use std::io::{BufRead as _, BufReader, Lines, Write as _};
use std::process::{Child, ChildStdout, Command, Stdio};

use crate::relay::{KillOnDrop, PASSWORD, USER};

/// SQLAlchemy's `QueuePool` on PyMySQL with `pool_pre_ping` (a `COM_PING` at every checkout;
/// a `ROLLBACK` at every check-in).
#[must_use]
pub fn sqlalchemy() -> Command {
    let script = format!(
        r#"
import os, sys
from sqlalchemy import create_engine, text
engine = create_engine("mysql+pymysql://{USER}:{PASSWORD}@127.0.0.1:" + os.environ["PORT"],
                       pool_size=1, max_overflow=0, pool_pre_ping=True)
with engine.connect() as c:
    print(c.execute(text("SELECT CONNECTION_ID()")).scalar(), flush=True)
sys.stdin.readline()
with engine.connect() as c:
    print(c.execute(text("SELECT CONNECTION_ID()")).scalar(), flush=True)
"#
    );
    let mut python = Command::new("python3");
    python.arg("-c").arg(script);
    python
}

/// Node's `mysql2` `createPool` with one connection.
#[must_use]
pub fn mysql2() -> Command {
    let script = format!(
        r#"
const mysql = require('mysql2/promise');
const readline = require('readline');
(async () => {{
  const pool = mysql.createPool({{ host: '127.0.0.1', port: +process.env.PORT,
    user: '{USER}', password: '{PASSWORD}', connectionLimit: 1 }});
  const id = async () => (await pool.query('SELECT CONNECTION_ID() AS id'))[0][0].id;
  console.log(await id());
  await new Promise((done) => readline.createInterface({{ input: process.stdin }}).once('line', done));
  console.log(await id());
  await pool.end();
  process.exit(0);
}})().catch((e) => {{ console.error(e); process.exit(1); }});
"#
    );
    crate::node(&script)
}

/// Node's `mysql2` pool of one connection running server-side prepared statements, which
/// `mysql2` keeps open in its per-connection cache: before the line it prepares three and
/// closes the first (the open ones are then the compute's 2 and 3, not 1 and 2); after it,
/// it runs both again and prepares a new one, checks every answer, and prints
/// `CONNECTION_ID()` (exit 1 with the answers on stderr when one is wrong).
#[must_use]
pub fn mysql2_prepared() -> Command {
    let script = format!(
        r#"
const mysql = require('mysql2/promise');
const readline = require('readline');
(async () => {{
  const pool = mysql.createPool({{ host: '127.0.0.1', port: +process.env.PORT,
    user: '{USER}', password: '{PASSWORD}', connectionLimit: 1 }});
  const one = async (sql, args) => Object.values((await pool.execute(sql, args))[0][0])[0];
  await one('SELECT 1 + ? AS x', [1]);
  const id = () => one('SELECT CONNECTION_ID() + ? AS id', [0]);
  await one('SELECT CONCAT(?, ?) AS s', ['a', 'b']);
  const c = await pool.getConnection();
  c.unprepare('SELECT 1 + ? AS x');
  c.release();
  console.log(await id());
  await new Promise((done) => readline.createInterface({{ input: process.stdin }}).once('line', done));
  const answers = [await one('SELECT CONCAT(?, ?) AS s', ['c', 'd']),
                   await one('SELECT ? * 2 AS d', [21]),
                   await one('SELECT CONCAT(?, ?) AS s', ['e', 'f'])];
  if (JSON.stringify(answers) !== JSON.stringify(['cd', 42, 'ef'])) {{
    console.error('wrong answers: ' + JSON.stringify(answers));
    process.exit(1);
  }}
  console.log(await id());
  await pool.end();
  process.exit(0);
}})().catch((e) => {{ console.error(e); process.exit(1); }});
"#
    );
    crate::node(&script)
}

/// HikariCP (Debian's 2.7) on MariaDB Connector/J (`tests/clients/java/HikariPool.java`).
///
/// # Panics
/// If `tests/clients/install` has not compiled it.
#[must_use]
pub fn hikaricp() -> Command {
    let classes = crate::target_dir().join("clients/java");
    assert!(
        classes.join("HikariPool.class").is_file(),
        "{}/HikariPool.class is missing: run tests/clients/install",
        classes.display()
    );
    let mut java = Command::new("java");
    java.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
        .arg(format!(
            "/usr/share/java/HikariCP.jar:/usr/share/java/slf4j-api.jar:\
             /usr/share/java/mariadb-java-client.jar:{}",
            classes.display()
        ))
        .arg("HikariPool");
    java
}

/// Go's `database/sql` on go-sql-driver/mysql, pinging every 200 ms while it waits
/// (`tests/clients/go/pool`).
///
/// # Panics
/// If `tests/clients/install` has not built it.
#[must_use]
pub fn go() -> Command {
    let program = crate::target_dir().join("clients/go/pool");
    assert!(
        program.is_file(),
        "{} is missing: run tests/clients/install",
        program.display()
    );
    Command::new(program)
}

/// A running pool program (killed by PID when dropped).
pub struct Pool {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    _kill: KillOnDrop,
    /// The first `CONNECTION_ID()` it printed.
    pub first: String,
}

impl Pool {
    /// Starts `program` against the relay on `port` and reads its first line.
    ///
    /// # Panics
    /// If it cannot start or prints nothing (its standard error is in the message).
    #[must_use]
    pub fn start(name: &str, mut program: Command, port: u16) -> Self {
        let mut child = program
            .env("PORT", port.to_string())
            .env("DB_USER", USER)
            .env("DB_PASSWORD", PASSWORD)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let kill = KillOnDrop(Some(child.id()));
        let Some(stdout) = child.stdout.take() else {
            panic!("{name}: no stdout");
        };
        let mut lines = BufReader::new(stdout).lines();
        let Some(Ok(first)) = lines.next() else {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("{name}: the pool program printed nothing (tests/clients/install?): {err}");
        };
        Self {
            child,
            lines,
            _kill: kill,
            first,
        }
    }

    /// Lets it query again; returns the second `CONNECTION_ID()` once it has exited 0.
    ///
    /// # Panics
    /// If it prints nothing more or fails (its standard error is in the message).
    #[must_use]
    pub fn finish(mut self) -> String {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"go\n");
        }
        let last = self.lines.next().and_then(Result::ok);
        let out = self
            .child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{e}"));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        last.unwrap_or_else(|| panic!("printed no second line: {err}"))
    }
}
