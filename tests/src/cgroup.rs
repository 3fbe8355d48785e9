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

/// Whether the kernel reports `pid`'s cgroup frozen.
///
/// # Panics
/// When neither freezer file can be read.
#[must_use]
pub fn frozen(pid: u32) -> bool {
    let dir = dir(pid, "freezer");
    std::fs::read_to_string(dir.join("freezer.state")).map_or_else(
        |_| {
            std::fs::read_to_string(dir.join("cgroup.events"))
                .unwrap()
                .lines()
                .any(|l| l == "frozen 1")
        },
        |s| s.trim() == "FROZEN",
    )
}
