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

/// Where Debian installs server plugins.
pub const SYSTEM_PLUGIN_DIR: &str = "/usr/lib/mysql/plugin";

/// A private plugin directory under `dir` holding this build's `perceptron_dual.so` (copied
/// from `target/<profile>/libperceptron_dual.so`) and links to Debian's `auth_ed25519.so`,
/// which [`command`] loads, and `metadata_lock_info.so`, which a relay that splices resumable
/// sessions needs (docs/kernel-splice.md).
///
/// # Panics
/// If the plugin has not been built (`cargo build -p mariadb-plugin`).
#[must_use]
pub fn plugin_dir(dir: &Path) -> PathBuf {
    let profile = std::env::var("PERCEPTRON_PROFILE").unwrap_or_else(|_| "debug".into());
    let built = crate::target_dir()
        .join(profile)
        .join("libperceptron_dual.so");
    assert!(
        built.is_file(),
        "{} not found: build it first (cargo build -p mariadb-plugin)",
        built.display()
    );
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(&built, plugins.join("perceptron_dual.so")).unwrap_or_else(|e| panic!("{e}"));
    for linked in ["auth_ed25519.so", "metadata_lock_info.so"] {
        let link = plugins.join(linked);
        if !link.exists() {
            std::os::unix::fs::symlink(Path::new(SYSTEM_PLUGIN_DIR).join(linked), &link)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    plugins
}

/// A relay in switch mode (`resume_timeout` 30 s) whose process driver runs a stock MariaDB on
/// a fresh data directory under `dir`; `extra` options are appended to `mariadbd`'s command
/// line, and `options` give the rest of the relay's (its command, auth mode and resume
/// timeout are set here).
///
/// # Panics
/// As [`install`] and [`crate::relay::Relay::start`].
#[must_use]
pub fn switch_relay(
    dir: &Path,
    extra: &[&str],
    options: crate::relay::RelayOptions,
) -> crate::relay::Relay {
    let datadir = install(dir);
    crate::relay::Relay::start(
        dir,
        crate::relay::RelayOptions {
            command: Some(command(&datadir, extra)),
            auth: "switch",
            resume_timeout: crate::scaled_setting(30),
            ..options
        },
    )
}

/// Where [`dual_relay`]'s MariaDB writes its error log (where the plugin explains refusals).
#[must_use]
pub fn dual_error_log(dir: &Path) -> PathBuf {
    dir.join("mariadb.err")
}

/// A relay in dual mode (`resume_timeout` 30 s) whose process driver runs a private MariaDB
/// on a fresh data directory under `dir`, loading this build's `perceptron_dual` with the
/// relay's own key ring (`dir/perceptron.key`) and logging to [`dual_error_log`]; `extra`
/// options are appended to `mariadbd`'s command line.
///
/// # Panics
/// As [`install`], [`plugin_dir`] and [`crate::relay::Relay::start`].
#[must_use]
pub fn dual_relay(dir: &Path, extra: &[&str]) -> crate::relay::Relay {
    dual_relay_with(dir, extra, "")
}

/// [`dual_relay`] with more lines for the relay's `[[instance]]` table (`instance_toml`).
///
/// # Panics
/// As [`dual_relay`].
#[must_use]
pub fn dual_relay_with(dir: &Path, extra: &[&str], instance_toml: &str) -> crate::relay::Relay {
    dual_relay_using(
        dir,
        extra,
        crate::relay::RelayOptions {
            instance_toml: instance_toml.to_owned(),
            ..crate::relay::RelayOptions::default()
        },
    )
}

/// [`dual_relay`] with `options` (their command, auth, resume timeout and `compute_proof`
/// are set here; `instance_toml` is kept after it). With `options.hosts`, MariaDB runs on
/// the compute's host.
///
/// # Panics
/// As [`dual_relay`].
#[must_use]
pub fn dual_relay_using(
    dir: &Path,
    extra: &[&str],
    options: crate::relay::RelayOptions,
) -> crate::relay::Relay {
    let datadir = install(dir);
    let plugins = plugin_dir(dir);
    let mut args = vec![
        format!("--plugin-dir={}", plugins.display()),
        "--plugin-load-add=perceptron_dual.so".to_owned(),
        format!(
            "--loose-perceptron-dual-key-file={}",
            dir.join("perceptron.key").display()
        ),
        format!("--log-error={}", dual_error_log(dir).display()),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    // On hosts of their own, MariaDB listens on the compute's host, at its address (the last
    // `--bind-address` is the one it takes).
    if let Some(hosts) = &options.hosts {
        args.push(format!("--bind-address={}", hosts.compute));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let on_host = options
        .hosts
        .as_ref()
        .map(|h| h.on_compute())
        .unwrap_or_default();
    crate::relay::Relay::start(
        dir,
        crate::relay::RelayOptions {
            command: Some(
                on_host
                    .into_iter()
                    .chain(command(&datadir, &args))
                    .collect(),
            ),
            auth: "dual",
            resume_timeout: crate::scaled_setting(30),
            // MariaDB proves the key only in a login's challenge round.
            instance_toml: format!("compute_proof = \"login\"\n{}", options.instance_toml),
            ..options
        },
    )
}
