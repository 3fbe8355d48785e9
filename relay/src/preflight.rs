//! What `relay check` and `relay run` verify before anything listens (docs/operations.md,
//! "Checking a configuration"): beyond what parsing the configuration checks, the files and
//! programs it names and the addresses it uses together. Every problem is found (not only the
//! first), each as one line that names the file and the key. And the state directory's lock:
//! one relay per `state_dir`.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::config::{AuthMode, ComputeTlsMode, Config, DriverConfig, RouteMode, StoreSettings};

/// One thing wrong with a configuration, as `relay check` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key to blame (`instance[0].compute`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// What is wrong with the files of `relay.instances_dir` (each checked as the relay would
/// read it), or with the directory itself. The relay starts regardless: a file it cannot use
/// is logged and skipped, and the others run.
fn instance_file_problems(config: &Config) -> Vec<String> {
    let Some(dir) = &config.relay.instances_dir else {
        return Vec::new();
    };
    if let Err(e) = crate::config::instance_file::check_directory(dir) {
        return vec![format!("{}: {e}", dir.display())];
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return vec![format!("{}: cannot read the directory: {e}", dir.display())],
    };
    let mut names: Vec<(String, std::path::PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name =
                crate::config::instance_file::instance_name(e.file_name().to_str()?)?.to_owned();
            Some((name, e.path()))
        })
        .collect();
    names.sort();
    let mut problems = Vec::new();
    for (name, path) in names {
        if config.instances.iter().any(|i| i.name == name) {
            problems.push(format!(
                "{}: an [[instance]] of the configuration file has this name; the file is not used",
                path.display()
            ));
            continue;
        }
        match crate::config::instance_file::read_trusted(&path) {
            Ok(text) => {
                if let Err(e) = config.parse_instance_file(&text, &path, dir) {
                    problems.push(e.to_string());
                }
            }
            Err(e) => problems.push(format!("{}: cannot read: {e}", path.display())),
        }
    }
    problems
}

/// Every problem of `config` that parsing it does not find: the key file (readable, mode 0600
/// or stricter, a valid key ring), the admin token file, a writable `state_dir`, addresses
/// used twice (an instance's `listen`, its `compute`, the admin API), and driver programs
/// that are missing or not executable. Empty when the relay can start.
#[must_use]
pub fn check(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, message: String| {
        problems.push(Problem {
            key: key.to_owned(),
            message,
        });
    };
    if let Err(e) = authplugin::key_file::load(&config.relay.key_file) {
        problem(
            "relay.key_file",
            format!("{e} (create one with `relay keygen`)"),
        );
    }
    if let Some(path) = &config.relay.admin_token_file {
        if let Err(e) = read_token(path) {
            problem("relay.admin_token_file", e.to_string());
        }
    }
    if let crate::config::StoreSettings::Etcd(etcd) = &config.relay.store
        && let Some(path) = &etcd.definitions_key_file
    {
        let login_keys = authplugin::key_file::load(&config.relay.key_file).ok();
        match authplugin::key_file::load(path) {
            Err(e) => problem(
                "relay.store.definitions_key_file",
                format!("{e} (create one with `relay keygen`)"),
            ),
            // The login keys are the computes' too: a compute could seal definitions.
            Ok(ring)
                if path == &config.relay.key_file
                    || login_keys.is_some_and(|l| l.shares_a_secret_with(&ring)) =>
            {
                problem(
                    "relay.store.definitions_key_file",
                    "holds a key of relay.key_file, which the computes hold too: a compute \
                     could seal definitions every relay runs; use a key of the relays' own \
                     (relay keygen)"
                        .to_owned(),
                );
            }
            Ok(_) => {}
        }
    }
    if let Err(e) = writable_dir(&config.relay.state_dir) {
        problem(
            "relay.state_dir",
            format!(
                "{}: not a writable directory: {e}",
                config.relay.state_dir.display()
            ),
        );
    }
    for (key, message) in address_clashes(config) {
        problem(&key, message);
    }
    for (key, message) in data_dir_clashes(config) {
        problem(&key, message);
    }
    for message in instance_file_problems(config) {
        problem("relay.instances_dir", message);
    }
    if let Some(table) = &config.relay.nftables_table {
        if !crate::router::nft::valid_table_name(table) {
            problem(
                "relay.nftables_table",
                format!(
                    "'{table}' must be perceptron_ followed by 1 to 48 of a-z 0-9 _ (the relay \
                     deletes and recreates this table, so it cannot name anyone else's)"
                ),
            );
        }
    }
    if let StoreSettings::Etcd(etcd) = &config.relay.store {
        if crate::fleet::record::relay_id(&etcd.relay_id).is_none() {
            problem(
                "relay.store.relay_id",
                format!(
                    "'{}' cannot name a relay: use 1-64 characters of A-Z a-z 0-9 . _ -",
                    etcd.relay_id
                ),
            );
        }
    }
    for (i, ep) in config.endpoints.iter().enumerate() {
        if let Some(tls) = &ep.tls
            && let Err(e) = crate::tls::load(tls)
        {
            problem(
                &format!("endpoint[{i}].tls.{}", e.file.key()),
                e.to_string(),
            );
        }
    }
    for (i, inst) in config.instances.iter().enumerate() {
        let key = |field: &str| format!("instance[{i}].{field}");
        // TLS files are loaded here, once, to prove they work; the relay loads them again when
        // it starts and on every reload.
        if let Some(tls) = &inst.tls {
            if let Err(e) = crate::tls::load(tls) {
                problem(&key(&format!("tls.{}", e.file.key())), e.to_string());
            }
        }
        // The S3 credentials file: owner-only, and readable by the relay's user (its contents
        // are checked when the store is opened at start).
        if let Some(crate::config::OffloadConfig {
            mover: crate::config::OffloadMover::Relay(archive),
            ..
        }) = &inst.offload
            && let Some(path) = &archive.s3.credentials_file
            && let Err(e) = authplugin::read_secret_file(path)
        {
            problem(&key("offload.credentials_file"), e.to_string());
        }
        let compute_name = inst
            .compute_tls_name
            .clone()
            .unwrap_or_else(|| inst.compute.ip().to_string());
        if let Err(e) =
            crate::tls::compute_client(inst.compute_tls, inst.compute_ca.as_deref(), &compute_name)
        {
            problem(&key(e.key()), e.to_string());
        }
        match &inst.driver {
            DriverConfig::Process { command, cwd, .. } => {
                if !cwd.is_dir() {
                    problem(
                        &key("driver.cwd"),
                        format!("{} is not a directory", cwd.display()),
                    );
                }
                if let Some(message) = argv_problem(command, cwd) {
                    problem(&key("driver.command"), message);
                }
            }
            DriverConfig::Exec(spec) => {
                if !spec.cwd.is_dir() {
                    problem(
                        &key("driver.cwd"),
                        format!("{} is not a directory", spec.cwd.display()),
                    );
                }
                let commands = [
                    ("start", Some(&spec.start)),
                    ("stop", Some(&spec.stop)),
                    ("status", spec.status.as_ref()),
                    ("scale", spec.scale.as_ref()),
                    ("cpu_usage", spec.cpu_usage.as_ref()),
                    ("offload", spec.offload.as_ref()),
                    ("restore", spec.restore.as_ref()),
                ];
                for (name, argv) in commands {
                    if let Some(message) = argv.and_then(|a| argv_problem(a, &spec.cwd)) {
                        problem(&key(&format!("driver.{name}")), message);
                    }
                }
            }
            DriverConfig::Http(_) => {}
        }
        if inst.route == RouteMode::Nftables && program_problem("nft", Path::new("/")).is_some() {
            problem(
                &key("route"),
                "\"nftables\" needs the `nft` program, which is not on PATH (apt-get install \
                 nftables)"
                    .to_owned(),
            );
        }
    }
    problems
}

