//! A local process that binds the compute's address before the compute does: it
//! greets like a MySQL server, so a readiness probe alone would trust it and hand it the
//! relayed login (scramble A and the client's answer). The process driver trusts only a
//! listener its own child holds; with any driver, a dual-mode compute must prove it holds the
//! perceptron key before the relay sends it anything of the client's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authplugin::Scramble;
use authplugin::compute_proof::Hello;
use authplugin::packet::capabilities::CLIENT_PLUGIN_AUTH;
use authplugin::packet::capabilities::{CLIENT_CONNECT_WITH_DB, CLIENT_PROTOCOL_41};
use authplugin::packet::{HandshakeResponse41, HandshakeV10};
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb};

#[test]
fn a_process_squatting_on_the_compute_address_never_receives_a_login() {
    let dir = TempDir::new("relay-impostor");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            // A compute that starts but never listens: only the impostor ever greets.
            command: Some(vec!["sleep".into(), "60".into()]),
            resume_timeout: "3s",
            ..RelayOptions::default()
        },
    );
    let impostor = Impostor::start(relay.compute_port, false);
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    let (accepted, received) = impostor.stop();

    assert_ne!(out.code, Some(0), "the login must fail: {}", out.stdout);
    assert!(
        accepted >= 1,
        "the relay probed the address (the impostor greeted):\n{}",
        relay.log()
    );
    assert!(
        received.is_empty(),
        "the impostor received {} bytes from the relay:\n{}",
        received.len(),
        relay.log()
    );
    assert!(
        relay
            .log()
            .contains("another process listens on the compute address"),
        "{}",
        relay.log()
    );
}

/// The exec driver cannot tell which process listens (its `start` may hand off to a service
/// manager), so an impostor's greeting passes readiness. It still receives neither scramble A
/// nor the client's answer, only a Hello it cannot answer, and the session it offers reaches
/// no client.
#[test]
fn with_the_exec_driver_an_impostor_gets_a_hello_and_no_client() {
    let dir = TempDir::new("relay-impostor-exec");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(
                "[instance.driver]\nkind = \"exec\"\nstart = [\"true\"]\nstop = [\"true\"]\n"
                    .into(),
            ),
            resume_timeout: "5s",
            ..RelayOptions::default()
        },
    );
    let impostor = Impostor::start(relay.compute_port, true);
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    let (_, received) = impostor.stop();

    assert_ne!(out.code, Some(0), "no session: {}", out.stdout);
    assert!(out.stderr.contains("1053"), "{}", out.stderr);
    // What the relay sent: its login, whose answer is a Hello; then nothing.
    let (packet, used) = authplugin::packet::parse_packet(&received, 1 << 20)
        .unwrap()
        .unwrap_or_else(|| panic!("no login received:\n{}", relay.log()));
    let rest = &received[used..];
    let login = HandshakeResponse41::decode_for_server(&packet.payload, u32::MAX).unwrap();
    assert_eq!(login.username, USER.as_bytes());
    assert!(
        Hello::decode(&login.auth_response).is_ok(),
        "the answer must be a Hello, not the client's"
    );
    assert!(rest.is_empty(), "{} more bytes", rest.len());
    assert!(relay.logged("compute_unproven"), "{}", relay.log());
}

/// A squatter on the compute address when the relay starts (exec driver, which cannot tell
/// which process listens): it used to be adopted as the running compute, the next client took
/// the direct route and sent it a full native login (its answer to the squatter's scramble,
/// enough for an offline dictionary attack), and its version string became the learnt
/// profile. Now it greets without a proof of the key, so no connection goes straight to it:
/// every login takes the perceptron route and sends it only a Hello; the session it offers
/// without a proof stops the "compute" and marks the instance failed, and a wake that finds
/// it again trusts it no more.
#[test]
fn an_exec_driver_squatter_is_never_trusted_with_a_direct_login_nor_the_profile() {
    let dir = TempDir::new("relay-impostor-adopt");
    let mut first = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(
                "[instance.driver]\nkind = \"exec\"\nstart = [\"true\"]\nstop = [\"true\"]\n"
                    .into(),
            ),
            resume_timeout: "5s",
            ..RelayOptions::default()
        },
    );
    first.stop();
    let impostor = Impostor::start(first.compute_port, true);
    let relay = first.restart();
    let mut outs = Vec::new();
    for _ in 0..2 {
        outs.push(mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1"));
        // The refused session stops the "compute": the instance is failed, not running.
        let failed = Relay::wait_until(Duration::from_secs(10), || relay.state() == "failed");
        assert!(failed, "state {}:\n{}", relay.state(), relay.log());
    }
    let (_, received) = impostor.stop();

    for out in &outs {
        assert_ne!(out.code, Some(0), "no session: {}", out.stdout);
        assert!(
            out.stderr.contains("1053"),
            "{}\n{}",
            out.stderr,
            relay.log()
        );
    }
    // Every login the squatter received answers with a Hello, never the client's answer (the
    // relay's proof probes send one too).
    let mut rest = &received[..];
    let mut logins = 0;
    while let Ok(Some((packet, used))) = authplugin::packet::parse_packet(rest, 1 << 20) {
        rest = &rest[used..];
        let Ok(login) = HandshakeResponse41::decode_for_server(&packet.payload, u32::MAX) else {
            continue;
        };
        assert!(
            Hello::decode(&login.auth_response).is_ok(),
            "a login carried {} bytes that are not a Hello:\n{}",
            login.auth_response.len(),
            relay.log()
        );
        // The relay's own probes ask for the proof too, under their own name.
        if login.username != b"perceptron_proof_probe" {
            logins += 1;
        }
    }
    assert_eq!(logins, 2, "one relayed login per client:\n{}", relay.log());
    let profile = std::fs::read(dir.path().join("state/profiles/demo.profile")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&profile).contains("impostor"),
        "the squatter's greeting became the profile"
    );
    assert!(
        relay
            .log()
            .contains("the compute did not prove it holds the key"),
        "{}",
        relay.log()
    );
}

