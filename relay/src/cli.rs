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
    /// connections (up to 10 s) and stops the computes it started.
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
    /// Show every instance: state, since when, open connections by route, wakes, last
    /// resume time.
    Status {
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Pause an instance now. Refused while connections are open, unless --force (which cuts
    /// them).
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
    /// Resume an instance now (returns once it is running).
    Resume {
        /// The instance.
        name: String,
        /// How to reach the admin API.
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Billed seconds per instance and hour (resuming + running time; nothing while paused).
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
        /// How to reach the admin API.
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
    /// List or clear the sources and users blocked by a failed-login or wake budget
    /// (`[relay.budgets]`).
    Blocks {
        /// What to do.
        #[command(subcommand)]
        action: BlocksAction,
    },
    /// Generate a perceptron key and add it as the newest key of a key file (created with
    /// mode 0600 if missing). The relay signs with the newest key; computes accept every key
    /// in their copy of the file. To rotate: add a key to the computes' file first, then to
    /// the relays'.
    Keygen {
        /// The new key's id (1-32 characters of A-Z a-z 0-9 . _ -), e.g. a date.
        #[arg(long)]
        id: String,
        /// The key file to create or extend.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
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
                println!("added key '{id}' as the newest key of {}", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("relay keygen: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run { config } => run(&config),
        Command::Fleet { json, admin } => admin_command(&admin, |t| admin_client::fleet(t, json)),
        #[cfg(feature = "etcd")]
        Command::FleetSimulation(args) => crate::fleet::simulation::main(args),
        Command::Status { admin } => admin_command(&admin, admin_client::status),
        Command::Pause { name, force, admin } => {
            admin_command(&admin, |t| admin_client::action(t, &name, "pause", force))
        }
        Command::Resume { name, admin } => {
            admin_command(&admin, |t| admin_client::action(t, &name, "resume", false))
        }
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
            admin,
        } => admin_command(&admin, |t| {
            admin_client::usage(t, from.as_deref(), to.as_deref(), format)
        }),
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
    let config = match crate::config::Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ring = match authplugin::key_file::load(&config.relay.key_file) {
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
        let shutdown = CancellationToken::new();
        tokio::spawn(wait_for_signal(shutdown.clone()));
        match crate::server::run(config, ring, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("relay: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn wait_for_signal(shutdown: CancellationToken) {
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
}
