//! Running the relay in tests: a configuration on free ports, a managed server-shim instance
//! (or any driver command), the admin API, and a memory scanner for the credential-free proof.

use std::fs;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::hosts::ThreeHosts;
use crate::{
    ChildGuard, READY_TIMEOUT, add_user, bin_path, free_port, scaled, scaled_setting,
    wait_for_greeting_at,
};

/// How a test relay is configured.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// The compute command; `None` runs server-shim on the instance's compute port with the
    /// test's data directory and key file.
    pub command: Option<Vec<String>>,
    /// `resume_timeout`.
    pub resume_timeout: &'static str,
    /// `idle_pause_after`.
    pub idle_pause_after: &'static str,
    /// `handshake_timeout` (how long a client may take to log in).
    pub handshake_timeout: &'static str,
    /// `compute_timeout` (how long one step with the compute may take).
    pub compute_timeout: &'static str,
    /// `on_relay_exit`.
    pub on_relay_exit: &'static str,
    /// Replaces the whole `[instance.driver]` table (`{COMPUTE_PORT}` and `{DIR}` are
    /// substituted).
    pub driver_toml: Option<String>,
    /// `auth`.
    pub auth: &'static str,
    /// `proxy_protocol`.
    pub proxy_protocol: bool,
    /// Extra lines for the `[relay]` table (`{DIR}` is substituted).
    pub relay_toml: String,
    /// Extra lines for the `[[instance]]` table, before its driver.
    pub instance_toml: String,
    /// Start the relay as the leader of a process group of its own, so the test can signal
    /// the whole group as a terminal does (`kill -INT -- -<pid>`).
    pub own_process_group: bool,
    /// A program, with its arguments, that runs the relay (e.g. `setpriv` dropping
    /// capabilities); empty runs it directly.
    pub launcher: Vec<String>,
    /// Runs the relay and its compute on hosts of their own ([`ThreeHosts`]) instead of
    /// loopback: the relay listens (clients and the admin API, with a token) on its host's
    /// client-side address, the compute on its own host.
    pub hosts: Option<Arc<ThreeHosts>>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            command: None,
            resume_timeout: scaled_setting(15),
            idle_pause_after: "5m",
            // Generous by default: a loaded 2-core machine (a build, another test binary,
            // an etcd election) can stall a process for seconds. Tests of a timeout set it.
            handshake_timeout: scaled_setting(30),
            compute_timeout: scaled_setting(30),
            on_relay_exit: "pause",
            driver_toml: None,
            auth: "dual",
            proxy_protocol: false,
            relay_toml: String::new(),
            instance_toml: String::new(),
            own_process_group: false,
            launcher: Vec::new(),
            hosts: None,
        }
    }
}

/// A running relay with one instance named `demo`.
#[derive(Debug)]
pub struct Relay {
    /// Where clients connect: the relay's address (loopback, or its host's).
    pub host: IpAddr,
    /// Where clients connect.
    pub port: u16,
    /// The compute's address.
    pub compute_host: IpAddr,
    /// Where the compute listens.
    pub compute_port: u16,
    /// The admin API port.
    pub admin_port: u16,
    /// The test's directory (config, key, state, data).
    pub dir: PathBuf,
    /// The relay process.
    pub child: ChildGuard,
    log: PathBuf,
    options: RelayOptions,
    /// The admin API's token, where it needs one (on hosts of its own).
    admin_token: Option<String>,
}

/// The demo account every test relay's shim has.
pub const USER: &str = "app";
/// Its password.
pub const PASSWORD: &str = "Tr0ub4dor&3-perceptron";

