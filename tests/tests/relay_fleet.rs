//! A fleet: several relays in front of one instance, coordinated through a real etcd started
//! by the test on loopback (`[relay.store] kind = "etcd"`).
//!
//! The relays share one compute through the exec driver: its scripts start one server-shim
//! (under a file lock, once) and count every start and stop in files the test reads, so "one
//! wake" is counted where it happens, not inferred from a relay's metrics.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tests::relay::{Relay, RelayOptions};
use tests::{ChildGuard, TempDir, add_user, bin_path, free_port, raw};

const USER: &str = "app";
const PASSWORD: &str = "fleet-Pw-0123456789";
/// `idle_pause_after` of the fleets that pause: short so the tests end soon, long enough
/// that a loaded machine does not pause an instance between two steps of a test.
const IDLE: &str = "5s";
const IDLE_PERIOD: Duration = Duration::from_secs(5);

/// An etcd member, on free loopback ports.
struct Etcd {
    child: ChildGuard,
    endpoint: String,
    args: Vec<String>,
    /// The certificates, when clients must speak TLS with a certificate of the test's CA.
    pki: Option<PathBuf>,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with `openssl`
/// in `dir/pki`; keys mode 0600.
fn make_pki(dir: &Path) -> PathBuf {
    let pki = dir.join("pki");
    fs::create_dir_all(&pki).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&pki)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca-key.pem",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=perceptron test CA",
            ],
        ]
        .concat(),
    );
    fs::write(
        pki.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    fs::write(pki.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, cn) in [("server", "etcd"), ("client", "relay")] {
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    &format!("{name}-key.pem"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={cn}"),
                ],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ]);
        fs::set_permissions(
            pki.join(format!("{name}-key.pem")),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
    }
    pki
}

/// Names and peer URLs of the members of a cluster.
fn member_args(dir: &Path, name: &str, client: u16, peer: u16, cluster: &str) -> Vec<String> {
    let endpoint = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    [
        "--name",
        name,
        "--data-dir",
        &dir.join(format!("etcd-{name}")).display().to_string(),
        "--listen-client-urls",
        &endpoint,
        "--advertise-client-urls",
        &endpoint,
        "--listen-peer-urls",
        &peer_url,
        "--initial-advertise-peer-urls",
        &peer_url,
        "--initial-cluster",
        cluster,
        "--initial-cluster-token",
        "perceptron-test",
        "--log-level",
        "error",
    ]
    .map(str::to_owned)
    .to_vec()
}

impl Etcd {
    /// An `n`-member cluster, every member healthy; its clients held to TLS with a
    /// certificate from `pki` when given.
    fn cluster_with(dir: &Path, n: usize, pki: Option<&Path>) -> Vec<Self> {
        let scheme = if pki.is_some() { "https" } else { "http" };
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let members: Vec<Self> = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let mut args = member_args(dir, &format!("m{i}"), *client, *peer, &cluster);
                if let Some(pki) = pki {
                    for a in &mut args {
                        *a = a.replace(
                            &format!("http://127.0.0.1:{client}"),
                            &format!("https://127.0.0.1:{client}"),
                        );
                    }
                    let file = |f: &str| pki.join(f).display().to_string();
                    args.extend([
                        "--cert-file".into(),
                        file("server.pem"),
                        "--key-file".into(),
                        file("server-key.pem"),
                        "--client-cert-auth".into(),
                        "--trusted-ca-file".into(),
                        file("ca.pem"),
                    ]);
                }
                Self {
                    child: Self::spawn(&args, dir),
                    endpoint: format!("{scheme}://127.0.0.1:{client}"),
                    args,
                    pki: pki.map(Path::to_owned),
                }
            })
            .collect();
        for m in &members {
            m.wait_healthy();
        }
        members
    }

    fn spawn(args: &[String], dir: &Path) -> ChildGuard {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .unwrap();
        ChildGuard::new(
            Command::new("etcd")
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("etcd (Debian package etcd-server): {e}")),
        )
    }

    fn wait_healthy(&self) {
        let healthy = Relay::wait_until(Duration::from_secs(60), || {
            self.ctl(&["endpoint", "health"]).is_some()
        });
        assert!(healthy, "etcd at {} did not become healthy", self.endpoint);
    }

    /// `etcdctl` against this member: its stdout, or `None` if it failed.
    fn ctl(&self, args: &[&str]) -> Option<String> {
        let mut ctl = Command::new("etcdctl");
        ctl.arg(format!("--endpoints={}", self.endpoint))
            .arg("--command-timeout=10s");
        if let Some(pki) = &self.pki {
            ctl.arg(format!("--cacert={}", pki.join("ca.pem").display()))
                .arg(format!("--cert={}", pki.join("client.pem").display()))
                .arg(format!("--key={}", pki.join("client-key.pem").display()));
        }
        let out = ctl.args(args).env("ETCDCTL_API", "3").output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The fleet's usage ledger, as the relays wrote it: `(instance, state)` per line.
    fn ledger(&self) -> Vec<String> {
        self.ctl(&[
            "get",
            "--prefix",
            "/perceptron/ledger/",
            "--print-value-only",
        ])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(2).map(str::to_owned))
        .collect()
    }

    fn kill(&mut self) {
        self.child.kill9();
    }

    /// Starts the same member again (same data, same ports).
    fn restart(&mut self, dir: &Path) {
        self.child = Self::spawn(&self.args, dir);
        self.wait_healthy();
    }
}

