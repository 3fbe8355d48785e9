//! Cross-process integration tests (real binaries, real clients). Helpers live here; the
//! tests are under `tests/tests/`.
//!
//! The harness (STYLE "Tests across processes"): [`bin_path`] finds a workspace binary under
//! `target/<profile>/` (Cargo sets `CARGO_BIN_EXE_*` only for binaries of the same package,
//! so build the binaries first: `cargo build -p server-shim && cargo test -p tests`);
//! [`free_port`] binds `127.0.0.1:0`; [`Shim::start`] spawns `server-shim run` on its own
//! port and data directory and polls until a MySQL greeting arrives (bounded by a deadline,
//! never a fixed sleep); every child is killed by PID on drop. [`mariadb`] and [`python`] run
//! the real clients and return their output; [`raw`] speaks the MySQL protocol over a raw
//! socket for tests that act as the relay.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a child may take to greet on its port (before [`scaled`]).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Read and write timeout for raw sockets in tests (before [`scaled`]).
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable that says how much slower than an idle machine this run may be.
pub const SLOWDOWN_VAR: &str = "PERCEPTRON_TEST_SLOWDOWN";

/// How many times slower than an idle two-core machine this run may be: `$PERCEPTRON_TEST_SLOWDOWN`
/// (a number, 1 or more; 1 when unset). `scripts/test --under-load` raises it. Every deadline
/// the harness waits for goes through [`scaled`], so a loaded machine makes a test slower,
/// never failed (CONTRIBUTING.md, *A busy machine*).
///
/// # Panics
/// If the variable is set to anything but a number of at least 1.
#[must_use]
pub fn slowdown() -> f64 {
    static FACTOR: OnceLock<f64> = OnceLock::new();
    *FACTOR.get_or_init(|| match std::env::var(SLOWDOWN_VAR) {
        Err(_) => 1.0,
        Ok(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 1.0)
            .unwrap_or_else(|| panic!("{SLOWDOWN_VAR}={text:?}: give a number, 1 or more")),
    })
}

/// `within` stretched by [`slowdown`]: how long a test waits for something that takes
/// `within` on an idle machine.
#[must_use]
pub fn scaled(within: Duration) -> Duration {
    within.mul_f64(slowdown())
}

/// The `mariadb` CLI's `--connect-timeout` (also its limit on reading the login's answer,
/// which includes a wake): `secs` seconds, [`scaled`].
#[must_use]
pub fn connect_timeout_arg(secs: u64) -> String {
    format!(
        "--connect-timeout={}",
        scaled(Duration::from_secs(secs)).as_secs()
    )
}

/// A duration setting for a test's relay or compute (`"45000ms"`): `secs` seconds,
/// [`scaled`]. For the generous limits the harness sets by default; a test of a timeout sets
/// its own value, unscaled.
#[must_use]
pub fn scaled_setting(secs: u64) -> &'static str {
    static SETTINGS: std::sync::Mutex<Vec<(u64, &'static str)>> = std::sync::Mutex::new(Vec::new());
    let mut settings = SETTINGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, text)) = settings.iter().find(|(s, _)| *s == secs) {
        return text;
    }
    // One string per distinct value, kept for the process's life.
    let text: &'static str =
        Box::leak(format!("{}ms", scaled(Duration::from_secs(secs)).as_millis()).into_boxed_str());
    settings.push((secs, text));
    text
}

/// The workspace's target directory: `$CARGO_TARGET_DIR` if set, else `<workspace>/target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// `target/<profile>/<name>` of a workspace binary (debug unless `PERCEPTRON_PROFILE` says
/// otherwise).
///
/// # Panics
/// If the binary has not been built, with the command that builds it.
#[must_use]
pub fn bin_path(name: &str) -> PathBuf {
    let profile = std::env::var("PERCEPTRON_PROFILE").unwrap_or_else(|_| "debug".into());
    let path = target_dir().join(profile).join(name);
    assert!(
        path.is_file(),
        "{} not found: build it first (cargo build -p {name})",
        path.display()
    );
    path
}

