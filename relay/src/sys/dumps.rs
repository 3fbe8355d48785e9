//! Keeping the relay's memory out of core dumps and out of other processes' reach. The relay
//! holds the signing keys, tickets, the admin token and store credentials in memory; a core
//! dump (written where the host's `core_pattern` says, often readable by more than root) or a
//! process of the same user reading `/proc/<relay>/mem` or `/environ` would give them away.
//! `PR_SET_DUMPABLE` 0 makes the kernel write no core dump of the process (with
//! `fs.suid_dumpable = 2` only one readable by root alone), and makes its `/proc` files root's
//! and `ptrace` by the same user refused; `RLIMIT_CORE` 0 backs the first up. Nothing in memory
//! needs excluding page by page (`MADV_DONTDUMP`) once the whole process is.

/// Turns core dumps and same-user inspection off for this process.
///
/// # Errors
/// The kernel's refusal (none on Linux for a process's own setting).
pub fn keep_out_of_dumps() -> nix::Result<()> {
    nix::sys::prctl::set_dumpable(false)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_is_no_longer_dumpable() {
        super::keep_out_of_dumps().unwrap();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
        let (soft, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_CORE).unwrap();
        assert_eq!((soft, hard), (0, 0));
    }
}