/// One compute shared by the fleet, started and stopped by exec-driver scripts.
struct Fleet {
    dir: TempDir,
    /// Member 0 is the one `etcd` names; the relays know every member.
    members: Vec<Etcd>,
    compute_port: u16,
    relays: Vec<Relay>,
    /// The relays' `lease_ttl` and `request_timeout`.
    timing: (&'static str, &'static str),
}

impl Fleet {
    fn start(label: &str, relays: usize, idle_pause_after: &'static str) -> Self {
        Self::start_on(label, relays, idle_pause_after, 1)
    }

    fn start_on(
        label: &str,
        relays: usize,
        idle_pause_after: &'static str,
        members: usize,
    ) -> Self {
        Self::start_with(label, relays, idle_pause_after, members, false)
    }

    fn start_with(
        label: &str,
        relays: usize,
        idle_pause_after: &'static str,
        members: usize,
        tls: bool,
    ) -> Self {
        let dir = TempDir::new(label);
        let pki = tls.then(|| make_pki(dir.path()));
        let shared = dir.path().join("shared");
        fs::create_dir_all(&shared).unwrap();
        let key = shared.join("perceptron.key");
        tests::relay::keygen(&key, "fleet-1");
        // The relays' own key for the instance definitions they write to the store.
        tests::relay::keygen(&shared.join("definitions.key"), "defs-1");
        add_user(&shared.join("data"), USER, PASSWORD, true);
        let compute_port = free_port();
        write_scripts(&shared, compute_port);
        let members = Etcd::cluster_with(dir.path(), members, pki.as_deref());
        // Short leases make a dead relay's wake quick to take over; a cluster that loses a
        // member may need an election first, which a 2 s lease on a loaded machine does not
        // always outlive.
        // The request bound must outlive that election too (etcd answers within about 7 s):
        // with 2 s a pause under load was abandoned and the instance never paused.
        let timing = if members.len() > 1 {
            ("30s", "10s")
        } else {
            ("2s", "1s")
        };
        let mut fleet = Self {
            dir,
            members,
            compute_port,
            relays: Vec::new(),
            timing,
        };
        for i in 0..relays {
            fleet.add_relay(i, idle_pause_after);
        }
        fleet
    }

    /// The first etcd member.
    fn etcd(&mut self) -> &mut Etcd {
        &mut self.members[0]
    }

    fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    fn add_relay(&mut self, i: usize, idle_pause_after: &'static str) {
        self.add_relay_with(i, idle_pause_after, "", "");
    }

    /// [`Fleet::add_relay`], with `relay` added to the relay's `[relay]` table and `after`
    /// to the end of its configuration.
    /// Relay `i` (idle pause 1 h) with an admin token (which instances put and remove
    /// need) and an endpoint on `endpoint` routing `user@instance`.
    fn add_relay_with_endpoint(&mut self, i: usize, token: &str, endpoint: u16) {
        let dir = self.dir.path().join(format!("relay{i}"));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("admin.token");
        fs::write(&file, format!("{token}\n")).unwrap();
        fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        self.add_relay_with(
            i,
            "1h",
            "admin_token_file = \"admin.token\"\n",
            &format!(
                "\n[[endpoint]]\nlisten = \"127.0.0.1:{endpoint}\"\nroute_by = \"user@instance\"\n"
            ),
        );
    }