impl Relay {
    /// Creates a key file and a shim data directory with the demo account in `dir`, writes a
    /// configuration, starts the relay and waits until it greets (paused instances greet from
    /// the relay itself, without waking).
    ///
    /// # Panics
    /// If any step fails, with the relay's log.
    #[must_use]
    pub fn start(dir: &Path, options: RelayOptions) -> Self {
        let key = dir.join("perceptron.key");
        if !key.exists() {
            keygen(&key, "test-1");
            add_user(&dir.join("data"), USER, PASSWORD, true);
        }
        let (port, compute_port, admin_port) = (free_port(), free_port(), free_port());
        Self::launch(dir, options, port, compute_port, admin_port)
    }

    /// As [`Relay::start`], with the instance's compute on `compute_port` (relays of one
    /// fleet share a compute).
    ///
    /// # Panics
    /// As [`Relay::start`].
    #[must_use]
    pub fn start_with_compute(dir: &Path, options: RelayOptions, compute_port: u16) -> Self {
        assert!(
            dir.join("perceptron.key").exists(),
            "a fleet's relays share a key: copy it into {} first",
            dir.display()
        );
        Self::launch(dir, options, free_port(), compute_port, free_port())
    }

    /// Starts a relay again in the same directory on the same ports (restart tests).
    ///
    /// # Panics
    /// As [`Relay::start`].
    #[must_use]
    pub fn restart(&self) -> Self {
        Self::launch(
            &self.dir,
            self.options.clone(),
            self.port,
            self.compute_port,
            self.admin_port,
        )
    }