/// A port that was free a moment ago: bound and released, below the kernel's ephemeral
/// range.
///
/// # Panics
/// If no port can be bound.
#[must_use]
pub fn free_port() -> u16 {
    // Below the ephemeral range: the kernel gives ports from that range to every outgoing
    // connection, and a test that opens hundreds of them (the login bursts) would take a
    // port another test had picked and not yet bound (its compute's, HAProxy's), failing it.
    // Tests in one process run in parallel: a port given to one test (or twice to the same
    // test, for its relay and its compute) is never given out again by this process.
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    const LOWEST: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    for _ in 0..10_000 {
        let port = if ephemeral_low > LOWEST + 1_000 {
            rand::Rng::gen_range(&mut rand::thread_rng(), LOWEST..ephemeral_low)
        } else {
            0
        };
        let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) else {
            continue;
        };
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        let fresh = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port);
        if fresh {
            return port;
        }
    }
    panic!("no free port below {ephemeral_low}");
}

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `label`.
    ///
    /// # Panics
    /// If it cannot be created.
    #[must_use]
    pub fn new(label: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "perceptron-test-{}-{}-{label}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    /// The path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Polls `127.0.0.1:port` until a MySQL greeting (a packet with sequence id 0) arrives, or
/// `within` ([`scaled`]) has passed since `since`. Returns the greeting's payload.
///
/// # Errors
/// The last failure, once the deadline has passed.
pub fn wait_for_greeting(port: u16, since: Instant, within: Duration) -> Result<Vec<u8>, String> {
    wait_for_greeting_at(SocketAddr::from(([127, 0, 0, 1], port)), since, within)
}

/// [`wait_for_greeting`] on `addr`.
///
/// # Errors
/// As [`wait_for_greeting`].
pub fn wait_for_greeting_at(
    addr: SocketAddr,
    since: Instant,
    within: Duration,
) -> Result<Vec<u8>, String> {
    let deadline = since + scaled(within);
    let port = addr.port();
    let mut last = String::from("never tried");
    while Instant::now() < deadline {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                match raw::read_packet(&mut s) {
                    Ok((0, payload)) => return Ok(payload),
                    Ok((seq, _)) => last = format!("first packet had sequence id {seq}"),
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("no MySQL greeting on port {port}: {last}"))
}

/// A child process killed (SIGKILL, by PID) on drop.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
}

impl ChildGuard {
    /// Guards `child`.
    #[must_use]
    pub fn new(child: Child) -> Self {
        Self { child: Some(child) }
    }

    /// The PID.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGKILL and reaps the child.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits up to `timeout` ([`scaled`]) for the child to exit on its own: its status and
    /// what it wrote to a piped stderr; `None` if it is still running (it is then killed).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, String)> {
        let mut c = self.child.take()?;
        let deadline = Instant::now() + scaled(timeout);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = c.stderr.take() {
                    let _ = io::Read::read_to_string(&mut e, &mut err);
                }
                return Some((status, err));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// Sends `signal` (a `kill` signal name, e.g. `TERM`) and waits up to `timeout`
    /// ([`scaled`]) for the exit; `None` if it did not exit (the child is then killed).
    pub fn signal_and_wait(&mut self, signal: &str, timeout: Duration) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + scaled(timeout);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A running `server-shim`.
#[derive(Debug)]
pub struct Shim {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its data directory.
    pub data: PathBuf,
    log: PathBuf,
    /// The process.
    pub child: ChildGuard,
    /// From spawn until the greeting arrived.
    pub ready_after: Duration,
}

impl Shim {
    /// Starts `server-shim run` on a free port with `data` (and `key_file`), logging to
    /// `<data>/../<port>.log`, and waits for its greeting.
    ///
    /// # Panics
    /// If it does not greet before [`READY_TIMEOUT`] (with its log).
    #[must_use]
    pub fn start(data: &Path, key_file: Option<&Path>, extra: &[&str]) -> Self {
        let port = free_port();
        let log = data
            .parent()
            .unwrap_or(data)
            .join(format!("server-shim-{port}.log"));
        let log_file = fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut cmd = Command::new(bin_path("server-shim"));
        cmd.arg("run")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data")
            .arg(data)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        if let Some(k) = key_file {
            cmd.arg("--key-file").arg(k);
        }
        let spawned = Instant::now();
        let child = ChildGuard::new(cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}")));
        let ready = wait_for_greeting(port, spawned, READY_TIMEOUT);
        let ready_after = spawned.elapsed();
        let shim = Self {
            port,
            data: data.to_owned(),
            log,
            child,
            ready_after,
        };
        if let Err(e) = ready {
            panic!("{e}\nserver-shim log:\n{}", shim.log());
        }
        shim
    }

    /// Everything the shim logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Adds an account with `server-shim user add ... --password-stdin`.
///
/// # Panics
/// If the command fails.
pub fn add_user(data: &Path, name: &str, password: &str, admin: bool) {
    let mut cmd = Command::new(bin_path("server-shim"));
    cmd.args(["user", "add", name, "--password-stdin", "--data"])
        .arg(data);
    if admin {
        cmd.arg("--admin");
    }
    let out = run_with_input(&mut cmd, password.as_bytes(), Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "user add {name}: {}", out.stderr);
}

/// What a client process printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit code (`None` if killed by a signal or the deadline).
    pub code: Option<i32>,
}

/// The standard output of a client that must have succeeded; the test fails with both
/// streams otherwise.
///
/// # Panics
/// If the client did not exit 0.
pub fn ok(out: &Output) -> &str {
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    &out.stdout
}

/// A server-shim on a fresh data directory under `tmp` with one admin account, `user`.
#[must_use]
pub fn shim_with_admin(tmp: &TempDir, user: &str, password: &str) -> Shim {
    let data = tmp.path().join("data");
    add_user(&data, user, password, true);
    Shim::start(&data, None, &[])
}

/// `node -e script`, run where `tests/clients/install` put `mysql2`.
#[must_use]
pub fn node(script: &str) -> Command {
    let mut node = Command::new("node");
    node.arg("-e")
        .arg(script)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/clients/node"));
    node
}

/// Runs `cmd` with `input` on stdin, killing it after `timeout` ([`scaled`]).
///
/// # Panics
/// If it cannot be spawned.
pub fn run_with_input(cmd: &mut Command, input: &[u8], timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + scaled(timeout);
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Output {
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
        code,
    }
}

/// Runs the `mariadb` CLI against `127.0.0.1:port` in batch mode (`-N -B`, no TLS), with
/// `sql` given by `-e` and any `extra` arguments (e.g. `--force`, `-Dshop`).
#[must_use]
pub fn mariadb(port: u16, user: &str, password: Option<&str>, extra: &[&str], sql: &str) -> Output {
    let mut cmd = Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{port}"))
        .arg(format!("-u{user}"))
        .args(["--skip-ssl", "-N", "-B"])
        .arg(connect_timeout_arg(10));
    if let Some(p) = password {
        cmd.arg(format!("-p{p}"));
    }
    cmd.args(extra).arg("-e").arg(sql);
    run_with_input(&mut cmd, b"", Duration::from_secs(60))
}

/// Runs sysbench's `oltp_read_write` `phase` (`prepare`, `run`) with `extra` options against
/// database `sbtest` on `port` as `user`: two tables of 1,000 rows, a two-minute deadline.
#[must_use]
pub fn sysbench_read_write(
    port: u16,
    user: &str,
    password: &str,
    phase: &str,
    extra: &[&str],
) -> Output {
    let mut cmd = Command::new("sysbench");
    cmd.args([
        "oltp_read_write",
        "--db-driver=mysql",
        "--mysql-host=127.0.0.1",
        &format!("--mysql-port={port}"),
        &format!("--mysql-user={user}"),
        &format!("--mysql-password={password}"),
        "--mysql-db=sbtest",
        "--mysql-ssl=off",
        "--tables=2",
        "--table-size=1000",
    ])
    .args(extra)
    .arg(phase);
    run_with_input(&mut cmd, b"", Duration::from_secs(120))
}

/// Runs the `mariadb` CLI with `script` on stdin (statements separated by `;`).
#[must_use]
pub fn mariadb_script(
    port: u16,
    user: &str,
    password: Option<&str>,
    extra: &[&str],
    script: &str,
) -> Output {
    let mut cmd = Command::new("mariadb");
    cmd.arg("-h127.0.0.1")
        .arg(format!("-P{port}"))
        .arg(format!("-u{user}"))
        .args(["--skip-ssl", "-N", "-B"])
        .arg(connect_timeout_arg(10));
    if let Some(p) = password {
        cmd.arg(format!("-p{p}"));
    }
    cmd.args(extra);
    run_with_input(&mut cmd, script.as_bytes(), Duration::from_secs(60))
}

/// Runs a Python snippet (`python3 -c`), e.g. with PyMySQL. `PORT` in the environment holds
/// `port`.
#[must_use]
pub fn python(port: u16, code: &str, timeout: Duration) -> Output {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(code).env("PORT", port.to_string());
    run_with_input(&mut cmd, b"", timeout)
}

/// The MySQL protocol over a raw socket, for tests that play the relay or a client.
pub mod raw {
    use super::{IO_TIMEOUT, TcpStream, io};
    use std::io::{Read as _, Write as _};

    /// Connects to `127.0.0.1:port` with read/write timeouts.
    ///
    /// # Errors
    /// The connect error.
    pub fn connect(port: u16) -> io::Result<TcpStream> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(super::scaled(IO_TIMEOUT)))?;
        s.set_write_timeout(Some(super::scaled(IO_TIMEOUT)))?;
        Ok(s)
    }

    /// Connects to `127.0.0.1:port` from `source` (another loopback address, such as
    /// `127.0.0.2`: a second client source on one machine), with read/write timeouts.
    ///
    /// # Errors
    /// The bind or connect error.
    pub fn connect_from(source: std::net::IpAddr, port: u16) -> io::Result<TcpStream> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        socket.bind(&std::net::SocketAddr::new(source, 0).into())?;
        socket.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
        let s: TcpStream = socket.into();
        s.set_read_timeout(Some(super::scaled(IO_TIMEOUT)))?;
        s.set_write_timeout(Some(super::scaled(IO_TIMEOUT)))?;
        Ok(s)
    }

    /// Reads one packet (one frame; tests never see 16 MiB packets): `(sequence_id,
    /// payload)`.
    ///
    /// # Errors
    /// On a read error or timeout.
    pub fn read_packet(s: &mut TcpStream) -> io::Result<(u8, Vec<u8>)> {
        let mut header = [0u8; 4];
        s.read_exact(&mut header)?;
        let [a, b, c, seq] = header;
        let len = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload)?;
        Ok((seq, payload))
    }

    /// Writes one packet.
    ///
    /// # Errors
    /// On a write error.
    pub fn write_packet(s: &mut TcpStream, seq: u8, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(payload.len() + 4);
        authplugin::packet::write_packet(&mut out, seq, payload);
        s.write_all(&out)
    }

    /// Logs in to `127.0.0.1:port` as a stock client would with `mysql_native_password`,
    /// following one AuthSwitchRequest to it: the stream in the command phase, or the
    /// server's ERR as `(code, message)`.
    ///
    /// # Errors
    /// On I/O failure or a reply that is none of OK, ERR or a native switch.
    pub fn login(
        port: u16,
        user: &str,
        password: &str,
        database: Option<&str>,
    ) -> io::Result<Result<TcpStream, (u16, String)>> {
        login_on(connect(port)?, user, password, database)
    }

    /// [`login`] from another loopback address `source` ([`connect_from`]).
    ///
    /// # Errors
    /// As [`connect_from`] and [`login`].
    pub fn login_from(
        source: std::net::IpAddr,
        port: u16,
        user: &str,
        password: &str,
        database: Option<&str>,
    ) -> io::Result<Result<TcpStream, (u16, String)>> {
        login_on(connect_from(source, port)?, user, password, database)
    }

    /// [`login`], with the connection id the server's greeting gave.
    ///
    /// # Errors
    /// As [`login`].
    pub fn login_greeted(
        port: u16,
        user: &str,
        password: &str,
        database: Option<&str>,
    ) -> io::Result<Result<(TcpStream, u32), (u16, String)>> {
        greeted_login_on(connect(port)?, user, password, database)
    }

    /// [`login`] on a stream already connected (the greeting may already have arrived).
    ///
    /// # Errors
    /// As [`login`].
    pub fn login_on(
        s: TcpStream,
        user: &str,
        password: &str,
        database: Option<&str>,
    ) -> io::Result<Result<TcpStream, (u16, String)>> {
        Ok(greeted_login_on(s, user, password, database)?.map(|(s, _)| s))
    }

    /// [`login_on`], with the greeting's connection id.
    fn greeted_login_on(
        mut s: TcpStream,
        user: &str,
        password: &str,
        database: Option<&str>,
    ) -> io::Result<Result<(TcpStream, u32), (u16, String)>> {
        use authplugin::packet::capabilities::{
            CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41,
            CLIENT_SECURE_CONNECTION,
        };
        use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41, HandshakeV10};
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let (_, greeting) = read_packet(&mut s)?;
        let g = HandshakeV10::decode(&greeting).map_err(|_| bad("greeting"))?;
        let scramble = g.scramble().ok_or_else(|| bad("scramble"))?;
        let mut flags = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
        if database.is_some() {
            flags |= CLIENT_CONNECT_WITH_DB;
        }
        let response = HandshakeResponse41 {
            client_flag: flags,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: user.as_bytes().to_vec(),
            auth_response: zeroize::Zeroizing::new(authplugin::native_password::token(
                password.as_bytes(),
                &scramble,
            )),
            database: database.map(|d| d.as_bytes().to_vec()),
            client_plugin_name: Some(b"mysql_native_password".to_vec()),
            connect_attrs: None,
            zstd_compression_level: None,
        };
        write_packet(&mut s, 1, &response.to_bytes())?;
        let (mut seq, mut reply) = read_packet(&mut s)?;
        if reply.first() == Some(&0xFE) {
            let switch = AuthSwitchRequest::decode(&reply).map_err(|_| bad("auth switch"))?;
            let b = switch.scramble().ok_or_else(|| bad("switch scramble"))?;
            let answer = authplugin::native_password::token(password.as_bytes(), &b);
            write_packet(&mut s, seq.wrapping_add(1), &answer)?;
            (seq, reply) = read_packet(&mut s)?;
        }
        let _ = seq;
        match reply.first() {
            Some(0x00) => Ok(Ok((s, g.connection_id))),
            Some(0xFF) => Ok(Err(err_of(&reply))),
            _ => Err(bad("login reply")),
        }
    }

    /// The first column of each row, or an ERR's `(code, message)`.
    pub type QueryResult = Result<Vec<Option<String>>, (u16, String)>;

    /// Rows of [`send_large_result_query`]'s result.
    pub const LARGE_RESULT_ROWS: usize = 300_000;

    /// Sends a query whose result (300,000 rows of 200 bytes, about 61 MB) is far larger
    /// than the sockets' buffers, and reads nothing: the compute cannot finish sending it
    /// until the client reads ([`read_large_result`]).
    ///
    /// # Errors
    /// On I/O failure.
    pub fn send_large_result_query(s: &mut TcpStream) -> io::Result<()> {
        let sql = format!(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < \
             {LARGE_RESULT_ROWS}) SELECT printf('%0200d', x) FROM n"
        );
        let mut payload = vec![0x03];
        payload.extend_from_slice(sql.as_bytes());
        write_packet(s, 0, &payload)
    }

    /// Reads [`send_large_result_query`]'s whole result: how many rows it had.
    ///
    /// # Panics
    /// On an I/O error, an ERR, or a result that is not one column.
    #[must_use]
    pub fn read_large_result(s: &mut TcpStream) -> usize {
        let (_, columns) = read_packet(s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(columns, [1], "one column");
        let mut rows = 0;
        loop {
            let (_, p) = read_packet(s).unwrap_or_else(|e| panic!("{e}"));
            match p.first() {
                // The EOF after the rows (the one after the column definition comes first).
                Some(0xFE) if p.len() < 9 && rows > 0 => return rows,
                Some(0xFF) => panic!("{:?}", err_of(&p)),
                _ if p.len() > 150 => rows += 1,
                _ => {} // the column definition
            }
        }
    }

    /// What a session carries that a parked, thawed or reattached session must keep: its
    /// `CONNECTION_ID()`, `DATABASE()` and `@@SESSION.sql_mode`.
    ///
    /// # Panics
    /// If a query fails.
    #[must_use]
    pub fn session_state(s: &mut TcpStream) -> [Option<String>; 3] {
        ["CONNECTION_ID()", "DATABASE()", "@@SESSION.sql_mode"]
            .map(|what| one_row(s, &format!("SELECT {what}")))
    }

    /// The first column of the first row `sql` returns (`None` for NULL or no row).
    ///
    /// # Panics
    /// On an I/O error or an ERR.
    pub fn one_row(s: &mut TcpStream, sql: &str) -> Option<String> {
        match query(s, sql) {
            Ok(Ok(rows)) => rows.into_iter().next().flatten(),
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// Sends COM_QUERY `sql` and returns the first column of every text row (`None` for NULL),
    /// or the ERR packet's `(code, message)`.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn query(s: &mut TcpStream, sql: &str) -> io::Result<QueryResult> {
        let mut payload = vec![0x03];
        payload.extend_from_slice(sql.as_bytes());
        write_packet(s, 0, &payload)?;
        let (_, first) = read_packet(s)?;
        match first.first() {
            Some(0xFF) => return Ok(Err(err_of(&first))),
            Some(0x00) => return Ok(Ok(Vec::new())),
            _ => {}
        }
        let columns = usize::from(first.first().copied().unwrap_or(0));
        for _ in 0..columns {
            read_packet(s)?;
        }
        // Without CLIENT_DEPRECATE_EOF an EOF follows the column definitions.
        read_packet(s)?;
        let mut rows = Vec::new();
        loop {
            let (_, p) = read_packet(s)?;
            match p.first() {
                Some(0xFE) if p.len() < 9 => return Ok(Ok(rows)),
                Some(0xFF) => return Ok(Err(err_of(&p))),
                Some(0xFB) => rows.push(None),
                Some(&len) if len < 0xFB => {
                    let text = p.get(1..=usize::from(len)).unwrap_or_default();
                    rows.push(Some(String::from_utf8_lossy(text).into_owned()));
                }
                _ => rows.push(Some(String::from_utf8_lossy(&p).into_owned())),
            }
        }
    }

    /// Asserts that the next read on `s` sees its connection end (an end of stream or a
    /// reset), not its read timeout.
    ///
    /// # Panics
    /// When it does not.
    pub fn assert_connection_ended(s: &mut TcpStream) {
        let t = std::time::Instant::now();
        let mut buf = [0u8; 64];
        let read = s.read(&mut buf);
        assert!(
            matches!(read, Ok(0))
                || read.as_ref().is_err_and(|e| !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                )),
            "{read:?} after {:?}",
            t.elapsed()
        );
    }

    /// `(error_code, message)` of an ERR packet payload.
    #[must_use]
    pub fn err_of(payload: &[u8]) -> (u16, String) {
        match authplugin::packet::ErrPacket::decode(payload) {
            Ok(e) => (
                e.error_code,
                String::from_utf8_lossy(&e.error_message).into_owned(),
            ),
            Err(_) => (0, String::from_utf8_lossy(payload).into_owned()),
        }
    }
}

/// A tmpfs mounted for one test, unmounted on drop.
#[derive(Debug)]
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` on `dir`; `None` (with a loud line) when not root. As root,
    /// a mount that fails fails the test.
    ///
    /// # Panics
    /// As root, if the mount fails.
    #[must_use]
    pub fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let uid = Command::new("id").arg("-u").output().unwrap();
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!(
                "SKIPPED: mounting a tmpfs needs root (CI runs as root); this test did not run"
            );
            return None;
        }
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount -t tmpfs on {} failed as root: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Self(dir.to_owned()))
    }

    /// Remounts it with `options` (e.g. `size=64m`).
    ///
    /// # Panics
    /// If the remount fails.
    pub fn remount(&self, options: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a process of a failed test): detach it, so nothing stays mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

pub mod cgroup;
pub mod hosts;
pub mod mariadb;
pub mod pools;
pub mod relay;
pub mod s3;
pub mod tls;
