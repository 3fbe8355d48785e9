//! The `server-shim` binary: everything is in the library (see `server_shim::cli`).

fn main() -> std::process::ExitCode {
    server_shim::cli::main()
}
