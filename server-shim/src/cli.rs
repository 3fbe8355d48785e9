//! The command line: `server-shim run`, `server-shim user
//! add|remove|passwd|list`, and its own `completions` and `man`.
//! `main.rs` only calls [`main`].

use core::fmt;
use std::fs;
use std::io::{self, BufRead as _, IsTerminal as _};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use authplugin::Credential;
use authplugin::key_file::KeyFileError;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;
use tracing::{error, info, warn};
use zeroize::Zeroizing;

use crate::accounts::{Account, AccountError, AccountStore, Role};
use crate::catalog::Catalog;
use crate::server::serve;
use crate::sqlite::SqliteEngine;
use crate::state::ServerState;
use crate::stream::Timeouts;

/// Perceptron's stand-in compute node: a MySQL-protocol server with dual verification.
#[derive(Debug, Parser)]
#[command(name = "server-shim", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MySQL clients (and the relay) on --listen, with the data in --data.
    Run(Box<RunArgs>),
    /// Manage accounts in a data directory.
    #[command(subcommand)]
    User(UserCommand),
    /// Print a shell completion script, e.g. `server-shim completions bash`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the server-shim(1) man page.
    Man,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Address to listen on, e.g. 127.0.0.1:13306.
    #[arg(long)]
    listen: String,
    /// Data directory (accounts and databases); created when missing.
    #[arg(long)]
    data: PathBuf,
    /// Perceptron key ring (mode 0600). Without it relayed logins are refused.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// After SIGTERM, how long running statements may take to finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Longest time from connect until the login is complete.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    handshake_timeout: Duration,
    /// A connection idle this long is closed (MySQL's wait_timeout).
    #[arg(long, default_value = "8h", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// A write to a client that makes no progress this long fails (net_write_timeout).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    write_timeout: Duration,
    /// Longest wait for a database busy with another session's transaction.
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    lock_wait_timeout: Duration,
    /// TLS certificate chain (PEM) to offer clients; with --tls-key. Without it the shim
    /// offers no TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM, mode 0600).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates must chain to: mutual TLS.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Refuse logins without TLS (ERR 3159), like MySQL's require_secure_transport; needs
    /// --tls-cert.
    #[arg(long, requires = "tls_cert")]
    require_secure_transport: bool,
    /// Resumption-ticket key ring (mode 0600; `relay keygen` writes one), this compute's alone:
    /// never give it to the relay. With it, a relay that asks gets a ticket on each relayed
    /// login and can reattach that session after this shim has stopped (docs/protocol.md).
    #[arg(long, requires = "instance")]
    ticket_key_file: Option<PathBuf>,
    /// The instance name tickets are bound to (a ticket for another instance is refused).
    #[arg(long)]
    instance: Option<String>,
    /// How long a ticket stays valid; each reattach issues the next one.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    ticket_ttl: Duration,
    /// Oldest TLS version accepted: 1.2 or 1.3.
    #[arg(long, default_value = "1.2", value_parser = ["1.2", "1.3"])]
    tls_min_version: String,
    /// A database the relay restored lazily (docs/offload.md) is read from the store as
    /// queries need it, and filled in behind them at most this fast, in MiB/s per database.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    lazy_fill_mib_per_sec: u64,
    /// Log each statement that fails: its error and its first N characters (0, the default:
    /// the error code only). Statement text can hold passwords and personal data: turn it on
    /// to find which statement a tool's failure came from, and off again.
    #[arg(long, value_name = "N", default_value_t = 0)]
    log_failed_statements: usize,
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Add an account. The password is read from the terminal (no echo), or from stdin with
    /// --password-stdin; an empty password makes an empty-password account.
    Add {
        /// Account name (1-32 of A-Z a-z 0-9 _ . -).
        name: String,
        /// Data directory; created when missing.
        #[arg(long)]
        data: PathBuf,
        /// May manage accounts with CREATE/ALTER/DROP USER.
        #[arg(long)]
        admin: bool,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Remove an account.
    Remove {
        /// Account name.
        name: String,
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
    },
    /// Change an account's password (its role stays). The password is read as for `add`.
    /// Sessions already logged in keep running; the next login needs the new password.
    Passwd {
        /// Account name.
        name: String,
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List accounts: name, role and plugins (never hashes).
    List {
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
    },
}

/// A command-line duration that does not parse; the message names the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// No number where one was expected (the trimmed text).
    NotADuration(String),
    /// A number with a unit other than `ms`, `s`, `m` or `h` (the trimmed text).
    BadUnit(String),
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADuration(text) => {
                write!(f, "'{text}' is not a duration (e.g. 500ms, 10s, 2m, 8h)")
            }
            Self::BadUnit(text) => write!(f, "'{text}': unit must be ms, s, m or h"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Why `run` or a `user` command failed: the one line the operator sees.
#[derive(Debug)]
pub enum CliError {
    /// The data directory cannot be created or listed.
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The account file.
    Accounts(AccountError),
    /// The `--key-file`.
    KeyFile(KeyFileError),
    /// The listening socket.
    Listen {
        /// The `--listen` address.
        addr: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The password cannot be read (from stdin, or from the terminal).
    ReadPassword {
        /// Where it was read from: `stdin` or `the terminal`.
        from: &'static str,
        /// A hint appended to the message (empty for none).
        hint: &'static str,
        /// The I/O error.
        source: io::Error,
    },
    /// The password and its retyped copy differ.
    PasswordsDiffer,
    /// `--tls-cert`, `--tls-key` or `--tls-client-ca` cannot be used.
    Tls(crate::tls::TlsError),
}

impl CliError {
    fn data_dir(path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::DataDir { path, source }
    }

    fn listen(addr: &str) -> impl FnOnce(io::Error) -> Self {
        let addr = addr.to_owned();
        move |source| Self::Listen { addr, source }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataDir { path, source } => {
                write!(f, "data directory {}: {source}", path.display())
            }
            Self::Accounts(e) => e.fmt(f),
            Self::KeyFile(e) => e.fmt(f),
            Self::Listen { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            Self::ReadPassword { from, hint, source } => {
                write!(f, "cannot read the password from {from}: {source}{hint}")
            }
            Self::PasswordsDiffer => f.write_str("the passwords differ"),
            Self::Tls(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::DataDir { source, .. }
            | Self::Listen { source, .. }
            | Self::ReadPassword { source, .. } => Some(source),
            Self::Accounts(e) => Some(e),
            Self::KeyFile(e) => Some(e),
            Self::Tls(e) => Some(e),
            Self::PasswordsDiffer => None,
        }
    }
}

impl From<AccountError> for CliError {
    fn from(e: AccountError) -> Self {
        Self::Accounts(e)
    }
}

impl From<KeyFileError> for CliError {
    fn from(e: KeyFileError) -> Self {
        Self::KeyFile(e)
    }
}

/// Parses `500ms`, `10s`, `2m`, `8h` or a plain number of seconds.
///
/// # Errors
/// [`DurationError`], whose message names the accepted forms.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| DurationError::NotADuration(text.to_owned()))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(DurationError::BadUnit(text.to_owned())),
    }
}

/// Writes `bytes` to standard output; a closed pipe is a failure, not a panic.
fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut stdout = io::stdout().lock();
    match io::Write::write_all(&mut stdout, bytes).and_then(|()| io::Write::flush(&mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("server-shim: cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command line. Returns the process exit code.
#[must_use]
pub fn main() -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(*args, started),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "server-shim",
                &mut script,
            );
            write_stdout(&script)
        }
        Command::Man => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut page)
            {
                Ok(()) => write_stdout(&page),
                Err(e) => {
                    eprintln!("server-shim man: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::User(cmd) => match user(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("server-shim: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn init_tracing() {
    let fmt = tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        // A broken stderr (the relay that started us died) must not take logins down:
        // tracing-subscriber would otherwise report the failed write with a panicking eprintln.
        .log_internal_errors(false);
    // Building an `EnvFilter` costs about 0.13 ms, a tenth of a wake's boot; without
    // `RUST_LOG` a plain level filter does the same job.
    let _ = match std::env::var_os("RUST_LOG") {
        Some(_) => fmt
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .try_init(),
        None => fmt.with_max_level(tracing::Level::INFO).try_init(),
    };
}

/// The accept queue the shim asks for (capped by `net.core.somaxconn`). Right after a wake the
/// relay opens one connection per waiting client within milliseconds; the standard 128
/// overflowed with a thousand of them and cost each dropped SYN a one-second retry.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (the first address it resolves to) with [`LISTEN_BACKLOG`], before the async
/// runtime exists: see [`run`].
fn listen(addr: &str) -> io::Result<std::net::TcpListener> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "resolves to no address"))?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(LISTEN_BACKLOG).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// The runtime's worker threads: the CPUs this process may run on. Tokio's default also
/// divides by the cgroup's CPU quota, read from `/sys` (0.1 ms of a wake's boot), and the quota
/// at start says little: the relay's capacity scaler raises and lowers it while the compute
/// runs, so a compute woken at a quarter CPU would keep one worker after a scale-up.
fn worker_threads() -> usize {
    use nix::sched::{CpuSet, sched_getaffinity};
    use nix::unistd::Pid;
    sched_getaffinity(Pid::from_raw(0))
        .map(|set| {
            (0..CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

/// Creates the data directory (mode 0700) when missing.
fn ensure_data_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn run(args: RunArgs, started: Instant) -> ExitCode {
    init_tracing();
    // The socket listens before anything else is set up, and says so: the relay waking this
    // compute connects at that line, and its connection waits in the accept queue while the
    // runtime and the catalog are built, so the greeting is the first thing served. Readiness
    // is still the greeting, which comes only once everything below is ready.
    let listener = match listen(&args.listen) {
        Ok(l) => l,
        Err(e) => {
            error!("{}", CliError::listen(&args.listen)(e));
            return ExitCode::FAILURE;
        }
    };
    if let Ok(local) = listener.local_addr() {
        info!(listen = %local, "server-shim listening; starting");
    }
    // Before any database opens: a lazily restored one read through SQLite's plain VFS would
    // be holes.
    if let Err(e) = lazy_vfs::register(args.lazy_fill_mib_per_sec << 20) {
        error!(error = %e, "cannot register the VFS for lazily restored databases");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(worker_threads())
        // Statements are parsed and rewritten recursively; see `dialect::THREAD_STACK_BYTES`.
        .thread_stack_size(crate::dialect::THREAD_STACK_BYTES)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_async(args, listener, started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn run_async(
    args: RunArgs,
    listener: std::net::TcpListener,
    started: Instant,
) -> Result<(), CliError> {
    ensure_data_dir(&args.data).map_err(CliError::data_dir(&args.data))?;
    let accounts = AccountStore::open(&args.data)?;
    let key_ring = match &args.key_file {
        Some(path) => Some(Arc::new(authplugin::key_file::LiveKeyRing::open(path)?)),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            crate::tls::TlsOptions {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.tls_client_ca.clone(),
                tls13_only: args.tls_min_version == "1.3",
            }
            .load()
            .map_err(CliError::Tls)?,
        ),
        _ => None,
    };
    let catalog = Catalog::open(&args.data, Arc::new(SqliteEngine))
        .map_err(CliError::data_dir(&args.data))?;
    let databases = catalog.names().len();
    let listener = TcpListener::from_std(listener).map_err(CliError::listen(&args.listen))?;
    let local = listener
        .local_addr()
        .map_err(CliError::listen(&args.listen))?;
    let mut state = ServerState::new(
        Arc::new(catalog),
        accounts,
        key_ring,
        Timeouts {
            handshake: args.handshake_timeout,
            idle: args.idle_timeout,
            write_stall: args.write_timeout,
        },
        args.lock_wait_timeout,
    );
    state.tls = tls;
    state.require_secure_transport = args.require_secure_transport;
    state.failed_statement_chars = args.log_failed_statements;
    if args.log_failed_statements > 0 {
        warn!(
            chars = args.log_failed_statements,
            "failed statements are logged with their text, which may hold passwords and \
             personal data (--log-failed-statements)"
        );
    }
    if let (Some(path), Some(instance)) = (&args.ticket_key_file, &args.instance) {
        let ring = authplugin::key_file::load(path)?;
        let ttl_ms = u64::try_from(args.ticket_ttl.as_millis()).unwrap_or(u64::MAX);
        state.tickets = Some(
            crate::tickets::Tickets::open(
                ring,
                instance.clone(),
                ttl_ms,
                &args.data.join(crate::tickets::USED_FILE),
                crate::server::now_ms(),
            )
            .map_err(CliError::data_dir(&args.data))?,
        );
    }
    let state = Arc::new(state);
    if state.key_ring.is_none() {
        info!("no --key-file: relayed logins will be refused, direct logins work");
    }
    if let Some(keys) = &state.key_ring {
        tokio::spawn(crate::keys::follow(
            Arc::clone(keys),
            state.shutdown.clone(),
        ));
    }
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        shutdown.cancel();
    });
    info!(
        listen = %local,
        databases,
        relayed_auth = state.key_ring.is_some(),
        tls = state.tls.is_some(),
        startup_ms = started.elapsed().as_millis() as u64,
        "server-shim ready"
    );
    serve(listener, state, args.shutdown_grace).await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers; stop the shim with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = int.recv() => info!("SIGINT: shutting down"),
    }
}

/// `data` if it is a directory: commands that only read or change accounts never create one
/// (a typo in the path would otherwise list nothing and succeed).
fn existing_data_dir(data: &Path) -> Result<&Path, CliError> {
    match fs::metadata(data) {
        Ok(m) if m.is_dir() => Ok(data),
        Ok(_) => Err(CliError::DataDir {
            path: data.to_owned(),
            source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        }),
        Err(source) => Err(CliError::DataDir {
            path: data.to_owned(),
            source,
        }),
    }
}

fn read_password(from_stdin: bool) -> Result<Zeroizing<String>, CliError> {
    let unreadable = |from, hint| move |source| CliError::ReadPassword { from, hint, source };
    if from_stdin {
        let mut line = Zeroizing::new(String::new());
        io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(unreadable("stdin", ""))?;
        let trimmed = Zeroizing::new(line.trim_end_matches(['\n', '\r']).to_owned());
        return Ok(trimmed);
    }
    let first = Zeroizing::new(
        rpassword::prompt_password("Password (empty for none): ")
            .map_err(unreadable("the terminal", " (use --password-stdin)"))?,
    );
    let second = Zeroizing::new(
        rpassword::prompt_password("Retype password: ").map_err(unreadable("the terminal", ""))?,
    );
    if *first != *second {
        return Err(CliError::PasswordsDiffer);
    }
    Ok(first)
}

fn user(cmd: UserCommand) -> Result<(), CliError> {
    match cmd {
        UserCommand::Add {
            name,
            data,
            admin,
            password_stdin,
        } => {
            if !crate::accounts::valid_name(&name) {
                return Err(AccountError::BadName.into());
            }
            ensure_data_dir(&data).map_err(CliError::data_dir(&data))?;
            let store = AccountStore::open(&data)?;
            let password = read_password(password_stdin)?;
            let account = Account::new(
                if admin { Role::Admin } else { Role::User },
                Credential::from_password(password.as_bytes()),
            );
            store.add(&name, account)?;
            eprintln!("server-shim: account '{name}' added");
            Ok(())
        }
        UserCommand::Remove { name, data } => {
            let store = AccountStore::open(existing_data_dir(&data)?)?;
            store.remove(&name)?;
            eprintln!("server-shim: account '{name}' removed");
            Ok(())
        }
        UserCommand::Passwd {
            name,
            data,
            password_stdin,
        } => {
            let store = AccountStore::open(existing_data_dir(&data)?)?;
            // Refused before the password is typed, if there is no such account.
            if store.get(&name)?.is_none() {
                return Err(AccountError::NotFound(name).into());
            }
            let password = read_password(password_stdin)?;
            store.set_credential(&name, Credential::from_password(password.as_bytes()))?;
            eprintln!("server-shim: password of '{name}' changed");
            Ok(())
        }
        UserCommand::List { data } => {
            let store = AccountStore::open(existing_data_dir(&data)?)?;
            for (name, account) in store.list()? {
                let role = match account.role {
                    Role::Admin => "admin",
                    Role::User => "user",
                };
                let plugins = match account.credential {
                    Credential::EmptyPassword => "empty-password".to_owned(),
                    Credential::Hashed {
                        native,
                        caching_sha2,
                    } => {
                        let mut p = Vec::new();
                        if native.is_some() {
                            p.push("mysql_native_password");
                        }
                        if caching_sha2.is_some() {
                            p.push("caching_sha2_password");
                        }
                        p.join(",")
                    }
                };
                println!("{name}\t{role}\t{plugins}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("8h"), Ok(Duration::from_secs(28_800)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn words_errors_for_the_operator() {
        let io = || io::Error::new(io::ErrorKind::NotFound, "gone");
        let cases = [
            (
                CliError::data_dir(Path::new("/d"))(io()),
                "data directory /d: gone",
            ),
            (CliError::listen("h:1")(io()), "cannot listen on h:1: gone"),
            (
                CliError::ReadPassword {
                    from: "the terminal",
                    hint: " (use --password-stdin)",
                    source: io(),
                },
                "cannot read the password from the terminal: gone (use --password-stdin)",
            ),
            (CliError::PasswordsDiffer, "the passwords differ"),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn parses_command_lines() {
        Cli::try_parse_from([
            "server-shim",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--data",
            "/tmp/x",
            "--shutdown-grace",
            "3s",
        ])
        .unwrap();
        Cli::try_parse_from([
            "server-shim",
            "user",
            "add",
            "app",
            "--data",
            "/d",
            "--admin",
        ])
        .unwrap();
        assert!(Cli::try_parse_from(["server-shim", "run", "--data", "/d"]).is_err());
    }
}
