//! The `relay` command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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

/// `relay usage --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UsageFormat {
    /// Aligned columns.
    Table,
    /// Comma-separated values with a header.
    Csv,
    /// A JSON array.
    Json,
}
