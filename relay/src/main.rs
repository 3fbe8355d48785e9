//! The `relay` binary: parses the command line and calls into the library.

use std::process::ExitCode;

use clap::Parser as _;
use relay::cli::{Cli, Command};
use tokio_util::sync::CancellationToken;

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
        Command::Run { config } => run(&config),
        Command::Status { admin } => admin_command(&admin, relay::admin_client::status),
        Command::Pause { name, force, admin } => admin_command(&admin, |t| {
            relay::admin_client::action(t, &name, "pause", force)
        }),
        Command::Resume { name, admin } => admin_command(&admin, |t| {
            relay::admin_client::action(t, &name, "resume", false)
        }),
        Command::Usage {
            from,
            to,
            format,
            admin,
        } => admin_command(&admin, |t| {
            relay::admin_client::usage(t, from.as_deref(), to.as_deref(), format)
        }),
    }
}

fn admin_command(
    args: &relay::cli::AdminArgs,
    f: impl FnOnce(&relay::admin_client::Target) -> Result<String, relay::admin_client::AdminError>,
) -> ExitCode {
    match relay::admin_client::Target::from_args(args).and_then(|t| f(&t)) {
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
    let config = match relay::config::Config::load(config_path) {
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
        match relay::server::run(config, ring, shutdown).await {
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
