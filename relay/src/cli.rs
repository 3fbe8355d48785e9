//! The `relay` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
