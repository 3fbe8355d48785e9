//! What an offloaded data directory is in the store: content-addressed chunks and, written
//! last, a manifest naming every directory, file and chunk. Pure: bytes in, values out.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The manifest format this relay writes and reads.
pub const FORMAT: u32 = 1;

/// A file is cut into chunks of this size (the last one shorter): an unchanged chunk is never
/// uploaded twice, and a restore holds one chunk in memory at a time.
pub const CHUNK_BYTES: usize = 4 << 20;

/// A file restored lazily is fetched in blocks of this size (a range of a chunk's object),
/// each checked against its SHA-256 in the file's block list.
pub const BLOCK_BYTES: usize = 16 << 10;

/// An offloaded data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The instance whose data it is.
    pub instance: String,
    /// When the offload began (Unix ms).
    pub created_ms: u64,
    /// Every directory below the data directory, parents first, relative to it.
    pub dirs: Vec<String>,
    /// Every regular file, relative to the data directory.
    pub files: Vec<FileEntry>,
}

/// One file of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the data directory.
    pub path: String,
    /// Its permission bits.
    pub mode: u32,
    /// Its length in bytes.
    pub size: u64,
    /// Its chunks' ids ([`chunk_id`]), in order.
    pub chunks: Vec<String>,
    /// For a file that may be restored lazily (server-shim's databases): the id of its block
    /// list object, the 32-byte SHA-256 of every [`BLOCK_BYTES`] block, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<String>,
}

/// Why a manifest cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// Not JSON of the expected shape.
    Malformed(String),
    /// Another format version.
    Format(u32),
    /// It names another instance.
    Instance(String),
    /// A path that is absolute, climbs out (`..`) or is empty.
    Path(String),
    /// A file whose chunks cannot hold its size, or a chunk id that is not a SHA-256.
    Chunks(String),
    /// Its bytes are not the ones the offload wrote (the digest kept beside the data
    /// directory differs).
    Digest,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed manifest: {e}"),
            Self::Format(v) => write!(f, "manifest format {v} (this relay reads {FORMAT})"),
            Self::Instance(i) => write!(f, "the manifest is instance {i:?}'s"),
            Self::Path(p) => write!(f, "the manifest names an unsafe path {p:?}"),
            Self::Chunks(p) => write!(f, "the manifest's chunks for {p:?} do not add up"),
            Self::Digest => f.write_str("the manifest is not the one the offload wrote"),
        }
    }
}

impl std::error::Error for ManifestError {}

impl Manifest {
    /// The bytes of every file.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The manifest as stored.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Reads a stored manifest for `instance`, checking every path and chunk list, and that
    /// its SHA-256 is `digest` (kept beside the data directory when the offload finished).
    ///
    /// # Errors
    /// [`ManifestError`] for anything a restore must not trust.
    pub fn decode(bytes: &[u8], instance: &str, digest: &str) -> Result<Self, ManifestError> {
        if hex_sha256(bytes) != digest {
            return Err(ManifestError::Digest);
        }
        let m: Self =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        if m.format != FORMAT {
            return Err(ManifestError::Format(m.format));
        }
        if m.instance != instance {
            return Err(ManifestError::Instance(m.instance));
        }
        for path in m.dirs.iter().chain(m.files.iter().map(|f| &f.path)) {
            if !safe_relative(path) {
                return Err(ManifestError::Path(path.clone()));
            }
        }
        for f in &m.files {
            let needed = f.size.div_ceil(CHUNK_BYTES as u64);
            let ids_ok =
                f.chunks.iter().all(|c| is_chunk_id(c)) && f.blocks.iter().all(|b| is_chunk_id(b));
            if u64::try_from(f.chunks.len()).ok() != Some(needed) || !ids_ok {
                return Err(ManifestError::Chunks(f.path.clone()));
            }
        }
        Ok(m)
    }
}

/// A chunk's id: the SHA-256 of its bytes, in lowercase hex.
#[must_use]
pub fn chunk_id(bytes: &[u8]) -> String {
    hex_sha256(bytes)
}

/// The SHA-256 of `bytes`, in lowercase hex.
#[must_use]
pub fn hex_sha256(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn is_chunk_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where chunk `id` lives in the store (shared by every instance: equal bytes are kept once).
#[must_use]
pub fn chunk_key(id: &str) -> String {
    format!("chunks/{}/{id}", id.get(..2).unwrap_or("00"))
}

/// Where `instance`'s manifest whose SHA-256 is `digest` lives in the store: named by its
/// content, so no later offload (another relay's, a copy of this configuration's) can replace
/// the manifest a data directory's marker names.
#[must_use]
pub fn manifest_key(instance: &str, digest: &str) -> String {
    format!("instances/{instance}/{digest}.json")
}

/// Whether `path` stays inside the directory it is relative to: not empty, not absolute, no
/// `.`, `..` or empty component.
#[must_use]
pub fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: FORMAT,
            instance: "shop".into(),
            created_ms: 1,
            dirs: vec!["db".into(), "db/shop".into()],
            files: vec![FileEntry {
                path: "db/shop/data.sqlite".into(),
                mode: 0o600,
                size: 5,
                chunks: vec![chunk_id(b"hello")],
                blocks: None,
            }],
        }
    }

    #[test]
    fn a_manifest_reads_back_only_with_its_digest_and_instance() {
        let bytes = sample().encode();
        let digest = hex_sha256(&bytes);
        assert_eq!(Manifest::decode(&bytes, "shop", &digest).unwrap(), sample());
        assert_eq!(
            Manifest::decode(&bytes, "crm", &digest),
            Err(ManifestError::Instance("shop".into()))
        );
        let mut changed = bytes.clone();
        changed[10] ^= 1;
        assert_eq!(
            Manifest::decode(&changed, "shop", &digest),
            Err(ManifestError::Digest)
        );
    }

    #[test]
    fn unsafe_paths_and_short_chunk_lists_are_refused() {
        for bad in ["", "/etc/passwd", "../x", "db/../../x", "db//x", "./x"] {
            let mut m = sample();
            m.files[0].path = bad.into();
            let bytes = m.encode();
            assert_eq!(
                Manifest::decode(&bytes, "shop", &hex_sha256(&bytes)),
                Err(ManifestError::Path(bad.into())),
                "{bad:?}"
            );
        }
        let mut m = sample();
        m.files[0].size = CHUNK_BYTES as u64 + 1;
        let bytes = m.encode();
        assert!(matches!(
            Manifest::decode(&bytes, "shop", &hex_sha256(&bytes)),
            Err(ManifestError::Chunks(_))
        ));
        let mut m = sample();
        m.files[0].chunks = vec!["../../etc".into()];
        let bytes = m.encode();
        assert!(matches!(
            Manifest::decode(&bytes, "shop", &hex_sha256(&bytes)),
            Err(ManifestError::Chunks(_))
        ));
    }

    #[test]
    fn chunk_ids_are_sha256_and_keys_fan_out_by_their_first_byte() {
        let id = chunk_id(b"abc");
        assert_eq!(
            id,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(chunk_key(&id), format!("chunks/ba/{id}"));
        assert_eq!(manifest_key("shop", "ab12"), "instances/shop/ab12.json");
    }
}