/// Whether `dir` takes a new file, or, when it does not exist yet, whether `run` could create
/// it (its nearest existing ancestor is a directory this process may write). A check creates
/// nothing but a probe file it removes at once.
fn writable_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        let probe = dir.join(format!(".relay-check-{}", std::process::id()));
        let written = File::create(&probe).and_then(|mut f| f.write_all(b"probe"));
        let _ = std::fs::remove_file(&probe);
        return written;
    }
    let mut ancestor = dir;
    loop {
        match std::fs::metadata(ancestor) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", ancestor.display()),
                ));
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound || ancestor == Path::new(".") => {
                return Err(e);
            }
            Err(_) => {}
        }
        ancestor = match ancestor.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
    }
    // EROFS on a read-only file system, EACCES without write permission: even for root.
    nix::unistd::access(
        ancestor,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|errno| {
        std::io::Error::new(
            std::io::Error::from(errno).kind(),
            format!("cannot create it in {}: {errno}", ancestor.display()),
        )
    })
}

/// Every offloaded data directory that overlaps (is, holds, or is inside) another instance's,
/// the relay's `state_dir`, or a `file://` store ([`crate::config::data_dirs`]), and every
/// `file://` store inside the `state_dir`. (Instances started later, from instance files, the
/// admin API or a fleet's store, are checked when they start.)
fn data_dir_clashes(config: &Config) -> Vec<(String, String)> {
    use crate::config::data_dirs;
    let all: Vec<&crate::config::InstanceConfig> = config.instances.iter().collect();
    let state = config.relay.state_dir.as_path();
    let mut clashes = Vec::new();
    for (i, inst) in config.instances.iter().enumerate() {
        if let Some(message) = data_dirs::overlap(inst, &all, &[("relay.state_dir", state)]) {
            clashes.push((format!("instance[{i}].offload.data_dir"), message));
        }
        for (key, at) in data_dirs::places(inst).into_iter().skip(1) {
            if at.starts_with(state) || state.starts_with(&at) {
                let message = format!(
                    "{} overlaps relay.state_dir ({})",
                    at.display(),
                    state.display()
                );
                clashes.push((format!("instance[{i}].{key}"), message));
            }
        }
    }
    clashes
}

