//! A compute's own cgroup: its CPU and memory limits (resized live), its CPU use, and its
//! freezer. cgroup v2 where the host has it (one directory, `cpu.max`, `memory.high`/`max`,
//! `cgroup.freeze`), else v1 (`cpu`, `cpuacct`, `memory` and `freezer` hierarchies).
//!
//! A resize never kills: the CPU quota is a hard limit (a compute over it waits for the next
//! period), but memory is limited hard only at the instance's ceiling; the current capacity's
//! memory is a soft limit (v2 `memory.high`, v1 `memory.soft_limit_in_bytes`) that makes the
//! kernel reclaim rather than kill. The relay names each cgroup after its instance and its
//! state directory, so two relays never share one, and removes it when the compute is gone.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::capacity::{CPU_PERIOD_US, Ccu};

/// Where the host mounts cgroups.
pub const ROOT: &str = "/sys/fs/cgroup";
/// The v2 directory under which the relay creates its cgroups.
const V2_PARENT: &str = "perceptron";
/// How long a freeze may take before it counts as failed.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cgroup directories of one compute.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    V2(PathBuf),
    V1 {
        cpu: PathBuf,
        cpuacct: PathBuf,
        memory: PathBuf,
        freezer: PathBuf,
    },
}

/// One compute's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    layout: Layout,
}

/// The cgroup name for `instance` of the relay whose state lives in `state_dir`.
#[must_use]
pub fn name_for(instance: &str, state_dir: &Path) -> String {
    // FNV-1a: a short, stable tag; collisions only matter between relays on one host.
    let mut h: u32 = 0x811c_9dc5;
    for b in state_dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    format!("perceptron-{instance}-{h:08x}")
}

impl Cgroup {
    /// The cgroup `name` under the hierarchy at `root`, created if missing.
    ///
    /// # Errors
    /// The file system's error, naming the directory that could not be created (no cgroup
    /// support, or not root).
    pub fn create(root: &Path, name: &str) -> io::Result<Self> {
        let layout = layout(root, name)?;
        match &layout {
            Layout::V2(dir) => {
                let parent = root.join(V2_PARENT);
                create_dir(&parent)?;
                // Controllers must be enabled from the root down to the parent of the leaf.
                write(&root.join("cgroup.subtree_control"), "+cpu +memory")?;
                write(&parent.join("cgroup.subtree_control"), "+cpu +memory")?;
                create_dir(dir)?;
            }
            Layout::V1 {
                cpu,
                cpuacct,
                memory,
                freezer,
            } => {
                for dir in [cpu, cpuacct, memory, freezer] {
                    create_dir(dir)?;
                }
            }
        }
        Ok(Self { layout })
    }

    /// The existing cgroup `name`, if there is one (a relay restart adopting a compute).
    #[must_use]
    pub fn existing(root: &Path, name: &str) -> Option<Self> {
        let layout = layout(root, name).ok()?;
        let present = match &layout {
            Layout::V2(dir) => dir.is_dir(),
            Layout::V1 { cpu, freezer, .. } => cpu.is_dir() && freezer.is_dir(),
        };
        present.then_some(Self { layout })
    }

    /// Moves process `pid` (and the threads it starts from now on) into the cgroup.
    ///
    /// # Errors
    /// The file system's error.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        for dir in self.dirs() {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Whether `pid` is in the cgroup.
    #[must_use]
    pub fn holds(&self, pid: u32) -> bool {
        let dir = match &self.layout {
            Layout::V2(dir) => dir,
            Layout::V1 { cpu, .. } => cpu,
        };
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .is_ok_and(|procs| procs.lines().any(|l| l.trim() == pid.to_string()))
    }

