//! A private MariaDB for switch-mode tests: a data directory made by `mariadb-install-db`
//! (root with an empty password, reachable over TCP), and the `mariadbd` command line a relay's
//! process driver runs on a given port.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian installs the server.
pub const MARIADBD: &str = "/usr/sbin/mariadbd";

/// Creates a fresh data directory under `dir`, with a private temporary directory next to it.
///
/// Every `mariadbd` that starts deletes the `#sql*` files it finds in its `tmpdir`, so servers
/// (or `mariadb-install-db` runs) sharing `/tmp` destroy each other's temporary tables: that is
/// how parallel tests failed with "Unknown table 'mysql.tmp_user_sys'". Each data directory
/// therefore gets its own `tmpdir`, and [`command`] passes it to the server.
///
/// # Panics
/// If `mariadb-install-db` fails (is `mariadb-server` installed?).
#[must_use]
pub fn install(dir: &Path) -> PathBuf {
    let datadir = dir.join("mariadb");
    let tmpdir = tmpdir_of(&datadir);
    std::fs::create_dir_all(&tmpdir)
        .unwrap_or_else(|e| panic!("creating {}: {e}", tmpdir.display()));
    let out = Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
        ])
        .output()
        .unwrap_or_else(|e| panic!("mariadb-install-db: {e} (install mariadb-server)"));
    assert!(
        out.status.success(),
        "mariadb-install-db failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    datadir
}

/// The `mariadbd` command for a process driver: its own socket, TCP on 127.0.0.1 only, the
/// ed25519 plugin loaded, plus `extra` options.
#[must_use]
pub fn command(datadir: &Path, extra: &[&str]) -> Vec<String> {
    let mut cmd = vec![
        MARIADBD.to_owned(),
        "--no-defaults".to_owned(),
        format!("--datadir={}", datadir.display()),
        format!("--socket={}", datadir.join("mysqld.sock").display()),
        format!("--tmpdir={}", tmpdir_of(datadir).display()),
        "--port={COMPUTE_PORT}".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        "--user=root".to_owned(),
        "--skip-name-resolve".to_owned(),
        "--plugin-load-add=auth_ed25519".to_owned(),
        "--innodb-buffer-pool-size=16M".to_owned(),
        "--skip-log-bin".to_owned(),
    ];
    cmd.extend(extra.iter().map(|s| (*s).to_owned()));
    cmd
}

/// The private temporary directory of the server on `datadir` (a sibling, so that it is not
/// mistaken for a database).
fn tmpdir_of(datadir: &Path) -> PathBuf {
    datadir.with_extension("tmp")
}