/// Every pair of configured addresses that would be the same socket: a compute on a relay
/// listener (the relay would log in to itself), the admin API on either.
fn address_clashes(config: &Config) -> Vec<(String, String)> {
    let mut used: Vec<(String, SocketAddr)> = config.listen_addresses().collect();
    let mut clashes = Vec::new();
    for (i, inst) in config.instances.iter().enumerate() {
        for (other, addr) in &used {
            if let Some(message) =
                crate::config::compute_on_relay_listener(inst.compute, other, *addr)
            {
                clashes.push((format!("instance[{i}].compute"), message));
            }
        }
    }
    for (i, inst) in config.instances.iter().enumerate() {
        used.push((format!("instance[{i}].compute"), inst.compute));
    }
    if let Some(admin) = config.relay.admin_listen {
        for (other, addr) in &used {
            if crate::config::same_listener(admin, *addr) {
                clashes.push((
                    "relay.admin_listen".to_owned(),
                    format!("{admin} is also {other} ({addr})"),
                ));
            }
        }
    }
    clashes
}

/// What `config` allows but an operator should know, as `relay check` prints it (it does not
/// stop the relay; `relay run` logs it): a fleet's store anyone who reaches it can write, or
/// whose instance definitions this relay cannot verify; an instance in switch mode without TLS to its compute, where a compute
/// that asks for a password in clear is refused (ERR 1251) rather than sent one; an instance
/// whose logins must meet the relay's TLS, which therefore has no direct route.
#[must_use]
pub fn warnings(config: &Config) -> Vec<Problem> {
    store_warnings(config)
        .into_iter()
        .chain(admin_warning(config))
        .chain(instance_warnings(config))
        .collect()
}

/// An admin API off loopback: it has no TLS, so its token crosses the network in clear.
fn admin_warning(config: &Config) -> Option<Problem> {
    let addr = config.relay.admin_listen?;
    (!addr.ip().is_loopback()).then(|| Problem {
        key: "relay.admin_listen".into(),
        message: format!(
            "{addr} is not a loopback address and the admin API speaks plain HTTP: its bearer \
             token crosses the network in clear; keep it on loopback (or a private network you \
             trust), or put a TLS-terminating proxy in front and listen on loopback"
        ),
    })
}

/// A fleet's store that anyone who reaches it can write (etcd without client certificates),
/// and one whose instance definitions this relay cannot verify.
fn store_warnings(config: &Config) -> Vec<Problem> {
    let crate::config::StoreSettings::Etcd(etcd) = &config.relay.store else {
        return Vec::new();
    };
    let open_store = etcd.cert_file.is_none().then(|| Problem {
        key: "relay.store.cert_file".to_owned(),
        message: format!(
            "etcd {} without a client certificate: whoever can reach etcd can change the \
             fleet's state (wake, pause, block every relay); run etcd with \
             --client-cert-auth and set ca_file, cert_file and key_file",
            if etcd.tls() {
                "over TLS but"
            } else {
                "over plain http,"
            }
        ),
    });
    let unverified = etcd.definitions_key_file.is_none().then(|| Problem {
        key: "relay.store.definitions_key_file".to_owned(),
        message: "not set: instance definitions in the fleet's store are not run (they name \
                  programs every relay would run), and the admin API cannot write one; set it \
                  to a key file of the relays' own (relay keygen), the same on every relay"
            .to_owned(),
    });
    open_store.into_iter().chain(unverified).collect()
}

