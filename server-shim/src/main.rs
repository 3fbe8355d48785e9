//! The `server-shim` binary (not built yet: issue 3).

fn main() -> std::process::ExitCode {
    eprintln!("server-shim: not implemented yet (see issue 3)");
    std::process::ExitCode::FAILURE
}
