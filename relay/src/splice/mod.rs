//! Held connections spliced in the kernel (docs/kernel-splice.md): once a held session is at
//! rest, its bytes stop going through the relay's userspace pump.
//!
//! - [`sockhash`]: an eBPF sockhash whose verdict redirects each socket's bytes to the other
//!   socket of its session; any pair of TCP sockets, on any host.
//! - [`below_tcp`]: a TC program that rewrites each segment of one connection
//!   into the other, so the session runs as if client and compute were connected; taken back
//!   through TCP repair mode.
//!
//! Both programs are compiled by `build.rs` when clang is found, and loaded through
//! [`load_object`] and [`take_map`]; what stops either is a [`SpliceUnavailable`].

pub mod below_tcp;
pub mod sockhash;

/// Why a kernel splice is not available to this relay.
#[derive(Debug)]
pub enum SpliceUnavailable {
    /// The relay was built without the program (clang was not found at build time).
    NotBuilt,
    /// The kernel would not load the object (no permission, no BPF).
    Load(aya::EbpfError),
    /// The object lacks this map (a build that does not match the code).
    MissingMap(&'static str),
    /// The object lacks this program.
    Missing(&'static str),
    /// This map is not of the kind the code expects.
    Map(&'static str, aya::maps::MapError),
    /// The kernel refused this step with the program (loading it, attaching it).
    Program(&'static str, aya::programs::ProgramError),
}

impl std::fmt::Display for SpliceUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotBuilt => {
                f.write_str("this relay was built without it (clang was not found at build time)")
            }
            Self::Load(e) => write!(f, "cannot load the program: {e}"),
            Self::MissingMap(name) => write!(f, "the program has no map {name}"),
            Self::Missing(name) => write!(f, "the program has no {name}"),
            Self::Map(name, e) => write!(f, "{name}: {e}"),
            Self::Program(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for SpliceUnavailable {}

/// Loads a compiled object (`None`: not built).
///
/// # Errors
/// [`SpliceUnavailable::NotBuilt`], or the kernel's refusal.
pub fn load_object(object: Option<&[u8]>) -> Result<aya::Ebpf, SpliceUnavailable> {
    let object = object.ok_or(SpliceUnavailable::NotBuilt)?;
    // Without the kernel's BTF (which `Ebpf::load` reads and parses for CO-RE relocations):
    // the programs read only UAPI structures, and parsing /sys/kernel/btf/vmlinux cost every
    // relay about 11 MB of resident memory it never gave back.
    aya::EbpfLoader::new()
        .btf(None)
        .load(object)
        .map_err(SpliceUnavailable::Load)
}

/// Takes map `name` out of `ebpf`.
///
/// # Errors
/// [`SpliceUnavailable::Missing`] when the object has no such map.
pub fn take_map(
    ebpf: &mut aya::Ebpf,
    name: &'static str,
) -> Result<aya::maps::Map, SpliceUnavailable> {
    ebpf.take_map(name)
        .ok_or(SpliceUnavailable::MissingMap(name))
}