fn instance_warnings(config: &Config) -> Vec<Problem> {
    config
        .instances
        .iter()
        .enumerate()
        .flat_map(|(i, inst)| {
            let plaintext_switch = (inst.auth == AuthMode::Switch
                && inst.compute_tls == ComputeTlsMode::Off)
                .then(|| Problem {
                    key: format!("instance[{i}].compute_tls"),
                    message: "switch mode without TLS to the compute: a login for which the \
                              compute asks for anything but a challenge-response answer \
                              (mysql_clear_password, sha256_password, or caching_sha2_password's \
                              full authentication, as MySQL 8 asks on each account's first login \
                              after a restart) is refused with ERR 1251; set compute_tls = \
                              \"verify\" and compute_ca"
                        .to_owned(),
                });
            let no_direct_route = inst.relay_terminates_every_login().then(|| Problem {
                key: format!(
                    "instance[{i}].{}",
                    if inst.require_secure_transport {
                        "require_secure_transport"
                    } else {
                        "tls.client_ca"
                    }
                ),
                message: "enforced by the relay on every login, so this instance has no direct \
                          route: while it runs, each new connection is greeted and its login \
                          relayed by the relay, which terminates its TLS (the route = \
                          \"nftables\" kernel route is refused with it)"
                    .to_owned(),
            });
            let tls_logins_relayed = (inst.tls.is_some()
                && !inst.relay_terminates_every_login()
                && !inst.resumable_sessions)
                .then(|| Problem {
                    key: format!("instance[{i}].tls"),
                    message: if inst.route == RouteMode::Nftables {
                        "with route = \"nftables\" a running instance's logins go to the \
                         compute unseen: TLS logins there are not charged to the failed-login \
                         budgets (use the compute's own limits, max_password_errors)"
                    } else if inst.reads_tls_logins() {
                        "every login is relayed, also while the instance runs: the relay \
                         terminates its TLS and charges its failures to the failed-login \
                         budgets (inside the compute's own TLS it could not); accounts not \
                         IDENTIFIED VIA perceptron_dual cannot log in through a dual-mode relay"
                    } else {
                        "switch mode with compute_tls = \"off\" keeps the direct route, where \
                         the compute terminates TLS: TLS logins to the running instance are not \
                         charged to the failed-login budgets; set compute_tls = \"verify\" for \
                         the relay to read every login"
                    }
                    .to_owned(),
                });
            let every_login_relayed = (inst.resumable_sessions
                && !inst.relay_terminates_every_login())
            .then(|| Problem {
                key: format!("instance[{i}].resumable_sessions"),
                message: "every login is relayed, also while the instance runs (each connection \
                          needs the relay's login and ticket to survive a stop): accounts not \
                          IDENTIFIED VIA perceptron_dual cannot log in through the relay; \
                          administer the compute on its own address"
                    .to_owned(),
            });
            let not_behind_endpoints =
                (!config.endpoints.is_empty() && inst.auth == AuthMode::Switch).then(|| Problem {
                    key: format!("instance[{i}].auth"),
                    message: "switch mode: logins through an [[endpoint]] that name this \
                              instance are refused (ERR 1045); its own listen address serves it"
                        .to_owned(),
                });
            let compute_user =
                compute_user_warning(i, &inst.driver, nix::unistd::geteuid().as_raw());
            plaintext_switch
                .into_iter()
                .chain(compute_user)
                .chain(no_direct_route)
                .chain(tls_logins_relayed)
                .chain(every_login_relayed)
                .chain(not_behind_endpoints)
        })
        .collect()
}

/// A process driver's compute that runs as the relay's own user (it could read the relay's
/// key file, credentials and admin token, and every instance's data: tenants' SQL reaches
/// files, `LOAD_FILE` on MariaDB), or one to start as another user by a relay that is not
/// root (`relay_uid`), which needs CAP_SETUID and CAP_SETGID.
fn compute_user_warning(i: usize, driver: &DriverConfig, relay_uid: u32) -> Option<Problem> {
    let DriverConfig::Process { run_as, .. } = driver else {
        return None;
    };
    let message = match run_as {
        None => format!(
            "the compute runs as the relay's own user (uid {relay_uid}): tenants' SQL can read \
             what the relay can (its key file, credentials, admin token, other instances' \
             data; LOAD_FILE on MariaDB); set user (and group) to an unprivileged user that \
             owns the compute's data directory"
        ),
        Some(_) if relay_uid != 0 => "the relay does not run as root: starting the compute \
                                      as another user needs CAP_SETUID and CAP_SETGID"
            .to_owned(),
        Some(_) => return None,
    };
    Some(Problem {
        key: format!("instance[{i}].driver.user"),
        message,
    })
}

/// The kernel splices, tried for real when some instance would use them: a warning naming
/// the first such instance's key when this process cannot load one (held connections then
/// stay on the pump, or on the sockhash; the relay starts all the same).
#[must_use]
pub fn kernel_splice_warning(config: &Config) -> Option<Problem> {
    let i = config
        .instances
        .iter()
        .position(crate::config::InstanceConfig::splices_held)?;
    if let Err(why) = crate::splice::sockhash::KernelSplice::load() {
        return Some(Problem {
            key: format!("instance[{i}].kernel_splice"),
            message: format!(
                "held connections will stay on the relay's pump: {why} (the splice needs \
                 CAP_BPF and CAP_NET_ADMIN, or root, and a relay built with clang; \
                 docs/kernel-splice.md)"
            ),
        });
    }
    let i = config
        .instances
        .iter()
        .position(|c| c.splices_held() && c.splice_below_tcp)?;
    // Attached to loopback's ingress for the check: the attachment, like the load, needs the
    // relay's capabilities; it goes with the program, when the check ends.
    let why = match crate::splice::below_tcp::TcpSplice::load() {
        Ok(splice) => splice.attach(0).err()?.to_string(),
        Err(why) => why.to_string(),
    };
    Some(Problem {
        key: format!("instance[{i}].splice_below_tcp"),
        message: format!(
            "held connections will be spliced through their sockets, not below TCP: {why} \
             (docs/kernel-splice.md, Below TCP)"
        ),
    })
}

/// What is wrong with the program of `argv` (run in `cwd`), if anything.
fn argv_problem(argv: &[String], cwd: &Path) -> Option<String> {
    program_problem(argv.first()?, cwd)
}