    fn add_relay_with(
        &mut self,
        i: usize,
        idle_pause_after: &'static str,
        relay: &str,
        after: &str,
    ) {
        let dir = self.dir.path().join(format!("relay{i}"));
        fs::create_dir_all(&dir).unwrap();
        fs::copy(
            self.shared().join("perceptron.key"),
            dir.join("perceptron.key"),
        )
        .unwrap();
        let shared = self.shared().display().to_string();
        let options = RelayOptions {
            idle_pause_after,
            resume_timeout: tests::scaled_setting(15),
            relay_toml: format!(
                "{relay}\n[relay.store]\nkind = \"etcd\"\nendpoints = [{}]\nrelay_id = \"relay{i}\"\n\
                 lease_ttl = {:?}\nrequest_timeout = {:?}\ndefinitions_key_file = {:?}\n{}",
                self.members
                    .iter()
                    .map(|m| format!("{:?}", m.endpoint))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.timing.0,
                self.timing.1,
                self.shared().join("definitions.key").display().to_string(),
                self.members[0].pki.as_ref().map_or(String::new(), |pki| {
                    let file = |f: &str| pki.join(f).display().to_string();
                    format!(
                        "ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
                        file("ca.pem"),
                        file("client.pem"),
                        file("client-key.pem")
                    )
                })
            ),
            driver_toml: Some(format!(
                "[instance.driver]\nkind = \"exec\"\nstart = [\"sh\", \"{shared}/start.sh\"]\n\
                 stop = [\"sh\", \"{shared}/stop.sh\"]\nstatus = [\"sh\", \"{shared}/status.sh\"]\n\
                 poll_interval = \"200ms\"\n{after}"
            )),
            ..RelayOptions::default()
        };
        self.relays
            .push(Relay::start_with_compute(&dir, options, self.compute_port));
    }

    /// How many times the driver's start and stop ran, over the whole fleet.
    fn starts(&self) -> usize {
        count_lines(&self.shared().join("starts.log"))
    }

    fn stops(&self) -> usize {
        count_lines(&self.shared().join("stops.log"))
    }

    fn logs(&self) -> String {
        self.relays
            .iter()
            .enumerate()
            .map(|(i, r)| format!("--- relay{i}\n{}", r.log()))
            .collect()
    }

    fn all_in(&self, state: &str) -> bool {
        self.relays.iter().all(|r| r.state() == state)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for r in &mut self.relays {
            r.stop();
        }
        // The compute is the scripts' child, not the test's: stopped by its recorded pid.
        if let Ok(pid) = fs::read_to_string(self.shared().join("shim.pid")) {
            let _ = Command::new("kill").arg("-KILL").arg(pid.trim()).status();
        }
    }
}