    /// Sets the capacity: CPU quota `ccu`, soft memory limit `ccu`, hard memory limit
    /// `ceiling`.
    ///
    /// # Errors
    /// The file system's error for the first limit that could not be written.
    pub fn resize(&self, ccu: Ccu, ceiling: Ccu) -> io::Result<()> {
        match &self.layout {
            Layout::V2(dir) => {
                write(&dir.join("memory.max"), &ceiling.memory_bytes().to_string())?;
                write(&dir.join("memory.high"), &ccu.memory_bytes().to_string())?;
                write(&dir.join("cpu.max"), &cpu_max(ccu))
            }
            Layout::V1 { cpu, memory, .. } => {
                write(
                    &memory.join("memory.limit_in_bytes"),
                    &ceiling.memory_bytes().to_string(),
                )?;
                write(
                    &memory.join("memory.soft_limit_in_bytes"),
                    &ccu.memory_bytes().to_string(),
                )?;
                write(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(
                    &cpu.join("cpu.cfs_quota_us"),
                    &ccu.cpu_quota_us().to_string(),
                )
            }
        }
    }

    /// The CPU time the cgroup's processes have used in all.
    ///
    /// # Errors
    /// The file system's error, or a value that does not parse.
    pub fn cpu_usage(&self) -> io::Result<Duration> {
        match &self.layout {
            Layout::V2(dir) => {
                let stat = read(&dir.join("cpu.stat"))?;
                usage_usec(&stat)
                    .map(Duration::from_micros)
                    .ok_or_else(|| io::Error::other("cpu.stat has no usage_usec"))
            }
            Layout::V1 { cpuacct, .. } => {
                let ns = read(&cpuacct.join("cpuacct.usage"))?;
                ns.trim()
                    .parse()
                    .map(Duration::from_nanos)
                    .map_err(|_| io::Error::other(format!("unreadable cpuacct.usage {ns:?}")))
            }
        }
    }

    /// Freezes every process of the cgroup and waits until the kernel reports it frozen.
    ///
    /// # Errors
    /// The file system's error, or the freeze not completing within 5 s.
    pub async fn freeze(&self) -> io::Result<()> {
        self.write_frozen(true)?;
        let deadline = tokio::time::Instant::now() + FREEZE_TIMEOUT;
        let mut pause = Duration::from_micros(200);
        while !self.is_frozen()? {
            if tokio::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the kernel did not report the cgroup frozen within {FREEZE_TIMEOUT:?}"
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Thaws the cgroup. The kernel wakes every task of the cgroup before the write returns
    /// (v1 `freezer.state`, v2 `cgroup.freeze`), so unlike a freeze there is nothing to wait
    /// for; reading the state back cost 0.1 ms of a 1 ms thaw-to-login (measured).
    ///
    /// # Errors
    /// The file system's error.
    pub async fn thaw(&self) -> io::Result<()> {
        self.write_frozen(false)
    }

    /// Whether the kernel reports the cgroup frozen.
    ///
    /// # Errors
    /// The file system's error.
    pub fn is_frozen(&self) -> io::Result<bool> {
        Ok(match &self.layout {
            Layout::V2(dir) => read(&dir.join("cgroup.events"))?
                .lines()
                .any(|l| l.trim() == "frozen 1"),
            Layout::V1 { freezer, .. } => read(&freezer.join("freezer.state"))?.trim() == "FROZEN",
        })
    }

    fn write_frozen(&self, frozen: bool) -> io::Result<()> {
        match &self.layout {
            Layout::V2(dir) => write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
            Layout::V1 { freezer, .. } => write(
                &freezer.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            ),
        }
    }

    /// Removes the cgroup's directories; they must be empty of processes.
    pub fn remove(&self) {
        for dir in self.dirs() {
            let _ = std::fs::remove_dir(dir);
        }
    }

    fn dirs(&self) -> Vec<&Path> {
        match &self.layout {
            Layout::V2(dir) => vec![dir],
            Layout::V1 {
                cpu,
                cpuacct,
                memory,
                freezer,
            } => {
                let mut dirs: Vec<&Path> = vec![cpu, memory, freezer];
                // cpu and cpuacct are often one hierarchy mounted under both names.
                if !same_dir(cpu, cpuacct) {
                    dirs.push(cpuacct);
                }
                dirs
            }
        }
    }
}

/// The layout of cgroup `name` on the host rooted at `root`.
fn layout(root: &Path, name: &str) -> io::Result<Layout> {
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if has("cpu") && has("memory") {
        return Ok(Layout::V2(root.join(V2_PARENT).join(name)));
    }
    let hierarchy = |controller: &str| {
        let dir = root.join(controller);
        if dir.is_dir() {
            Ok(dir.join(name))
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no cgroup v2 with cpu and memory at {} and no v1 {controller} hierarchy at {}",
                    root.display(),
                    dir.display()
                ),
            ))
        }
    };
    Ok(Layout::V1 {
        cpu: hierarchy("cpu")?,
        cpuacct: hierarchy("cpuacct")?,
        memory: hierarchy("memory")?,
        freezer: hierarchy("freezer")?,
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn create_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create cgroup {}: {e}", dir.display()),
        )),
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot write {value:?} to {}: {e}", path.display()),
        )
    })
}

fn read(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))
}

/// v2 `cpu.max` for `ccu`: `<quota> <period>`.
fn cpu_max(ccu: Ccu) -> String {
    format!("{} {CPU_PERIOD_US}", ccu.cpu_quota_us())
}

/// `usage_usec` from a v2 `cpu.stat`.
fn usage_usec(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_formats() {
        assert_eq!(
            usage_usec("usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n"),
            Some(1_234)
        );
        assert_eq!(cpu_max(Ccu::parse(0.5).unwrap()), "50000 100000");
    }

    #[test]
    fn names_are_per_instance_and_per_relay() {
        let a = name_for("demo", Path::new("/var/lib/a"));
        assert!(a.starts_with("perceptron-demo-"));
        assert_eq!(a, name_for("demo", Path::new("/var/lib/a")));
        assert_ne!(a, name_for("demo", Path::new("/var/lib/b")));
    }

    /// The layout is chosen by what the root offers (a fake root in a temporary directory).
    #[test]
    fn picks_v2_with_its_controllers_else_v1() {
        let root = std::env::temp_dir().join(format!("cgroup-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        assert!(layout(&root, "x").is_err(), "neither");
        for c in ["cpu", "cpuacct", "memory", "freezer"] {
            std::fs::create_dir(root.join(c)).unwrap();
        }
        assert!(matches!(layout(&root, "x").unwrap(), Layout::V1 { .. }));
        std::fs::write(root.join("cgroup.controllers"), "pids\n").unwrap();
        assert!(
            matches!(layout(&root, "x").unwrap(), Layout::V1 { .. }),
            "a v2 without cpu"
        );
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        assert_eq!(
            layout(&root, "x").unwrap(),
            Layout::V2(root.join("perceptron").join("x"))
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