/// What is wrong with `program`, if anything: a path with a slash is taken as is (relative to
/// `cwd`, where the driver runs it), a bare name is looked up on `PATH`. It must be an
/// executable file.
fn program_problem(program: &str, cwd: &Path) -> Option<String> {
    if program.contains('/') {
        return executable(&cwd.join(program))
            .err()
            .map(|why| format!("{program}: {why}"));
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&dirs).any(|dir| executable(&dir.join(program)).is_ok()) {
        return None;
    }
    Some(format!("{program}: not found on PATH"))
}

/// Why a program cannot be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotExecutable {
    Missing,
    NotAFile,
    NoExecuteBit,
}

impl std::fmt::Display for NotExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Missing => "no such file",
            Self::NotAFile => "not a file",
            Self::NoExecuteBit => "not executable (chmod +x)",
        })
    }
}

fn executable(path: &Path) -> Result<(), NotExecutable> {
    let meta = std::fs::metadata(path).map_err(|_| NotExecutable::Missing)?;
    if !meta.is_file() {
        return Err(NotExecutable::NotAFile);
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(NotExecutable::NoExecuteBit);
    }
    Ok(())
}

/// Name of the lock file in `state_dir`.
pub const LOCK_FILE: &str = "relay.lock";

/// The state directory's lock, held for the relay's life; the kernel releases it when the
/// process exits, however it exits.
#[derive(Debug)]
pub struct StateLock {
    /// Keeps the `flock` (dropping it unlocks).
    _lock: Flock<File>,
}

/// Why the state directory's lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another relay holds it.
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as it wrote it.
        pid: Option<u32>,
    },
    /// The lock file cannot be opened or locked.
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Held { path, pid } => {
                let holder =
                    pid.map_or_else(|| "another relay".to_owned(), |p| format!("relay pid {p}"));
                write!(
                    f,
                    "state directory in use: {holder} holds {} (one relay per state_dir; stop it, \
                     or give this relay a state_dir of its own)",
                    path.display()
                )
            }
            Self::Io(path, e) => write!(f, "cannot lock {}: {e}", path.display()),
        }
    }
}

impl std::error::Error for LockError {}

/// Takes the exclusive lock on `state_dir` (an `flock` on `state_dir/relay.lock`, which then
/// holds this process's pid), or says which relay holds it.
///
/// # Errors
/// [`LockError::Held`] naming the holder's pid, [`LockError::Io`] if the file is unusable.
pub fn lock_state_dir(state_dir: &Path) -> Result<StateLock, LockError> {
    let path = state_dir.join(LOCK_FILE);
    let io = |e| LockError::Io(path.clone(), e);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0)
                .and_then(|()| lock.rewind())
                .and_then(|()| writeln!(lock, "{}", std::process::id()))
                .and_then(|()| lock.sync_all())
                .map_err(io)?;
            Ok(StateLock { _lock: lock })
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            Err(LockError::Held {
                path,
                pid: text.trim().parse().ok(),
            })
        }
        Err((_, errno)) => Err(io(std::io::Error::from(errno))),
    }
}

/// Shortest admin token accepted.
const MIN_TOKEN_LEN: usize = 16;

/// Why the admin token file is unusable.
#[derive(Debug)]
pub enum TokenFileError {
    /// Unreadable, or group or others can access it.
    Unreadable(authplugin::SecretFileError),
    /// The token is shorter than 16 characters.
    TooShort(std::path::PathBuf),
}

impl std::fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreadable(e) => write!(f, "{e}"),
            Self::TooShort(path) => write!(
                f,
                "{}: token must be at least {MIN_TOKEN_LEN} characters",
                path.display()
            ),
        }
    }
}

impl std::error::Error for TokenFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreadable(e) => Some(e),
            Self::TooShort(_) => None,
        }
    }
}