    fn launch(
        dir: &Path,
        options: RelayOptions,
        port: u16,
        compute_port: u16,
        admin_port: u16,
    ) -> Self {
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (host, compute_host) = options
            .hosts
            .as_ref()
            .map_or((loopback, loopback), |h| (h.relay.into(), h.compute.into()));
        // The address the relay is given for its compute (behind a NAT, another).
        let compute_named = options
            .hosts
            .as_ref()
            .map_or(compute_host, |h| h.compute_named().into());
        let admin_token = options.hosts.as_ref().map(|_| {
            let token = format!("three-hosts-admin-token-{}", free_port());
            let file = dir.join("admin.token");
            fs::write(&file, format!("{token}\n")).unwrap_or_else(|e| panic!("{e}"));
            fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap_or_else(|e| panic!("{e}"));
            token
        });
        let command = options.command.clone().unwrap_or_else(|| {
            let on_host = options
                .hosts
                .as_ref()
                .map(|h| h.on_compute())
                .unwrap_or_default();
            on_host
                .into_iter()
                .chain([
                    bin_path("server-shim").display().to_string(),
                    "run".into(),
                    "--listen".into(),
                    format!("{compute_host}:{compute_port}"),
                    "--data".into(),
                    dir.join("data").display().to_string(),
                    "--key-file".into(),
                    dir.join("perceptron.key").display().to_string(),
                ])
                .collect()
        });
        let command = command
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
            .replace("{COMPUTE_PORT}", &compute_port.to_string());
        let config = format!(
            r#"[relay]
state_dir = "state"
key_file = "perceptron.key"
admin_listen = "{host}:{admin_port}"
{}{}
[[instance]]
name = "demo"
listen = "{host}:{port}"
compute = "{compute_named}:{compute_port}"
auth = "{}"
proxy_protocol = {}
resume_timeout = "{}"
handshake_timeout = "{}"
compute_timeout = "{}"
idle_pause_after = "{}"
on_relay_exit = "{}"
{}
{}"#,
            relay_toml_with_test_budgets(&options.relay_toml.replace("{DIR}", &dir.display().to_string())),
            if admin_token.is_some() { "admin_token_file = \"admin.token\"\n" } else { "" },
            options.auth,
            options.proxy_protocol,
            options.resume_timeout,
            options.handshake_timeout,
            options.compute_timeout,
            options.idle_pause_after,
            options.on_relay_exit,
            options.instance_toml,
            options.driver_toml.as_deref().map_or_else(
                || format!("[instance.driver]\nkind = \"process\"\ncommand = [{command}]\nstop_grace = \"5s\"\n"),
                |t| t
                    .replace("{COMPUTE_PORT}", &compute_port.to_string())
                    .replace("{DIR}", &dir.display().to_string()),
            )
        );
        let config_path = dir.join("relay.toml");
        fs::write(&config_path, config).unwrap_or_else(|e| panic!("{e}"));
        let log = dir.join(format!("relay-{}.log", crate::free_port()));
        let log_file = fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let spawned = Instant::now();
        let launcher = match &options.hosts {
            Some(h) if options.launcher.is_empty() => h.on_relay(),
            _ => options.launcher.clone(),
        };
        let mut command = match launcher.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin_path("relay"));
                c
            }
            None => Command::new(bin_path("relay")),
        };
        if options.own_process_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let child = ChildGuard::new(
            command
                .args(["run", "--config"])
                .arg(&config_path)
                .env(
                    "RUST_LOG",
                    std::env::var("TEST_RELAY_LOG").unwrap_or_else(|_| "info".into()),
                )
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .unwrap_or_else(|e| panic!("spawn relay: {e}")),
        );
        let relay = Self {
            host,
            port,
            compute_host,
            compute_port,
            admin_port,
            dir: dir.to_owned(),
            child,
            log,
            options,
            admin_token,
        };
        if let Err(e) = wait_for_greeting_at((host, port).into(), spawned, READY_TIMEOUT) {
            panic!("{e}\nrelay log:\n{}", relay.log());
        }
        relay
    }

    /// Everything the relay (and the computes it ran) logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether a log line contains `needle`, waiting up to 10 s ([`scaled`]) for it: the relay logs a
    /// connection's outcome when the connection ends, which may be after its client has read
    /// the ERR or OK that the test saw.
    #[must_use]
    pub fn logged(&self, needle: &str) -> bool {
        Self::wait_until(Duration::from_secs(10), || self.log().contains(needle))
    }

    /// The `session closed` line of the first session the relay logged as closed, waiting
    /// for one as [`Self::logged`] does.
    ///
    /// # Panics
    /// If none is logged by then, with the relay's log.
    #[must_use]
    #[track_caller]
    pub fn closed_session(&self) -> String {
        assert!(self.logged("session closed"), "{}", self.log());
        let log = self.log();
        log.lines()
            .find(|l| l.contains("session closed"))
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits up to `within` ([`scaled`]) for the instance to be in `state`.
    ///
    /// # Panics
    /// If it is not by then, with the state it is in and the relay's log.
    #[track_caller]
    pub fn wait_state(&self, state: &str, within: Duration) {
        assert!(
            Self::wait_until(within, || self.state() == state),
            "state {} (wanted {state}):\n{}",
            self.state(),
            self.log()
        );
    }

    /// How many log lines contain `needle`.
    #[must_use]
    pub fn log_count(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    /// Parking on a MariaDB compute, checked on `session` (logged in with database `shop`):
    /// a session variable is set, an unforced pause freezes the compute (the kernel reports
    /// it), and the next queries thaw the same process and find the session as it was
    /// (connection id, database, the variable).
    ///
    /// # Panics
    /// If any of that does not hold.
    pub fn assert_parks_keeping_the_session(&self, session: &mut TcpStream) {
        session
            .set_read_timeout(Some(scaled(Duration::from_secs(30))))
            .unwrap_or_else(|e| panic!("{e}"));
        let set = crate::raw::query(session, "SET SESSION sql_mode = 'ANSI_QUOTES'");
        assert!(matches!(set, Ok(Ok(_))), "{set:?}");
        let before = crate::raw::session_state(session);
        assert_eq!(
            before[1..],
            [Some("shop".into()), Some("ANSI_QUOTES".into())]
        );
        let pid = self
            .compute_pid()
            .unwrap_or_else(|| panic!("no compute pid"));
        let (status, body) = self.admin("POST", "/v1/instances/demo/pause");
        assert_eq!(status, 200, "{body}");
        assert_eq!(self.state(), "frozen", "{}", self.log());
        assert!(crate::cgroup::frozen(pid));
        assert_eq!(crate::raw::session_state(session), before);
        assert_eq!(self.compute_pid(), Some(pid), "thawed, not restarted");
        assert_eq!(self.state(), "running");
    }

    /// SIGTERM, then waits for the relay to exit.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.child.signal_and_wait("TERM", Duration::from_secs(30))
    }

    /// An admin API request: `(status, body)`.
    ///
    /// # Panics
    /// If the API cannot be reached.
    #[must_use]
    pub fn admin(&self, method: &str, path: &str) -> (u16, String) {
        self.admin_with(method, path, "")
    }

    /// An admin API request with extra header lines (`"Name: value\r\n"` each), sent with
    /// `Host: 127.0.0.1:<admin port>` unless `headers` has its own Host: `(status, body)`.
    ///
    /// # Panics
    /// If the API cannot be reached.
    #[must_use]
    pub fn admin_with(&self, method: &str, path: &str, headers: &str) -> (u16, String) {
        self.admin_request(method, path, headers, "")
    }

    /// [`Relay::admin_with`], sending `body` (with its `Content-Length`).
    ///
    /// # Panics
    /// If the API cannot be reached.
    #[must_use]
    pub fn admin_request(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> (u16, String) {
        let mut host = if headers.to_ascii_lowercase().contains("host:") {
            String::new()
        } else {
            format!("Host: {}:{}\r\n", self.host, self.admin_port)
        };
        if let Some(token) = &self.admin_token {
            host.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let mut s = TcpStream::connect((self.host, self.admin_port))
            .unwrap_or_else(|e| panic!("admin API: {e}"));
        s.set_read_timeout(Some(scaled(Duration::from_secs(60))))
            .ok();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\n{host}{headers}{}Connection: close\r\n\r\n{body}",
            if body.is_empty() {
                String::new()
            } else {
                format!("Content-Length: {}\r\n", body.len())
            }
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut resp = String::new();
        s.read_to_string(&mut resp)
            .unwrap_or_else(|e| panic!("{e}"));
        let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, body.to_owned())
    }

    /// Resumes the instance unless it runs (the admin API's resume) and waits (up to 60 s,
    /// [`scaled`]) until it runs.
    ///
    /// # Panics
    /// If the resume is refused or the instance does not run within the wait.
    pub fn resume(&self) {
        if self.state() != "running" {
            let (status, body) = self.admin("POST", "/v1/instances/demo/resume");
            assert_eq!(status, 200, "resume: {body}\n{}", self.log());
        }
        assert!(
            Self::wait_until(Duration::from_secs(60), || self.state() == "running"),
            "{}",
            self.log()
        );
    }

    /// Pauses the instance without forcing, waiting (up to 60 s, [`scaled`]) for connections that have
    /// just closed on the client's side to be closed on the relay's too: a pause is refused
    /// (409) while any is open.
    ///
    /// # Panics
    /// If the pause is still refused after 60 s, with the relay's answer and log.
    pub fn pause(&self) {
        let mut last = (0, String::new());
        let mut accepted = false;
        // A connection the test has just closed may still be open at the relay: the pause
        // then parks it (frozen), and the compute stops once it is gone.
        // Still under way: frozen, then pausing while a short `stop_after` stops the compute.
        let under_way = |state: &str| matches!(state, "frozen" | "pausing");
        let paused = Self::wait_until(Duration::from_secs(60), || {
            if accepted && !under_way(&self.state()) {
                return true;
            }
            // Asked only until accepted: asked again while the accepted pause is under way,
            // it would be refused (409, "instance is paused").
            if !accepted {
                last = self.admin("POST", "/v1/instances/demo/pause");
                accepted = last.0 == 200;
            }
            accepted && !under_way(&self.state())
        });
        assert!(
            paused,
            "pause refused: {} {}
log:
{}",
            last.0,
            last.1,
            self.log()
        );
    }

    /// The value of one Prometheus sample line (`name{labels}`), 0 if absent.
    #[must_use]
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.admin("GET", "/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    }

    /// The value of `series` once it is `want`, or as it is after 30 s ([`scaled`]). The relay counts a
    /// connection when its task ends, which on a loaded machine can come after the client
    /// has read its answer and exited; a test that reads the count at once races with that.
    #[must_use]
    pub fn metric_reaching(&self, series: &str, want: f64) -> f64 {
        let mut value = 0.0;
        Self::wait_until(Duration::from_secs(30), || {
            value = self.metric(series);
            value == want
        });
        value
    }

    /// The instance's state as the admin API reports it.
    #[must_use]
    pub fn state(&self) -> String {
        self.instance_field("state")
    }

    /// The instance's string field `key` as the admin API reports it (`?` if absent).
    #[must_use]
    pub fn instance_field(&self, key: &str) -> String {
        let (_, body) = self.admin("GET", "/v1/instances");
        body.split(&format!("\"{key}\": \""))
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?")
            .to_owned()
    }

    /// Whether something accepts connections on the compute port.
    #[must_use]
    pub fn compute_listening(&self) -> bool {
        TcpStream::connect((self.compute_host, self.compute_port)).is_ok()
    }

    /// The compute's pid, from the relay's pid file (its `pid <n>` line).
    #[must_use]
    pub fn compute_pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.join("state/pids/demo.pid"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("pid "))?
            .trim()
            .parse()
            .ok()
    }

    /// Whether `cond` holds at every look (every 20 ms) for `window`, which is not scaled:
    /// the window passing is the condition itself (a negative observation, e.g. no pause
    /// while a result is still streaming), and a longer window on a loaded machine could
    /// outlast what it observes.
    pub fn holds_for(window: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + window;
        while Instant::now() < deadline {
            if !cond() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        cond()
    }

    /// Waits until the instance has paused on its own and its compute process `pid` is gone,
    /// then checks that session `s`, whose database is `shop` with one row in `orders`, finds
    /// both on the next compute: carried across the stop.
    ///
    /// # Panics
    /// If the instance does not pause within a minute, the compute outlives the pause, or the
    /// session does not find its database and row, with the relay's log.
    #[track_caller]
    pub fn carried_across_a_stop(&self, s: &mut TcpStream, pid: u32) {
        assert!(
            Self::wait_until(Duration::from_secs(60), || self.state() == "paused"),
            "{}",
            self.log()
        );
        assert!(!pid_alive(pid), "the compute is gone");
        assert_eq!(
            crate::raw::one_row(s, "SELECT CONCAT(DATABASE(), ' ', COUNT(*)) FROM orders")
                .as_deref(),
            Some("shop 1"),
            "{}",
            self.log()
        );
        assert!(self.logged("session reattached"), "{}", self.log());
    }

    /// Polls `cond` every 20 ms until it holds or `timeout` ([`scaled`]) passes.
    pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + scaled(timeout);
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        cond()
    }
}

/// Kills a process by pid when dropped (computes a test's relay may leave behind).
#[derive(Debug)]
pub struct KillOnDrop(pub Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        }
    }
}

