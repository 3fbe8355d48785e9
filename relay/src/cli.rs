//! The `relay` command line.

use std::path::PathBuf;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::admin_client::{self, AdminError, Target, UsageFormat};

/// Perceptron relay: answers MySQL logins for paused instances, wakes them, and completes
/// the login without ever holding a password or hash.
#[derive(Debug, Parser)]
#[command(name = "relay", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay: listen for every configured instance, hold clients of paused instances,
    /// wake them, and relay their logins. SIGTERM or SIGINT stops accepting, drains open
    /// connections (up to 10 s; a second signal closes them at once) and stops the computes it
    /// started.
    ///
    /// Instances with `route = "nftables"` are reached through the kernel while they run (an
    /// nftables DNAT, no copy through the relay): this needs Linux, CAP_NET_ADMIN (root, or
    /// an ambient capability), the `nft` program and conntrack. The relay clears and creates
    /// its table (`relay.nftables_table`, default perceptron_<hash of state_dir>) at start and
    /// deletes it at exit.
    Run {
        /// The TOML configuration file (see README, "Configuration").
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print a shell completion script for the relay's commands and flags, e.g.
    /// `relay completions bash > /etc/bash_completion.d/relay`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the relay's man pages: relay(1) and one per command (relay-run(1), ...). Without
    /// --out, relay(1) goes to standard output.
    Man {
        /// The directory to write relay.1 and relay-COMMAND.1 into (e.g.
        /// /usr/local/share/man/man1).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Check a configuration without running it: everything `run` checks before it listens
    /// (the file itself, the key file and its mode, the admin token file, a writable
    /// state_dir, listen, compute and admin addresses that do not clash, driver programs that
    /// exist and are executable). One line per problem; exit status 1 if there is any.
    Check {
        /// The TOML configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Show the relay (pid, signing key id) and every instance: state, since when, open
    /// connections by route, wakes, last resume time.
    Status {
        /// Print JSON: `{"relay": {...}, "instances": [...]}`.
        #[arg(long)]
        json: bool,
        /// Print again every SECONDS (default 2) until interrupted.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<u64>,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Pause an instance now. Refused while connections are open, unless --force (which cuts
    /// them). Idempotent: an instance already paused (or frozen) is a success, and said so.
    Pause {
        /// The instance.
        name: String,
        /// Cut open connections.
        #[arg(long)]
        force: bool,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume an instance now (returns once it is running). Idempotent: an instance already
    /// running is a success, and said so.
    Resume {
        /// The instance.
        name: String,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Billed seconds per instance and hour (resuming + running time; nothing while paused).
    /// Asks the running relay; with --config and no relay running, reads the usage ledger in
    /// its state_dir.
    Usage {
        /// Start (UTC): 2026-11-29, 2026-11-29T14:00:00Z or Unix seconds. Default: the
        /// beginning of the ledger.
        #[arg(long)]
        from: Option<String>,
        /// End (UTC), same forms. Default: now.
        #[arg(long)]
        to: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = UsageFormat::Table)]
        format: UsageFormat,
        /// The same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// How to reach the admin API (with --config, the ledger in its state_dir is read
        /// directly when no relay answers).
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show the fleet this relay is one of (`[relay.store] kind = "etcd"`): the live relays,
    /// and per instance the fleet's state, who made its last transition, who holds its lock
    /// and each relay's open connections.
    Fleet {
        /// Print the admin API's JSON.
        #[arg(long)]
        json: bool,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Measure what a fleet of relays costs an etcd cluster before deploying one: simulated
    /// relays (each a real etcd client with its own lease) drive simulated instances through
    /// wake/pause churn with the requests real relays make, then report requests per second
    /// and the store's share of wake, pause and propagation latency. Writes only under
    /// --prefix (refused if in use) and deletes it at the end. See docs/fleet.md.
    #[cfg(feature = "etcd")]
    FleetSimulation(crate::fleet::simulation::Args),
    /// Housekeeping of the object stores of `[instance.offload]`.
    Offload {
        /// What to do.
        #[command(subcommand)]
        action: OffloadAction,
    },
    /// Add, change or remove an instance of `relay.instances_dir` while the relay runs
    /// (docs/instances.md). Needs the admin token.
    Instances {
        /// What to do.
        #[command(subcommand)]
        action: InstancesAction,
    },
    /// List or clear the sources and users blocked by a failed-login or wake budget
    /// (`[relay.budgets]`).
    Blocks {
        /// What to do.
        #[command(subcommand)]
        action: BlocksAction,
    },
    /// Generate a perceptron key and add it as the newest key of a key file (created with
    /// mode 0600 if missing). The relay signs with the newest key; computes accept every key
    /// in their copy of the file. To rotate: add the same new key to the computes' files
    /// first, then to the relays' (repeat --out, or copy the new line), and delete the old
    /// line once every relay signs with the new key (`relay status`). Running relays and
    /// server-shims read a changed key file within a second (or at once on SIGHUP).
    Keygen {
        /// The new key's id (1-32 characters of A-Z a-z 0-9 . _ -), e.g. a date.
        #[arg(long)]
        id: String,
        /// The key file to create or extend; repeat it to add the same key to several files
        /// (the computes' file first, then the relays').
        #[arg(long, value_name = "FILE", required = true)]
        out: Vec<PathBuf>,
    },
}

/// `relay offload`.
#[derive(Debug, Subcommand)]
pub enum OffloadAction {
    /// Delete what no offloaded data needs any more from each store the configuration names:
    /// every manifest but each instance's newest (and those younger than --keep), then every
    /// chunk no kept manifest names and older than --keep. Runs beside live relays: it holds
    /// the store's gc/lock meanwhile (an offload that starts then waits for the next pause)
    /// and deletes nothing while an offload is in progress. See docs/offload.md.
    Gc {
        /// The relay's configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Keep manifests and chunks younger than this (e.g. 7d, 12h).
        #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
        keep: std::time::Duration,
        /// Report what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// A NAME for `relay instances`: checked here, since it becomes part of the request's path.
fn instance_name(name: &str) -> Result<String, NotAnInstanceName> {
    if crate::config::instance_file::is_instance_name(name) {
        Ok(name.to_owned())
    } else {
        Err(NotAnInstanceName)
    }
}

/// A NAME that cannot name an instance.
#[derive(Debug, Clone, Copy)]
struct NotAnInstanceName;

impl std::fmt::Display for NotAnInstanceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an instance name is letters, digits, '-' and '_' (A-Z a-z 0-9 - _)")
    }
}

impl std::error::Error for NotAnInstanceName {}

/// `relay instances`.
#[derive(Debug, Subcommand)]
pub enum InstancesAction {
    /// Add instance NAME, or change it, from an instance file (an `[[instance]]` block's keys
    /// at the top level). Returns once it serves; a changed instance's old definition drains
    /// first, and the new one starts when its last connection has ended.
    Put {
        /// The instance.
        #[arg(value_parser = instance_name)]
        name: String,
        /// The instance file to send (`-` for standard input).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove instance NAME: no new login reaches it; its open connections end on their own
    /// (or at once with --force); then its compute stops. Again with --force on an instance
    /// still draining cuts what is left.
    Remove {
        /// The instance.
        #[arg(value_parser = instance_name)]
        name: String,
        /// Cut its open connections now.
        #[arg(long)]
        force: bool,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `relay blocks`.
#[derive(Debug, Subcommand)]
pub enum BlocksAction {
    /// Every block in force: who, which budget, the count, until when.
    List {
        /// Print the admin API's JSON.
        #[arg(long)]
        json: bool,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift blocks (and forget the counts) of a source, a user, or everyone. Idempotent:
    /// clearing what is not blocked succeeds and says so.
    Clear {
        /// A source address (an IPv6 address clears its /64).
        #[arg(long, conflicts_with_all = ["user", "all"])]
        source: Option<std::net::IpAddr>,
        /// A user name (of every instance, unless --instance).
        #[arg(long, conflicts_with = "all")]
        user: Option<String>,
        /// With --user: only this instance's user.
        #[arg(long, requires = "user")]
        instance: Option<String>,
        /// Every block.
        #[arg(long)]
        all: bool,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// How the CLI reaches a running relay's admin API.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// The admin API address. Default: `relay.admin_listen` from --config, else
    /// 127.0.0.1:9100.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Read the admin address and token file from this relay configuration.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A file holding the admin bearer token (default: `relay.admin_token_file` from
    /// --config).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// Parses the command line and runs the command; what `main` returns.
#[must_use]
pub fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    match cli.command {
        Command::Keygen { id, out } => match crate::keygen::run(&id, &out) {
            Ok(id) => {
                for file in &out {
                    println!("added key '{id}' as the newest key of {}", file.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("relay keygen: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run { config } => run(&config),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "relay", &mut script);
            write_stdout(&script)
        }
        Command::Man { out } => man(out.as_deref()),
        Command::Check { config } => check(&config),
        Command::Offload {
            action:
                OffloadAction::Gc {
                    config,
                    keep,
                    dry_run,
                },
        } => offload_gc(&config, keep, dry_run),
        Command::Status {
            json,
            watch: None,
            admin,
        } => admin_command(&admin, |t| admin_client::status(t, json)),
        Command::Status {
            json,
            watch: Some(seconds),
            admin,
        } => watch_status(&admin, json, seconds),
        Command::Fleet { json, admin } => admin_command(&admin, |t| admin_client::fleet(t, json)),
        #[cfg(feature = "etcd")]
        Command::FleetSimulation(args) => crate::fleet::simulation::main(args),
        Command::Pause { name, force, admin } => {
            admin_command(&admin, |t| admin_client::action(t, &name, "pause", force))
        }
        Command::Resume { name, admin } => {
            admin_command(&admin, |t| admin_client::action(t, &name, "resume", false))
        }
        Command::Instances {
            action: InstancesAction::Put { name, file, admin },
        } => {
            let read = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(&file)
            };
            match read {
                Ok(text) => admin_command(&admin, |t| {
                    admin_client::instance_put(t, &name, text.clone())
                }),
                Err(e) => {
                    eprintln!("relay instances put: {}: {e}", file.display());
                    ExitCode::from(2)
                }
            }
        }
        Command::Instances {
            action: InstancesAction::Remove { name, force, admin },
        } => admin_command(&admin, |t| admin_client::instance_remove(t, &name, force)),
        Command::Blocks {
            action: BlocksAction::List { json, admin },
        } => admin_command(&admin, |t| admin_client::blocks_list(t, json)),
        Command::Blocks {
            action:
                BlocksAction::Clear {
                    source,
                    user,
                    instance,
                    all,
                    admin,
                },
        } => {
            if source.is_none() && user.is_none() && !all {
                eprintln!("relay blocks clear: give --source, --user or --all");
                return ExitCode::FAILURE;
            }
            admin_command(&admin, |t| {
                admin_client::blocks_clear(t, source, user.as_deref(), instance.as_deref())
            })
        }
        Command::Usage {
            from,
            to,
            format,
            json,
            admin,
        } => {
            let format = if json { UsageFormat::Json } else { format };
            admin_command(&admin, |t| {
                admin_client::usage(t, from.as_deref(), to.as_deref(), format)
            })
        }
    }
}

fn admin_command(
    args: &AdminArgs,
    f: impl FnOnce(&Target) -> Result<String, AdminError>,
) -> ExitCode {
    let target = Target::resolve(
        args.admin,
        args.config.as_deref(),
        args.token_file.as_deref(),
    );
    match target.and_then(|t| f(&t)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("relay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `relay status --watch`: the status again every `seconds` (at least 1) until interrupted;
/// on a terminal the screen is cleared first, as `watch` does. An unreachable relay is
/// reported and tried again, so the watch outlives a relay restart.
fn watch_status(args: &AdminArgs, json: bool, seconds: u64) -> ExitCode {
    let target = match Target::resolve(
        args.admin,
        args.config.as_deref(),
        args.token_file.as_deref(),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let every = std::time::Duration::from_secs(seconds.max(1));
    loop {
        let shown = match admin_client::status(&target, json) {
            Ok(out) => out,
            Err(e) => format!("relay: {e}\n"),
        };
        // Clear the screen and go home on a terminal; a blank line between reports otherwise.
        let (before, after) = if terminal {
            ("\x1b[2J\x1b[H", "")
        } else {
            ("", "\n")
        };
        let mut stdout = std::io::stdout().lock();
        if std::io::Write::write_all(&mut stdout, format!("{before}{shown}{after}").as_bytes())
            .and_then(|()| std::io::Write::flush(&mut stdout))
            .is_err()
        {
            // The reader went away (a closed pipe): nothing to show any more.
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        std::thread::sleep(every);
    }
}

/// Writes `bytes` to standard output; a closed pipe is a failure, not a panic.
fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match std::io::Write::write_all(&mut stdout, bytes)
        .and_then(|()| std::io::Write::flush(&mut stdout))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay: cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `relay man`: relay(1) to standard output, or every page into `out`.
fn man(out: Option<&std::path::Path>) -> ExitCode {
    let command = <Cli as clap::CommandFactory>::command();
    let render = |cmd: clap::Command| -> std::io::Result<Vec<u8>> {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        Ok(page)
    };
    let Some(dir) = out else {
        return match render(command) {
            Ok(page) => write_stdout(&page),
            Err(e) => {
                eprintln!("relay man: {e}");
                ExitCode::FAILURE
            }
        };
    };
    // relay-COMMAND(1) for each command, named as `man relay-run` finds it.
    let mut pages = vec![("relay".to_owned(), command.clone())];
    for sub in command.get_subcommands() {
        let name = format!("relay-{}", sub.get_name());
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("relay {}", sub.get_name()));
        pages.push((name, page));
    }
    let mut written = String::new();
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        if let Err(e) = render(cmd).and_then(|page| std::fs::write(&path, page)) {
            eprintln!("relay man: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        written.push_str(&format!("{}\n", path.display()));
    }
    write_stdout(written.as_bytes())
}

/// `relay check`.
/// `relay offload gc`: each distinct store of the configuration's instances, once.
fn offload_gc(config_path: &std::path::Path, keep: std::time::Duration, dry_run: bool) -> ExitCode {
    let config = match crate::config::Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("relay offload gc: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stores: Vec<&crate::config::ArchiveConfig> = Vec::new();
    for archive in config.instances.iter().filter_map(|i| match &i.offload {
        Some(crate::config::OffloadConfig {
            mover: crate::config::OffloadMover::Relay(a),
            ..
        }) => Some(a),
        _ => None,
    }) {
        if !stores.iter().any(|s| s.store == archive.store) {
            stores.push(archive);
        }
    }
    if stores.is_empty() {
        eprintln!(
            "relay offload gc: {}: no instance offloads through the relay (no \
             [instance.offload] store with the process driver)",
            config_path.display()
        );
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay offload gc: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for archive in stores {
        let result: Result<_, Box<dyn std::error::Error>> = runtime.block_on(async {
            let store = crate::offload::open_store(archive)?;
            Ok(
                crate::offload::gc::collect(store.as_ref(), crate::clock::now_ms(), keep, dry_run)
                    .await?,
            )
        });
        match result {
            Ok(r) => {
                let verb = if dry_run { "would delete" } else { "deleted" };
                match &r.skipped {
                    Some(why) => println!("{}: {why}", archive.store),
                    None => println!(
                        "{}: {verb} {} manifest(s) and {} chunk(s) ({} bytes); kept {} \
                         manifest(s) and {} chunk(s)",
                        archive.store,
                        r.manifests_deleted,
                        r.chunks_deleted,
                        r.bytes_deleted,
                        r.manifests_kept,
                        r.chunks_kept
                    ),
                }
            }
            Err(e) => {
                eprintln!("relay offload gc: {}: {e}", archive.store);
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn check(config_path: &std::path::Path) -> ExitCode {
    let config = match crate::config::Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let problems = crate::preflight::check(&config);
    for p in &problems {
        println!("{}: {}: {}", config.path.display(), p.key, p.message);
    }
    let splice = crate::preflight::kernel_splice_warning(&config);
    for w in crate::preflight::warnings(&config)
        .into_iter()
        .chain(splice)
    {
        println!(
            "{}: {}: warning: {}",
            config.path.display(),
            w.key,
            w.message
        );
    }
    if problems.is_empty() {
        println!(
            "{}: OK ({} instance{})",
            config.path.display(),
            config.instances.len(),
            if config.instances.len() == 1 { "" } else { "s" }
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run(config_path: &std::path::Path) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A broken stderr must not break the relay: tracing-subscriber would otherwise
        // report each failed write with eprintln, which panics.
        .log_internal_errors(false)
        .init();
    // Before any key is read: nothing the relay holds may end in a core dump.
    if let Err(e) = crate::sys::dumps::keep_out_of_dumps() {
        tracing::warn!(error = %e, "cannot turn core dumps off: keys and tickets could end in one");
    }
    let config = match crate::config::Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    // What `relay check` reports, before anything listens or starts.
    let problems = crate::preflight::check(&config);
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("relay: {}: {}: {}", config.path.display(), p.key, p.message);
        }
        return ExitCode::FAILURE;
    }
    for w in crate::preflight::warnings(&config) {
        tracing::warn!(config = %config.path.display(), key = %w.key, "{}", w.message);
    }
    let ring = match authplugin::key_file::LiveKeyRing::open(&config.relay.key_file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "relay: {e} (relay.key_file in {}; create one with `relay keygen`)",
                config.path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.relay.worker_threads {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let (shutdown, cut) = (CancellationToken::new(), CancellationToken::new());
        tokio::spawn(wait_for_signals(shutdown.clone(), cut.clone()));
        match crate::server::run(config, ring, shutdown, cut).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("relay: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// The first SIGTERM or SIGINT starts the drain (`shutdown`); a second one, such as a
/// second Ctrl-C from an impatient operator, ends it at once (`cut`).
async fn wait_for_signals(shutdown: CancellationToken, cut: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("relay: cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    shutdown.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    cut.cancel();
}