/// Reads the admin bearer token, refusing a file others can read.
pub(crate) fn read_token(
    path: &std::path::Path,
) -> Result<zeroize::Zeroizing<String>, TokenFileError> {
    let text = authplugin::read_secret_file(path).map_err(TokenFileError::Unreadable)?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenFileError::TooShort(path.to_owned()));
    }
    Ok(zeroize::Zeroizing::new(token.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The problems `check` finds under `key` for the configuration `text` (its other
    /// problems, such as a missing key file, are not this test's).
    fn problems_at(text: &str, config_path: &Path, key: &str) -> Vec<String> {
        let config = Config::parse(text, config_path).unwrap();
        check(&config)
            .into_iter()
            .filter(|p| p.key == key)
            .map(|p| p.message)
            .collect()
    }

    const MINIMAL: &str = "[relay]\nstate_dir = \"state\"\nkey_file = \"k\"\n\
        admin_listen = \"127.0.0.1:9100\"\n\
        [[instance]]\nname = \"demo\"\nlisten = \"127.0.0.1:3306\"\ncompute = \"127.0.0.1:13306\"\n\
        [instance.driver]\nkind = \"exec\"\nstart = [\"true\"]\nstop = [\"true\"]\n";

    #[test]
    fn tls_files_are_loaded_and_each_error_names_its_key() {
        use crate::tls::tests::Pki;
        let pki = Pki::new("preflight");
        let dir = pki.settings.cert.parent().unwrap().to_owned();
        let config_path = dir.join("relay.toml");
        let with = |extra: &str| {
            MINIMAL.replace("[instance.driver]", &format!("{extra}\n[instance.driver]"))
        };
        let tls = "[instance.tls]\ncert = \"server.pem\"\nkey = \"server.key\"";
        assert!(problems_at(&with(tls), &config_path, "instance[0].tls.key").is_empty());
        std::fs::set_permissions(&pki.settings.key, std::fs::Permissions::from_mode(0o640))
            .unwrap();
        let found = problems_at(&with(tls), &config_path, "instance[0].tls.key");
        assert!(
            found.len() == 1 && found[0].contains("mode 0640"),
            "{found:?}"
        );
        let nope = "[instance.tls]\ncert = \"nope.pem\"\nkey = \"server.key\"";
        assert_eq!(
            problems_at(&with(nope), &config_path, "instance[0].tls.cert").len(),
            1
        );
        let ca = "compute_tls = \"verify\"\ncompute_ca = \"nope.pem\"";
        let found = problems_at(&with(ca), &config_path, "instance[0].compute_ca");
        assert!(
            found.len() == 1 && found[0].contains("nope.pem"),
            "{found:?}"
        );
        let ca = "compute_tls = \"verify\"\ncompute_ca = \"ca.pem\"";
        assert!(problems_at(&with(ca), &config_path, "instance[0].compute_ca").is_empty());
        let name = format!("{ca}\ncompute_tls_name = \"not a name\"");
        let found = problems_at(&with(&name), &config_path, "instance[0].compute_tls_name");
        assert_eq!(found, ["'not a name' is not a DNS name or an IP address"]);
    }

    #[test]
    fn an_s3_credentials_file_must_be_owner_only() {
        let dir = std::env::temp_dir().join(format!("relay-preflight-s3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("relay.toml");
        std::fs::write(dir.join("s3.toml"), "access_key_id = \"a\"\n").unwrap();
        let text = MINIMAL
            .replace(
                "[instance.driver]\nkind = \"exec\"\nstart = [\"true\"]\nstop = [\"true\"]\n",
                "[instance.driver]\nkind = \"process\"\ncommand = [\"true\"]\n",
            )
            .replace(
                "[instance.driver]",
                "[instance.offload]\nstore = \"s3://bucket/p\"\nafter = \"1h\"\n\
                 data_dir = \"data\"\ncredentials_file = \"s3.toml\"\n[instance.driver]",
            );
        let key = "instance[0].offload.credentials_file";
        std::fs::set_permissions(dir.join("s3.toml"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let found = problems_at(&text, &config_path, key);
        assert!(
            found.len() == 1 && found[0].contains("mode 0644"),
            "{found:?}"
        );
        std::fs::set_permissions(dir.join("s3.toml"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        assert!(problems_at(&text, &config_path, key).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_the_relay_owns_are_checked_by_their_owners() {
        let path = Path::new("/etc/perceptron/relay.toml");
        let table = MINIMAL.replace(
            "admin_listen = \"127.0.0.1:9100\"",
            "admin_listen = \"127.0.0.1:9100\"\nnftables_table = \"filter\"",
        );
        assert_eq!(
            problems_at(&table, path, "relay.nftables_table"),
            [
                "'filter' must be perceptron_ followed by 1 to 48 of a-z 0-9 _ (the relay deletes \
              and recreates this table, so it cannot name anyone else's)"
            ]
        );
        let store = "[relay.store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\
                     relay_id = \"relay/a\"\n\n[[instance]]";
        let fleet = MINIMAL.replacen("[[instance]]", store, 1);
        assert_eq!(
            problems_at(&fleet, path, "relay.store.relay_id"),
            ["'relay/a' cannot name a relay: use 1-64 characters of A-Z a-z 0-9 . _ -"]
        );
    }

    #[test]
    fn a_definitions_key_that_the_computes_hold_too_is_refused() {
        let dir = std::env::temp_dir().join(format!("preflight-defs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, line: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("{line}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        let (login, other) = (
            format!("login-1 {}", "11".repeat(32)),
            format!("defs-1 {}", "22".repeat(32)),
        );
        write("login.key", &login);
        write("copy.key", &login.replace("login-1", "defs-1"));
        write("own.key", &other);
        let problems = |defs: &str| -> Vec<String> {
            let text = format!(
                "[relay]\nstate_dir = \"state\"\nkey_file = \"login.key\"\n\
                 admin_listen = \"127.0.0.1:9100\"\n[relay.store]\nkind = \"etcd\"\n\
                 endpoints = [\"http://10.0.0.5:2379\"]\nrelay_id = \"r1\"\n\
                 definitions_key_file = \"{defs}\"\n[[instance]]\nname = \"demo\"\n\
                 listen = \"127.0.0.1:3306\"\ncompute = \"127.0.0.1:13306\"\n\
                 [instance.driver]\nkind = \"exec\"\nstart = [\"true\"]\nstop = [\"true\"]\n"
            );
            check(&Config::parse(&text, &dir.join("relay.toml")).unwrap())
                .into_iter()
                .filter(|p| p.key == "relay.store.definitions_key_file")
                .map(|p| p.message)
                .collect()
        };
        assert_eq!(problems("login.key").len(), 1, "the login key file itself");
        assert_eq!(
            problems("copy.key").len(),
            1,
            "the login key under another id"
        );
        assert!(problems("missing.key")[0].contains("relay keygen"));
        assert!(problems("own.key").is_empty(), "{:?}", problems("own.key"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fleet_store_anyone_can_write_and_unverified_definitions_are_warned_about() {
        let path = Path::new("/etc/perceptron/relay.toml");
        let keys = |store: &str| -> Vec<String> {
            let text = MINIMAL.replacen("[[instance]]", &format!("{store}\n[[instance]]"), 1);
            warnings(&Config::parse(&text, path).unwrap())
                .into_iter()
                .map(|w| w.key)
                .collect()
        };
        let etcd = "[relay.store]\nkind = \"etcd\"\nendpoints = [\"http://10.0.0.5:2379\"]\n\
                    relay_id = \"r1\"";
        assert_eq!(
            keys(etcd),
            ["relay.store.cert_file", "relay.store.definitions_key_file"]
        );
        assert_eq!(
            keys(&format!("{etcd}\ndefinitions_key_file = \"defs.key\"")),
            ["relay.store.cert_file"]
        );
        assert!(
            keys("").is_empty(),
            "a relay alone has no store to warn about"
        );
    }

    #[test]
    fn an_admin_api_off_loopback_is_warned_about() {
        let at = |addr: &str| {
            let text = MINIMAL
                .replace("127.0.0.1:9100", addr)
                .replace("[[instance]]", "admin_token_file = \"t\"\n[[instance]]");
            admin_warning(&Config::parse(&text, Path::new("/r.toml")).unwrap())
        };
        assert!(at("127.0.0.1:9100").is_none());
        let w = at("10.0.0.5:9100").unwrap();
        assert_eq!(w.key, "relay.admin_listen");
        assert!(w.message.contains("in clear"), "{}", w.message);
    }

    #[test]
    fn offloaded_data_directories_may_not_overlap_each_other_the_state_or_a_store() {
        let instance = |name: &str, port: u16, data: &str, store: &str| {
            format!(
                "[[instance]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\n\
                 compute = \"127.0.0.1:{}\"\n[instance.offload]\nstore = \"{store}\"\n\
                 data_dir = \"{data}\"\nafter = \"1h\"\n[instance.driver]\n\
                 kind = \"process\"\ncommand = [\"true\"]\n",
                port + 1000
            )
        };
        let clashes = |a: (&str, &str), b: (&str, &str)| -> Vec<(String, String)> {
            let text = format!(
                "[relay]\nstate_dir = \"/srv/relay/state\"\nkey_file = \"k\"\n{}{}",
                instance("a", 3306, a.0, a.1),
                instance("b", 3307, b.0, b.1)
            );
            data_dir_clashes(
                &Config::parse(&text, Path::new("/etc/perceptron/relay.toml")).unwrap(),
            )
        };
        let store = "file:///srv/store";
        assert!(clashes(("/srv/a", store), ("/srv/b", store)).is_empty());
        let keys = |c: Vec<(String, String)>| c.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        let same = clashes(("/srv/a", store), ("/srv/a/sub", store));
        assert_eq!(
            keys(same.clone()),
            [
                "instance[0].offload.data_dir",
                "instance[1].offload.data_dir"
            ]
        );
        assert!(
            same[0].1.contains("overlaps instance 'b' offload.data_dir"),
            "{same:?}"
        );
        assert_eq!(
            keys(clashes(("/srv/relay", store), ("/srv/b", store))),
            ["instance[0].offload.data_dir"]
        );
        assert_eq!(
            keys(clashes(("/srv/store/a", store), ("/srv/b", store))),
            ["instance[0].offload.data_dir"]
        );
        assert_eq!(
            keys(clashes(
                ("/srv/a", "file:///srv/relay/state/s"),
                ("/srv/b", store)
            )),
            ["instance[0].offload.store"]
        );
    }

    #[test]
    fn a_compute_that_runs_as_the_relays_user_is_warned_about() {
        use crate::config::RunAs;
        let process = |run_as| DriverConfig::Process {
            command: vec!["server-shim".into()],
            cwd: ".".into(),
            stop_grace: std::time::Duration::from_secs(1),
            env: Vec::new(),
            run_as,
        };
        let said = |driver: &DriverConfig, uid| compute_user_warning(0, driver, uid);
        let own = said(&process(None), 0).unwrap();
        assert_eq!(own.key, "instance[0].driver.user");
        assert!(own.message.contains("uid 0"), "{}", own.message);
        assert!(said(&process(None), 1000).is_some());
        let nobody = Some(RunAs {
            uid: 65534,
            gid: 65534,
        });
        assert!(said(&process(nobody), 0).is_none());
        assert!(
            said(&process(nobody), 1000)
                .unwrap()
                .message
                .contains("CAP_SETUID")
        );
        let exec = Config::parse(MINIMAL, Path::new("/r.toml")).unwrap();
        assert!(
            said(&exec.instances[0].driver, 0).is_none(),
            "the exec driver's commands decide"
        );
    }

    #[test]
    fn switch_mode_without_compute_tls_is_warned_about() {
        let path = Path::new("/etc/perceptron/relay.toml");
        let keys = |text: &str| -> Vec<String> {
            warnings(&Config::parse(text, path).unwrap())
                .into_iter()
                .map(|w| w.key)
                .collect()
        };
        let with = |extra: &str| {
            MINIMAL.replace("[instance.driver]", &format!("{extra}\n[instance.driver]"))
        };
        assert!(keys(MINIMAL).is_empty(), "dual mode sends no password");
        assert_eq!(
            keys(&with("auth = \"switch\"")),
            ["instance[0].compute_tls"]
        );
        assert!(keys(&with("auth = \"switch\"\ncompute_tls = \"on\"")).is_empty());
    }

    #[test]
    fn the_relays_tls_requirements_are_said_to_take_every_login() {
        let path = Path::new("/etc/perceptron/relay.toml");
        let with = |extra: &str| {
            MINIMAL.replace(
                "[instance.driver]",
                &format!(
                    "{extra}\n[instance.tls]\ncert = \"s.pem\"\nkey = \"s.key\"\n{}",
                    "[instance.driver]"
                ),
            )
        };
        let said = |text: &str| -> Vec<(String, String)> {
            warnings(&Config::parse(text, path).unwrap())
                .into_iter()
                .map(|w| (w.key, w.message))
                .collect()
        };
        // TLS offered: every login is read by the relay, to charge TLS guesses.
        let offered = said(&with(""));
        assert_eq!(offered.len(), 1, "{offered:?}");
        assert_eq!(offered[0].0, "instance[0].tls");
        assert!(
            offered[0].1.contains("every login is relayed"),
            "{offered:?}"
        );
        let found = said(&with("require_secure_transport = true"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "instance[0].require_secure_transport");
        assert!(found[0].1.contains("no direct route"), "{found:?}");
    }

    #[test]
    fn addresses_clash_on_the_same_port_of_the_same_or_every_address() {
        assert!(crate::config::same_listener(
            addr("127.0.0.1:3306"),
            addr("127.0.0.1:3306")
        ));
        assert!(crate::config::same_listener(
            addr("0.0.0.0:3306"),
            addr("127.0.0.1:3306")
        ));
        assert!(crate::config::same_listener(
            addr("127.0.0.1:3306"),
            addr("[::]:3306")
        ));
        assert!(!crate::config::same_listener(
            addr("127.0.0.1:3306"),
            addr("127.0.0.2:3306")
        ));
        assert!(!crate::config::same_listener(
            addr("127.0.0.1:3306"),
            addr("127.0.0.1:13306")
        ));
    }

    #[test]
    fn finds_programs_on_path_and_refuses_missing_or_plain_files() {
        assert_eq!(program_problem("sh", Path::new("/")), None);
        assert_eq!(
            program_problem("no-such-program-here", Path::new("/")).as_deref(),
            Some("no-such-program-here: not found on PATH")
        );
        let dir = std::env::temp_dir().join(format!("relay-preflight-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plain"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("plain"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(
            program_problem("./plain", &dir).as_deref(),
            Some("./plain: not executable (chmod +x)")
        );
        assert_eq!(
            program_problem("./missing", &dir).as_deref(),
            Some("./missing: no such file")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_state_dir_is_checked_without_creating_it() {
        let base = std::env::temp_dir().join(format!("relay-writable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let missing = base.join("a/b/state");
        assert!(writable_dir(&missing).is_ok());
        assert!(!base.join("a").exists(), "nothing created");
        std::fs::write(base.join("file"), "").unwrap();
        assert!(writable_dir(&base.join("file/state")).is_err());
        assert!(writable_dir(&base).is_ok());
        assert_eq!(
            std::fs::read_dir(&base).unwrap().count(),
            1,
            "the probe is gone"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_second_lock_on_a_state_dir_names_the_holder() {
        let dir = std::env::temp_dir().join(format!("relay-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = lock_state_dir(&dir).unwrap();
        let err = lock_state_dir(&dir).unwrap_err();
        assert!(
            matches!(&err, LockError::Held { pid: Some(p), .. } if *p == std::process::id()),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("relay pid {}", std::process::id()))
        );
        drop(held);
        let again = lock_state_dir(&dir);
        assert!(again.is_ok(), "released on drop");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
