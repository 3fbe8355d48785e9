//! The `relay` binary: everything, argument parsing included, is in the library.

fn main() -> std::process::ExitCode {
    relay::cli::main()
}
