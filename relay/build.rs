//! Compiles the kernel splice's BPF programs (`bpf/splice.bpf.c` and `bpf/tcp_splice.bpf.c`,
//! docs/kernel-splice.md) with clang, for the relay to load at start. Without clang (or on a target other than
//! Linux) the relay is built without it, says so at start, and keeps held connections on
//! its userspace pump. `CLANG` names another clang; after installing clang, touch the source
//! file for the next build to pick it up.

use std::path::PathBuf;
use std::process::Command;

const SOURCES: [&str; 2] = ["bpf/splice.bpf.c", "bpf/tcp_splice.bpf.c"];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(splice_bpf)");
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        return;
    };
    // linux/bpf.h includes asm/types.h, which Debian keeps under the target's multiarch
    // directory.
    let multiarch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64-linux-gnu",
        Ok("aarch64") => "aarch64-linux-gnu",
        Ok(other) => {
            println!("cargo:warning=built without the kernel splice: no include path for {other}");
            return;
        }
        Err(_) => return,
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    for source in SOURCES {
        let name = source.trim_start_matches("bpf/").replace(".c", ".o");
        let object = PathBuf::from(&out_dir).join(name);
        let compiled = Command::new(&clang)
            .args([
                "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3",
            ])
            .arg(format!("-I/usr/include/{multiarch}"))
            .args(["-c", source, "-o"])
            .arg(&object)
            .status();
        match compiled {
            Ok(status) if status.success() => {}
            Ok(status) => {
                println!(
                    "cargo:warning=built without the kernel splice: {clang} failed on {source} ({status})"
                );
                return;
            }
            Err(e) => {
                println!(
                    "cargo:warning=built without the kernel splice: cannot run {clang} ({e}); \
                     apt-get install clang, then touch relay/{source}"
                );
                return;
            }
        }
    }
    println!("cargo:rustc-cfg=splice_bpf");
}