impl Drop for Relay {
    /// Stops the relay gracefully, so it stops the computes it started; whatever compute is
    /// still recorded afterwards (a relay killed by the test) is killed by pid.
    fn drop(&mut self) {
        let _ = self.stop();
        if let Some(pid) = self.compute_pid() {
            if pid_alive(pid) {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
            }
        }
    }
}

/// Writes a fresh key ring with one key `id` to `path` (mode 0600) with `relay keygen`.
///
/// # Panics
/// If `relay keygen` fails, with its message.
pub fn keygen(path: &Path, id: &str) {
    let out = Command::new(bin_path("relay"))
        .args(["keygen", "--id", id, "--out"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("relay keygen: {e}"));
    assert!(
        out.status.success(),
        "keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether a process is alive (and not a zombie).
#[must_use]
pub fn pid_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Scans every readable mapping of process `pid` for each needle; returns the names of the
/// needles found. Needs the right to ptrace the process (root, or the same user with a
/// permissive `ptrace_scope`).
///
/// # Panics
/// If the process's maps cannot be read at all.
#[must_use]
pub fn scan_memory(pid: u32, needles: &[(String, Vec<u8>)]) -> Vec<String> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("maps of {pid}: {e}"));
    let mut mem =
        fs::File::open(format!("/proc/{pid}/mem")).unwrap_or_else(|e| panic!("mem of {pid}: {e}"));
    let mut found = Vec::new();
    let mut scanned = 0usize;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let name = fields.nth(3).unwrap_or("");
        if !perms.starts_with('r') || name == "[vvar]" || name == "[vsyscall]" {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let mut buf = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
        if mem.seek(SeekFrom::Start(start)).is_err() || mem.read_exact(&mut buf).is_err() {
            continue;
        }
        scanned += buf.len();
        for (needle_name, needle) in needles {
            if !found.contains(needle_name) && memchr::memmem::find(&buf, needle).is_some() {
                found.push(needle_name.clone());
            }
        }
    }
    assert!(scanned > 0, "nothing of process {pid} could be read");
    found
}

/// Scans every file under `dir` for each needle; returns `(file, needle name)` hits.
#[must_use]
pub fn scan_files(dir: &Path, needles: &[(String, Vec<u8>)]) -> Vec<(PathBuf, String)> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = fs::read(&p) {
                for (name, needle) in needles {
                    if memchr::memmem::find(&bytes, needle).is_some() {
                        hits.push((p.clone(), name.clone()));
                    }
                }
            }
        }
    }
    hits
}