fn count_lines(path: &Path) -> usize {
    fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

fn write_scripts(shared: &Path, port: u16) {
    let d = shared.display();
    let shim = bin_path("server-shim").display().to_string();
    // One compute for the whole fleet: a start finds it running, or starts it, under a lock
    // (a start orphaned by a killed relay may still be running; the compute must not inherit
    // the lock). `slow-start` stands for a compute that takes a while to come up.
    let start = format!(
        "set -e\nD={d}\necho start >> $D/starts.log\n[ -f $D/slow-start ] && sleep 2\n\
         exec 9>$D/start.lock\nflock 9\n\
         if [ -f $D/shim.pid ] && kill -0 \"$(cat $D/shim.pid)\" 2>/dev/null; then exit 0; fi\n\
         setsid {shim} run --listen 127.0.0.1:{port} --data $D/data --key-file \
         $D/perceptron.key >> $D/shim.log 2>&1 < /dev/null 9>&- &\necho $! > $D/shim.pid\n"
    );
    let stop = format!(
        "D={d}\necho stop >> $D/stops.log\n[ -f $D/shim.pid ] || exit 0\npid=$(cat $D/shim.pid)\n\
         kill $pid 2>/dev/null || true\n\
         for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done\n\
         rm -f $D/shim.pid\n"
    );
    let status =
        format!("D={d}\n[ -f $D/shim.pid ] && kill -0 \"$(cat $D/shim.pid)\" 2>/dev/null\n");
    fs::write(shared.join("start.sh"), start).unwrap();
    fs::write(shared.join("stop.sh"), stop).unwrap();
    fs::write(shared.join("status.sh"), status).unwrap();
}

fn select_1(port: u16) -> Result<(), String> {
    match raw::login(port, USER, PASSWORD, None) {
        Ok(Ok(mut s)) => match raw::query(&mut s, "SELECT 1") {
            Ok(Ok(rows)) if rows == [Some("1".to_owned())] => Ok(()),
            other => Err(format!("query: {other:?}")),
        },
        Ok(Err(err)) => Err(format!("ERR {err:?}")),
        Err(e) => Err(format!("I/O: {e}")),
    }
}

#[test]
fn three_relays_wake_a_paused_instance_once_for_300_clients() {
    const CLIENTS: usize = 300;
    let fleet = Fleet::start("fleet-300", 3, "5m");
    assert_eq!(fleet.starts(), 0, "nothing wakes by itself");
    let ports: Vec<u16> = fleet.relays.iter().map(|r| r.port).collect();
    let failures = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let port = ports[i % ports.len()];
            let (failures, first_error) = (Arc::clone(&failures), Arc::clone(&first_error));
            std::thread::spawn(move || {
                if let Err(e) = select_1(port) {
                    failures.fetch_add(1, Ordering::Relaxed);
                    first_error.lock().unwrap().get_or_insert(e);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "first error {:?}\n{}",
        first_error.lock().unwrap(),
        fleet.logs()
    );
    assert_eq!(
        fleet.starts(),
        1,
        "one wake for the fleet\n{}",
        fleet.logs()
    );
    // Every relay follows the fleet: running, with new connections on the direct route.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || fleet.all_in("running")),
        "{}",
        fleet.logs()
    );
    assert_eq!(
        fleet.members[0].ledger(),
        ["resuming", "running"],
        "one interval"
    );
    let (status, body) = fleet.relays[2].admin("GET", "/v1/fleet");
    assert_eq!(status, 200, "{body}");
    for relay in ["relay0", "relay1", "relay2"] {
        assert!(body.contains(&format!("\"{relay}\"")), "{body}");
    }
}

#[test]
fn a_connection_on_one_relay_keeps_the_instance_running_for_the_whole_fleet() {
    let fleet = Fleet::start("fleet-hold", 2, IDLE);
    // A session held open on relay 1; the instance is woken through relay 0.
    select_1(fleet.relays[0].port).unwrap();
    let mut held = match raw::login(fleet.relays[1].port, USER, PASSWORD, None) {
        Ok(Ok(s)) => s,
        other => panic!("{other:?}\n{}", fleet.logs()),
    };
    // Relay 0 has been idle for several idle periods; the fleet must not pause. (A negative
    // property: watched for a while, every 20 ms.)
    let watch_until = Instant::now() + 2 * IDLE_PERIOD + Duration::from_secs(2);
    while Instant::now() < watch_until {
        assert_eq!(fleet.relays[0].state(), "running", "{}", fleet.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fleet.stops(), 0);
    // `relay fleet` on relay 0 shows the session held on relay 1.
    let out = Command::new(bin_path("relay"))
        .args(["fleet", "--admin"])
        .arg(format!("127.0.0.1:{}", fleet.relays[0].admin_port))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.starts_with("relay relay0 (in touch with the store); live relays: relay0, relay1")
            && shown.contains("relay1=1"),
        "{shown}"
    );
    assert_eq!(
        raw::query(&mut held, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    drop(held);
    // Now nobody is connected anywhere: one relay pauses it, once, for the fleet.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || fleet.all_in("paused")),
        "{}",
        fleet.logs()
    );
    assert_eq!(fleet.stops(), 1, "{}", fleet.logs());
    assert_eq!(
        fleet.members[0].ledger(),
        ["resuming", "running", "pausing", "paused"]
    );
}

#[test]
fn a_relay_killed_while_it_wakes_the_instance_is_replaced_by_another() {
    let mut fleet = Fleet::start("fleet-kill", 2, "5m");
    fs::write(fleet.shared().join("slow-start"), "").unwrap();
    let port0 = fleet.relays[0].port;
    let orphaned = std::thread::spawn(move || select_1(port0));
    assert!(
        Relay::wait_until(Duration::from_secs(60), || fleet.starts() == 1),
        "relay 0 began the wake\n{}",
        fleet.logs()
    );
    let lock = fleet.members[0]
        .ctl(&[
            "get",
            "/perceptron/instances/demo/lock",
            "--print-value-only",
        ])
        .unwrap_or_default();
    assert!(lock.starts_with("relay0 resuming"), "lock: {lock:?}");
    fs::remove_file(fleet.shared().join("slow-start")).unwrap();
    fleet.relays[0].child.kill9();
    let killed = Instant::now();
    // Relay 0's client sees its connection end; relay 1's client logs in once relay 1 has
    // taken over the wake (after relay 0's lease expired).
    assert!(orphaned.join().unwrap().is_err());
    select_1(fleet.relays[1].port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let took = killed.elapsed();
    eprintln!("relay 1 completed the wake {took:?} after relay 0 was killed");
    assert!(
        took < tests::scaled(Duration::from_secs(15)),
        "within resume_timeout"
    );
    assert_eq!(fleet.starts(), 2, "relay 1 ran the start again");
    assert_eq!(fleet.relays[1].state(), "running");
    let ledger = fleet.members[0].ledger();
    assert_eq!(
        ledger.last().map(String::as_str),
        Some("running"),
        "{ledger:?}"
    );
}

#[test]
fn without_etcd_running_instances_serve_paused_ones_answer_1053_and_nothing_pauses() {
    let mut fleet = Fleet::start("fleet-etcd-down", 2, IDLE);
    // Paused and cut off: a login is refused with 1053 and wakes nothing.
    fleet.etcd().kill();
    match raw::login(fleet.relays[0].port, USER, PASSWORD, None) {
        Ok(Err((code, message))) => assert_eq!(code, 1053, "{message}"),
        other => panic!("expected ERR 1053, got {other:?}\n{}", fleet.logs()),
    }
    assert_eq!(fleet.starts(), 0);
    // The relay says so in its metrics once its lease has run out, and again when it is back.
    let store_gauge = |fleet: &Fleet, value: &str| {
        let line = format!("relay_fleet_store_available{{relay_id=\"relay0\"}} {value}");
        Relay::wait_until(Duration::from_secs(60), || {
            fleet.relays[0].admin("GET", "/metrics").1.contains(&line)
        })
    };
    assert!(store_gauge(&fleet, "0"), "{}", fleet.logs());
    // etcd back: the fleet wakes the instance.
    let dir = fleet.dir.path().to_owned();
    fleet.etcd().restart(&dir);
    assert!(store_gauge(&fleet, "1"), "{}", fleet.logs());
    assert!(
        Relay::wait_until(Duration::from_secs(60), || select_1(fleet.relays[0].port)
            .is_ok()),
        "{}",
        fleet.logs()
    );
    assert!(Relay::wait_until(Duration::from_secs(60), || fleet.all_in("running")));
    // Running and cut off: sessions and new connections keep working, and although nothing
    // is connected for longer than idle_pause_after, nothing pauses.
    let mut session = match raw::login(fleet.relays[1].port, USER, PASSWORD, None) {
        Ok(Ok(s)) => s,
        other => panic!("{other:?}"),
    };
    fleet.etcd().kill();
    assert_eq!(
        raw::query(&mut session, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    drop(session);
    let watch_until = Instant::now() + 2 * IDLE_PERIOD + Duration::from_secs(2);
    while Instant::now() < watch_until {
        for r in &fleet.relays {
            assert_eq!(r.state(), "running", "{}", fleet.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    select_1(fleet.relays[0].port).unwrap_or_else(|e| panic!("direct route: {e}"));
    assert_eq!(fleet.stops(), 0);
    // etcd back: the idle fleet pauses the instance, once.
    fleet.etcd().restart(&dir);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || fleet.all_in("paused")),
        "{}",
        fleet.logs()
    );
    assert_eq!(fleet.stops(), 1);
    assert_eq!(
        fleet.members[0].ledger(),
        ["resuming", "running", "pausing", "paused"]
    );
}

#[test]
fn one_etcd_member_of_three_stopped_interrupts_nothing() {
    let mut fleet = Fleet::start_on("fleet-3-members", 2, "5m", 3);
    select_1(fleet.relays[0].port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert!(Relay::wait_until(Duration::from_secs(60), || fleet.all_in("running")));
    // The member the relays' clients were most likely talking to goes away.
    fleet.members[0].kill();
    let stopped = Instant::now();
    // Sessions and the direct route need no store; a pause and a wake need the majority.
    for r in &fleet.relays {
        select_1(r.port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    }
    // (409 while the relays still count the connections just closed; a 503 if the request
    // was in flight to the member that died — the operator's retry, as here, goes through.)
    let mut answer = (0, String::new());
    Relay::wait_until(Duration::from_secs(60), || {
        answer = fleet.relays[1].admin("POST", "/v1/instances/demo/pause");
        answer.0 == 200
    });
    assert_eq!(answer.0, 200, "{}\n{}", answer.1, fleet.logs());
    // A pause the store could not confirm in time is abandoned (the instance keeps running):
    // asked again until it goes through, within a limit an election under load fits in.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || {
            fleet.all_in("paused") || {
                let _ = fleet.relays[1].admin("POST", "/v1/instances/demo/pause");
                false
            }
        }),
        "{}",
        fleet.logs()
    );
    select_1(fleet.relays[0].port).unwrap_or_else(|e| panic!("wake: {e}\n{}", fleet.logs()));
    eprintln!(
        "pause and wake through the remaining members done {:?} after the stop",
        stopped.elapsed()
    );
    assert_eq!((fleet.starts(), fleet.stops()), (2, 1));
    assert_eq!(
        fleet.members[1].ledger(),
        [
            "resuming", "running", "pausing", "paused", "resuming", "running"
        ]
    );
}

#[test]
fn a_fleet_talks_to_etcd_over_mutual_tls() {
    let fleet = Fleet::start_with("fleet-tls", 2, IDLE, 1, true);
    // etcd holds its clients to TLS with a certificate of the CA: plaintext gets nothing.
    let http = fleet.members[0].endpoint.replace("https://", "http://");
    let plain = Command::new("etcdctl")
        .args([
            &format!("--endpoints={http}"),
            "--command-timeout=10s",
            "get",
            "--prefix",
            "/",
        ])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(!plain.status.success(), "etcd answered plaintext");
    // The relays joined over TLS: one wake through either, one pause for the fleet.
    select_1(fleet.relays[1].port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    select_1(fleet.relays[0].port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(fleet.starts(), 1, "{}", fleet.logs());
    assert!(
        Relay::wait_until(Duration::from_secs(60), || fleet.all_in("paused")),
        "{}",
        fleet.logs()
    );
    assert_eq!(
        fleet.members[0].ledger(),
        ["resuming", "running", "pausing", "paused"]
    );
}

#[test]
fn a_lock_whose_answer_was_lost_is_completed_by_the_relay_that_holds_it() {
    let fleet = Fleet::start("fleet-orphan-lock", 1, "5m");
    // What a wake's first transaction leaves when etcd commits it but its answer never reaches
    // the relay (a timeout): relay0's lock, under relay0's live lease, so no other relay and no
    // expiry would ever release it.
    let etcd = &fleet.members[0];
    let relay_key = etcd
        .ctl(&["get", "/perceptron/relays/relay0", "-w", "json"])
        .unwrap();
    let lease: i64 = relay_key
        .split("\"lease\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no lease in {relay_key}"));
    etcd.ctl(&[
        "put",
        &format!("--lease={lease:x}"),
        "/perceptron/instances/demo/lock",
        "relay0 resuming",
    ])
    .unwrap();
    // The next login through relay0 completes that wake instead of waiting on its own lock.
    select_1(fleet.relays[0].port).unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(fleet.starts(), 1, "{}", fleet.logs());
    assert_eq!(
        etcd.ctl(&["get", "/perceptron/instances/demo/lock"]),
        Some(String::new()),
        "the lock was released"
    );
    assert!(
        fleet.logs().contains("outcome was lost"),
        "{}",
        fleet.logs()
    );
}

/// An instance defined in the fleet's store: put through one relay, served by every relay (on
/// its endpoint), removed through one relay while another holds a session: that relay drains
/// it, and the compute is paused once the fleet's last connection to it has ended.
#[test]
fn an_instance_defined_in_the_store_comes_and_goes_on_every_relay() {
    const TOKEN: &str = "fleet-instances-token-0123";
    let mut fleet = Fleet::start("fleet-defined", 0, "1h");
    let endpoints = [free_port(), free_port()];
    for (i, endpoint) in endpoints.iter().enumerate() {
        fleet.add_relay_with_endpoint(i, TOKEN, *endpoint);
    }
    // The instance's own compute, started and stopped by the same kind of scripts.
    let shop = fleet.dir.path().join("shop");
    fs::create_dir_all(&shop).unwrap();
    fs::copy(
        fleet.shared().join("perceptron.key"),
        shop.join("perceptron.key"),
    )
    .unwrap();
    add_user(&shop.join("data"), USER, PASSWORD, true);
    let shop_port = free_port();
    write_scripts(&shop, shop_port);
    let d = shop.display();
    let definition = format!(
        "compute = \"127.0.0.1:{shop_port}\"\nidle_pause_after = \"1h\"\nresume_timeout = \"15s\"\n\
         [driver]\nkind = \"exec\"\nstart = [\"sh\", \"{d}/start.sh\"]\n\
         stop = [\"sh\", \"{d}/stop.sh\"]\nstatus = [\"sh\", \"{d}/status.sh\"]\n\
         poll_interval = \"200ms\"\n"
    );
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let (code, body) =
        fleet.relays[0].admin_request("PUT", "/v1/instances/shop", &auth, &definition);
    assert_eq!(code, 201, "{body}\n{}", fleet.logs());
    // Stored as sent, with the relay's seal (fleet::seal) as its last line.
    let stored = fleet.members[0]
        .ctl(&[
            "get",
            "/perceptron/definitions/shop.toml",
            "--print-value-only",
        ])
        .unwrap();
    let (text, seal) = stored.trim().rsplit_once('\n').unwrap();
    assert_eq!(text, definition.trim());
    assert!(seal.starts_with("# perceptron-seal v1 defs-1 "), "{stored}");
    let lists_shop = |relay: &Relay| {
        relay
            .admin_with("GET", "/v1/instances", &auth)
            .1
            .contains("\"shop\"")
    };
    // The other relay follows the store, and routes to it.
    assert!(
        Relay::wait_until(Duration::from_secs(30), || lists_shop(&fleet.relays[1])),
        "{}",
        fleet.logs()
    );
    let mut held = raw::login(endpoints[1], "app@shop", PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}\n{}", fleet.logs()));
    assert_eq!(raw::one_row(&mut held, "SELECT 1").as_deref(), Some("1"));
    assert_eq!(count_lines(&shop.join("starts.log")), 1);

    // Removed through relay0 while relay1 holds a session: relay1 drains it; no new login
    // reaches it anywhere; the session goes on.
    let (code, body) = fleet.relays[0].admin_request("DELETE", "/v1/instances/shop", &auth, "");
    assert_eq!(code, 202, "{body}");
    assert!(
        Relay::wait_until(Duration::from_secs(30), || {
            fleet.relays[1]
                .admin_with("GET", "/v1/instances", &auth)
                .1
                .contains("\"draining\": 1")
        }),
        "{}",
        fleet.logs()
    );
    for endpoint in endpoints {
        match raw::login(endpoint, "app@shop", PASSWORD, None).unwrap() {
            Err((code, _)) => assert_eq!(code, 1045),
            Ok(_) => panic!("a login reached a removed instance"),
        }
    }
    assert_eq!(
        raw::one_row(&mut held, "SELECT 6 * 7").as_deref(),
        Some("42")
    );
    assert_eq!(
        count_lines(&shop.join("stops.log")),
        0,
        "paused under a live session"
    );
    // The fleet's last connection ends: the compute is paused, once, and both relays forget
    // the instance.
    drop(held);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || {
            !lists_shop(&fleet.relays[0]) && !lists_shop(&fleet.relays[1])
        }),
        "{}",
        fleet.logs()
    );
    assert_eq!(count_lines(&shop.join("stops.log")), 1, "{}", fleet.logs());
    let ledger = fleet.members[0]
        .ctl(&[
            "get",
            "--prefix",
            "/perceptron/ledger/",
            "--print-value-only",
        ])
        .unwrap();
    let shop_states: Vec<&str> = ledger
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("shop"))
        .filter_map(|l| l.split(' ').nth(2))
        .collect();
    assert_eq!(
        shop_states,
        ["resuming", "running", "pausing", "paused"],
        "{ledger}"
    );
}

/// Whoever can write the fleet's store cannot make a relay run a program: a definition put
/// into etcd directly (no relay's seal) whose `start` would leave a marker file is not run.
/// The relay says why (`GET /v1/instance-files`), the instance does not exist, and a login
/// naming it through the endpoint is refused without running anything. A sealed definition
/// changed in the store afterwards is refused the same way, and what it defined before runs
/// on.
#[test]
fn a_definition_written_to_the_store_by_anyone_else_runs_nothing() {
    const TOKEN: &str = "fleet-unsealed-token-0123";
    let mut fleet = Fleet::start("fleet-unsealed", 0, "1h");
    let endpoint = free_port();
    fleet.add_relay_with_endpoint(0, TOKEN, endpoint);
    let relay = &fleet.relays[0];
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let marker = fleet.dir.path().join("started-by-the-store");
    let definition = |program: &str| {
        format!(
            "compute = \"127.0.0.1:{}\"\n[driver]\nkind = \"exec\"\n\
             start = [\"sh\", \"-c\", \"{program} {}\"]\nstop = [\"true\"]\n",
            free_port(),
            marker.display()
        )
    };
    fleet.members[0]
        .ctl(&[
            "put",
            "/perceptron/definitions/evil.toml",
            &definition("touch"),
        ])
        .unwrap();
    let refused = |name: &str, why: &str| {
        Relay::wait_until(Duration::from_secs(30), || {
            let (_, body) = relay.admin_with("GET", "/v1/instance-files", &auth);
            body.contains(&format!("\"{name}\"")) && body.contains(why)
        })
    };
    assert!(refused("evil", "not sealed by a relay"), "{}", fleet.logs());
    assert!(
        !relay
            .admin_with("GET", "/v1/instances", &auth)
            .1
            .contains("\"evil\"")
    );
    match raw::login(endpoint, "app@evil", PASSWORD, None).unwrap() {
        Err((code, _)) => assert_eq!(code, 1045),
        Ok(_) => panic!("a login reached an instance nobody sealed"),
    }
    assert!(
        !marker.exists(),
        "the store's definition ran its start command"
    );

    // A definition of that name put through the admin API that cannot start (its listen
    // address is taken): the relay puts back what was there byte for byte, without sealing
    // it, so the store's text is still not run.
    let busy = format!(
        "listen = \"127.0.0.1:{}\"\n{}",
        relay.port,
        definition("true")
    );
    let (code, body) = relay.admin_request("PUT", "/v1/instances/evil", &auth, &busy);
    assert_eq!(code, 422, "{body}\n{}", fleet.logs());
    let stored = fleet.members[0]
        .ctl(&[
            "get",
            "/perceptron/definitions/evil.toml",
            "--print-value-only",
        ])
        .unwrap();
    assert!(!stored.contains("perceptron-seal"), "{stored}");
    assert!(refused("evil", "not sealed by a relay"), "{}", fleet.logs());
    match raw::login(endpoint, "app@evil", PASSWORD, None).unwrap() {
        Err((code, _)) => assert_eq!(code, 1045),
        Ok(_) => panic!("a login reached an instance nobody sealed"),
    }
    assert!(
        !marker.exists(),
        "the restored definition ran its start command"
    );

    // Sealed through the admin API, then changed in the store: refused, the sealed one runs on.
    let (code, body) = relay.admin_request("PUT", "/v1/instances/shop", &auth, &definition("true"));
    assert_eq!(code, 201, "{body}\n{}", fleet.logs());
    let stored = fleet.members[0]
        .ctl(&[
            "get",
            "/perceptron/definitions/shop.toml",
            "--print-value-only",
        ])
        .unwrap();
    let tampered = stored.replace("\"true ", "\"touch ");
    assert_ne!(tampered, stored);
    fleet.members[0]
        .ctl(&["put", "/perceptron/definitions/shop.toml", &tampered])
        .unwrap();
    assert!(
        refused("shop", "does not match its text"),
        "{}",
        fleet.logs()
    );
    // A login wakes the sealed definition, whose start runs `true` (no compute comes up, so
    // the login fails): not the changed one, which would leave the marker.
    let _ = raw::login(endpoint, "app@shop", PASSWORD, None);
    assert!(
        relay
            .admin_with("GET", "/v1/instances", &auth)
            .1
            .contains("\"shop\"")
    );
    assert!(!marker.exists());
}
