//! A real S3-compatible server on loopback for the offload tests: `s3s-fs` (crates.io), which
//! checks every request's SigV4 signature against the one key pair it is given and keeps each
//! object as a plain file under `<root>/<bucket>/<key>`, so a test can corrupt or remove one
//! as on any store. `scripts/test` installs it into `target/tools` when missing.
//!
//! Why this server: the signature check proves the relay's requests are signed as S3 wants
//! (a mock such as moto's server accepts unsigned ones), it is one binary from the registry
//! the build already uses (no Python dependency set), and it starts in milliseconds.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ChildGuard, READY_TIMEOUT, free_port, target_dir};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "perceptron-test";
/// Its secret.
pub const SECRET_KEY: &str = "test-secret-not-for-production";

/// A running `s3s-fs`, killed by PID on drop.
#[derive(Debug)]
pub struct S3Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Where it keeps buckets (one directory each) and objects (files under them).
    pub root: PathBuf,
    program: PathBuf,
    guard: Option<ChildGuard>,
}

impl S3Server {
    /// Starts a server keeping its data under `root`, with `bucket` created, and waits until
    /// it accepts connections.
    ///
    /// # Panics
    /// If `s3s-fs` is not installed (with the command that installs it) or does not listen in
    /// time.
    #[must_use]
    pub fn start(root: &Path, bucket: &str) -> Self {
        let program = target_dir().join("tools/bin/s3s-fs");
        assert!(
            program.is_file(),
            "{} not found: scripts/test installs it (cargo install --locked s3s-fs@0.14.1 \
             --features binary --root {})",
            program.display(),
            target_dir().join("tools").display()
        );
        std::fs::create_dir_all(root.join(bucket)).unwrap();
        let mut server = Self {
            port: free_port(),
            root: root.to_owned(),
            program,
            guard: None,
        };
        server.restart();
        server
    }

    /// Starts the server (again, after [`Self::stop`]) on the same port and root, and waits
    /// until it accepts connections.
    ///
    /// # Panics
    /// If it does not listen in time.
    pub fn restart(&mut self) {
        let child = Command::new(&self.program)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.guard = Some(ChildGuard::new(child));
        let deadline = Instant::now() + crate::scaled(READY_TIMEOUT);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:<port>`, the relay's `endpoint`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL): the store is unreachable until [`Self::restart`].
    pub fn stop(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.kill9();
        }
    }
}