/// A squatter that takes the compute's address while the instance runs (the compute died
/// and the exec driver, probing greetings, still sees something greet): the relay probes a
/// compute proven by its greeting again while it runs, and one that no longer proves the key
/// is routed to directly no more. Before, every later client took the direct route to the
/// squatter until the idle pause.
#[test]
fn a_squatter_that_replaces_a_running_compute_loses_the_direct_route() {
    let dir = TempDir::new("relay-impostor-replace");
    let shim = tests::bin_path("server-shim");
    let driver = format!(
        r#"[instance.driver]
kind = "exec"
start = ["sh", "-c", "'{shim}' run --listen 127.0.0.1:{{COMPUTE_PORT}} --data '{{DIR}}/data' --key-file '{{DIR}}/perceptron.key' > '{{DIR}}/exec-shim.log' 2>&1 & echo $! > '{{DIR}}/exec.pid'"]
stop = ["sh", "-c", "kill $(cat '{{DIR}}/exec.pid') 2>/dev/null; true"]
"#,
        shim = shim.display()
    );
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            driver_toml: Some(driver),
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, relay.log());
    let pid = std::fs::read_to_string(dir.path().join("exec.pid")).unwrap();
    let pid = pid.trim().to_owned();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let pid: u32 = pid.parse().unwrap();
    assert!(Relay::wait_until(Duration::from_secs(10), || {
        !tests::relay::pid_alive(pid)
    }));
    let impostor = Impostor::start(relay.compute_port, true);
    let noticed = Relay::wait_until(Duration::from_secs(60), || {
        relay
            .log()
            .contains("the compute address no longer proves the key")
    });
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    let (_, received) = impostor.stop();
    assert!(noticed, "{}", relay.log());
    assert_ne!(out.code, Some(0), "no session: {}", out.stdout);
    // What reached the squatter after the relay noticed: a Hello, never a client's answer.
    let (packet, _) = authplugin::packet::parse_packet(&received, 1 << 20)
        .unwrap()
        .unwrap_or_else(|| panic!("no login received:\n{}", relay.log()));
    let login = HandshakeResponse41::decode_for_server(&packet.payload, u32::MAX).unwrap();
    assert!(
        Hello::decode(&login.auth_response).is_ok(),
        "the squatter got a client's answer:\n{}",
        relay.log()
    );
}

/// A process on the compute's address that greets every connection like a MySQL server (no
/// proof of the key) and records what it is sent; with `say_ok`, it answers the first packet
/// of each connection with an OK, offering a session.
struct Impostor {
    thread: std::thread::JoinHandle<()>,
    received: Arc<Mutex<Vec<u8>>>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Impostor {
    fn start(port: u16, say_ok: bool) -> Self {
        // The address a killed compute held may stay taken for a moment by its connections'
        // closing sockets; a squatter takes it as soon as the kernel lets it.
        let mut bound = None;
        Relay::wait_until(Duration::from_secs(10), || {
            bound = TcpListener::bind(("127.0.0.1", port)).ok();
            bound.is_some()
        });
        let listener = bound.unwrap_or_else(|| panic!("127.0.0.1:{port} stayed taken"));
        listener.set_nonblocking(true).unwrap();
        let received = Arc::new(Mutex::new(Vec::<u8>::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, a, st) = (received.clone(), accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let greeting = HandshakeV10::new(
                b"5.7.99-impostor".to_vec(),
                1,
                &Scramble::from_bytes(*b"IIIIIIIIIIIIIIIIIIII"),
                CLIENT_PROTOCOL_41 | CLIENT_CONNECT_WITH_DB | CLIENT_PLUGIN_AUTH,
                45,
                2,
                "mysql_native_password",
            )
            .to_bytes();
            while !st.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                a.fetch_add(1, Ordering::Relaxed);
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(tests::scaled(Duration::from_secs(5))))
                    .unwrap();
                let mut framed = Vec::new();
                authplugin::packet::write_packet(&mut framed, 0, &greeting);
                let _ = s.write_all(&framed);
                let mut buf = [0u8; 4096];
                let mut answered = false;
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    r.lock().unwrap().extend_from_slice(&buf[..n]);
                    if say_ok && !answered {
                        answered = true;
                        let mut ok = Vec::new();
                        authplugin::packet::write_packet(&mut ok, 2, &[0, 0, 0, 2, 0, 0, 0]);
                        let _ = s.write_all(&ok);
                    }
                }
            }
        });
        Self {
            thread,
            received,
            accepted,
            stop,
        }
    }

    /// Stops it; how many connections it accepted and every byte it received.
    fn stop(self) -> (usize, Vec<u8>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let got = self.received.lock().unwrap().clone();
        (self.accepted.load(Ordering::Relaxed), got)
    }
}