/// Every form of `password` a credential leak could take: the password, SHA1(pw) (what a
/// native answer reveals with its scramble), SHA1(SHA1(pw)) (the stored hash), raw and in hex.
#[must_use]
pub fn credential_needles(password: &str) -> Vec<(String, Vec<u8>)> {
    use authplugin::native_password::{self, NativeStage2};
    let stage1 = native_password::stage1(password.as_bytes());
    let stage2 = NativeStage2::from_password(password.as_bytes());
    let mut needles = vec![
        ("password".to_owned(), password.as_bytes().to_vec()),
        ("SHA1(pw)".to_owned(), stage1.to_vec()),
        ("SHA1(SHA1(pw))".to_owned(), stage2.as_bytes().to_vec()),
        ("*HEX stage2".to_owned(), stage2.to_text().into_bytes()),
    ];
    for (name, raw) in [
        ("SHA1(pw)", stage1.to_vec()),
        ("SHA1(SHA1(pw))", stage2.as_bytes().to_vec()),
    ] {
        let lower = authplugin::hex::encode(&raw);
        needles.push((format!("{name} hex"), lower.clone().into_bytes()));
        needles.push((format!("{name} HEX"), lower.to_uppercase().into_bytes()));
    }
    needles
}

/// The `[relay]` lines a test asked for, with the failed-wake budget off unless the test sets
/// budgets itself: many tests log in with a wrong password at a paused instance to check
/// something else, and the default (3 failed wakes a source per hour) would block their later
/// wakes. `relay_budgets` tests that budget; the unit tests in `relay::budgets` too.
fn relay_toml_with_test_budgets(relay_toml: &str) -> String {
    if relay_toml.contains("budgets") {
        relay_toml.to_owned()
    } else {
        format!("budgets = {{ failed_wakes_per_source = 0 }}\n{relay_toml}")
    }
}

/// The number a log line gives as `name=N`.
///
/// # Panics
/// If the line has no such number, with the line.
#[must_use]
#[track_caller]
pub fn logged_number(line: &str, name: &str) -> u64 {
    line.split(&format!(" {name}="))
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}
