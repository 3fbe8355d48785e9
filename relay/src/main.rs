//! The `relay` binary: parses the command line and calls into the library.

use std::process::ExitCode;

use clap::Parser as _;
use relay::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Keygen { id, out } => match relay::keygen::run(&id, &out) {
            Ok(id) => {
                println!("added key '{id}' as the newest key of {}", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("relay keygen: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
