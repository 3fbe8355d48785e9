//! Certificates for TLS tests, made with the `openssl` CLI: a CA per name and leaf
//! certificates it signed (server ones for `localhost` and 127.0.0.1), keys mode 0600.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl` with `args` in `dir`.
///
/// # Panics
/// If it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<name>-ca.pem`) in `dir`, and a certificate `<name>-<leaf>.pem` with its key
/// (`.key`, mode 0600) signed by it for each `(leaf, extensions)`.
///
/// # Panics
/// If `openssl` fails.
pub fn pki(dir: &Path, name: &str, leaves: &[(&str, &str)]) {
    let ca = format!("{name}-ca");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
            "-days",
            "30",
            "-subj",
            &format!("/CN={name} test CA"),
        ],
    );
    for (leaf, ext) in leaves {
        let base = format!("{name}-{leaf}");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{base}.key"),
                "-out",
                &format!("{base}.csr"),
                "-subj",
                &format!("/CN={leaf}"),
            ],
        );
        std::fs::write(dir.join(format!("{base}.ext")), ext).unwrap_or_else(|e| panic!("{e}"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{base}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-out",
                &format!("{base}.pem"),
                "-days",
                "30",
                "-extfile",
                &format!("{base}.ext"),
            ],
        );
        std::fs::set_permissions(
            dir.join(format!("{base}.key")),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// `openssl x509 -extfile` lines for a server certificate of `localhost` and 127.0.0.1.
pub const SERVER_EXT: &str = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                          extendedKeyUsage=serverAuth\n";
/// `openssl x509 -extfile` lines for a client certificate.
pub const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

/// Certificates for one test: `good` (the relay's, and a client certificate), `other` (a CA
/// the relay does not use, and a client certificate it signed).
pub struct Certs {
    /// Where the files are.
    pub dir: PathBuf,
}

impl Certs {
    /// Makes them under `dir/certs`.
    ///
    /// # Panics
    /// If `openssl` fails.
    #[must_use]
    pub fn new(dir: &Path) -> Self {
        let dir = dir.join("certs");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        pki(
            &dir,
            "good",
            &[("server", SERVER_EXT), ("client", CLIENT_EXT)],
        );
        pki(&dir, "other", &[("client", CLIENT_EXT)]);
        Self { dir }
    }

    /// The path of one of the files, as a string.
    #[must_use]
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `[instance.tls]` with the good server certificate, offered but not required by the
    /// relay (an instance that requires it has no direct route: these leave the compute's own
    /// TLS to it while it runs).
    #[must_use]
    pub fn offer_toml(&self) -> String {
        self.instance_toml(false)
            .replace("require_secure_transport = true\n", "")
    }

    /// The `[[instance]]` lines that turn TLS on (and require it).
    #[must_use]
    pub fn instance_toml(&self, client_ca: bool) -> String {
        format!(
            "require_secure_transport = true\n[instance.tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
            self.path("good-server.pem"),
            self.path("good-server.key"),
            if client_ca {
                format!("client_ca = \"{}\"\n", self.path("good-ca.pem"))
            } else {
                String::new()
            }
        )
    }
}
