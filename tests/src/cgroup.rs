//! What the kernel says of a process's cgroups (the frozen tier and capacity tests read them
//! back rather than trusting the relay's word).

use std::path::PathBuf;

/// The directory of `pid`'s cgroup for `controller` (v1), or its v2 cgroup.
///
/// # Panics
/// When `/proc/<pid>/cgroup` cannot be read (the process is gone).
#[must_use]
pub fn dir(pid: u32, controller: &str) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v1 = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| PathBuf::from(format!("/sys/fs/cgroup/{controller}{path}")))
    });
    v1.filter(|d| d.is_dir()).unwrap_or_else(|| {
        let path = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        PathBuf::from(format!("/sys/fs/cgroup{path}"))
    })
}

/// Whether the kernel reports `pid`'s cgroup frozen. A process still in the root cgroup (a
/// compute placed in its own only at its first freeze) is not.
///
/// # Panics
/// When the process is gone.
#[must_use]
pub fn frozen(pid: u32) -> bool {
    let dir = dir(pid, "freezer");
    if let Ok(state) = std::fs::read_to_string(dir.join("freezer.state")) {
        return state.trim() == "FROZEN";
    }
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
}
