//! The sidecar beside a lazily restored file: where its chunks are, and which of them the
//! local file holds. Pure: bytes in, values out.
//!
//! A lazy restore (the relay, docs/offload.md) creates the file at its full size with nothing
//! written (a sparse file), `<file>.lazy` naming its chunks, and `<file>.lazy-have` with one
//! zero byte per *block*. The store holds the file as content-addressed chunks (4 MiB), and
//! beside them a block list: the SHA-256 of every block (16 KiB) of the file, 32 bytes each,
//! itself stored under its own SHA-256 (`blocks`). A read fetches and checks only the blocks it
//! touches, a range of a chunk's object. Whoever fills a block in writes its byte to 1 once
//! its bytes are durable; when every block is there both sidecars are removed and the file is
//! an ordinary file again.
//!
//! ```text
//! perceptron-lazy 2
//! store /var/lib/perceptron/objects
//! size 1073741824
//! chunk-bytes 4194304
//! block-bytes 16384
//! blocks 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! 6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b
//! …
//! ```
//!
//! The `store` line names where the chunks are read: a local directory store (an absolute
//! path: `chunks/ab/<id>` files in it), or `unix:<path>`, the relay's socket serving ranges
//! of a remote store's objects ([`crate::range`]), for a store the compute cannot read itself
//! (S3, whose credentials only the relay holds).

use std::path::{Path, PathBuf};

/// The first line of every sidecar this version writes and reads.
pub const HEADER: &str = "perceptron-lazy 2";

/// Suffix of the sidecar naming the chunks.
pub const CHUNKS_SUFFIX: &str = ".lazy";

/// Suffix of the sidecar saying which chunks are local.
pub const HAVE_SUFFIX: &str = ".lazy-have";

/// Where a lazily restored file's chunks are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A local directory store holding the chunks (`chunks/ab/<id>`).
    Directory(PathBuf),
    /// The relay's unix socket, which reads ranges of the store's objects for the compute.
    Socket(PathBuf),
}

/// The `store` value of a [`Source::Socket`].
const SOCKET_PREFIX: &str = "unix:";

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Directory(dir) => write!(f, "{}", dir.display()),
            Self::Socket(socket) => write!(f, "{SOCKET_PREFIX}{}", socket.display()),
        }
    }
}

impl Source {
    /// Reads a `store` value; both kinds name an absolute path.
    fn parse(value: &str) -> Option<Self> {
        let source = match value.strip_prefix(SOCKET_PREFIX) {
            Some(socket) => Self::Socket(PathBuf::from(socket)),
            None => Self::Directory(PathBuf::from(value)),
        };
        let (Self::Directory(path) | Self::Socket(path)) = &source;
        path.is_absolute().then_some(source)
    }
}

/// What `<file>.lazy` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// Where the chunks are read.
    pub store: Source,
    /// The file's size when it was offloaded.
    pub size: u64,
    /// The size of every chunk but the last.
    pub chunk_bytes: u64,
    /// The size of every block but the last; divides `chunk_bytes`.
    pub block_bytes: u64,
    /// The id of the block list object: the 32-byte SHA-256 of every block, in order.
    pub blocks: String,
    /// The chunks' ids (hex SHA-256 of their bytes), in order.
    pub chunks: Vec<String>,
}

/// Why a sidecar cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarError(pub String);

impl std::fmt::Display for SidecarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lazy sidecar: {}", self.0)
    }
}

impl std::error::Error for SidecarError {}

/// `<file>.lazy`.
#[must_use]
pub fn chunks_path(file: &Path) -> PathBuf {
    suffixed(file, CHUNKS_SUFFIX)
}

/// `<file>.lazy-have`.
#[must_use]
pub fn have_path(file: &Path) -> PathBuf {
    suffixed(file, HAVE_SUFFIX)
}

/// Whether a file name is a sidecar's (not data).
#[must_use]
pub fn is_sidecar(name: &str) -> bool {
    name.ends_with(CHUNKS_SUFFIX) || name.ends_with(HAVE_SUFFIX)
}

fn suffixed(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Where chunk `id` is in a directory store.
#[must_use]
pub fn chunk_file(store: &Path, id: &str) -> PathBuf {
    store
        .join("chunks")
        .join(id.get(..2).unwrap_or("00"))
        .join(id)
}

fn is_chunk_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Sidecar {
    /// The sidecar as written.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!(
            "{HEADER}\nstore {}\nsize {}\nchunk-bytes {}\nblock-bytes {}\nblocks {}\n",
            self.store, self.size, self.chunk_bytes, self.block_bytes, self.blocks
        );
        for id in &self.chunks {
            text.push_str(id);
            text.push('\n');
        }
        text.into_bytes()
    }

    /// Reads a sidecar, checking that its chunks cover its size.
    ///
    /// # Errors
    /// [`SidecarError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, SidecarError> {
        let bad = |what: &str| SidecarError(what.to_owned());
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(bad("not a sidecar of this version (first line)"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .ok_or_else(|| SidecarError(format!("missing {name:?}")))
        };
        let store = field("store")?;
        let size: u64 = field("size")?.parse().map_err(|_| bad("size"))?;
        let chunk_bytes: u64 = field("chunk-bytes")?
            .parse()
            .map_err(|_| bad("chunk-bytes"))?;
        let block_bytes: u64 = field("block-bytes")?
            .parse()
            .map_err(|_| bad("block-bytes"))?;
        let blocks = field("blocks")?.to_owned();
        let store = Source::parse(store).ok_or_else(|| bad("the store is not an absolute path"))?;
        if chunk_bytes == 0 || chunk_bytes > 1 << 30 {
            return Err(bad("chunk-bytes out of range"));
        }
        if block_bytes == 0 || chunk_bytes % block_bytes != 0 {
            return Err(bad("block-bytes must divide chunk-bytes"));
        }
        if !is_chunk_id(&blocks) {
            return Err(bad("the block list id is not a SHA-256"));
        }
        let chunks: Vec<String> = lines.map(str::to_owned).collect();
        if chunks.iter().any(|c| !is_chunk_id(c)) {
            return Err(bad("a chunk id that is not a SHA-256"));
        }
        if u64::try_from(chunks.len()).ok() != Some(size.div_ceil(chunk_bytes)) {
            return Err(bad("the chunks do not cover the size"));
        }
        Ok(Self {
            store,
            size,
            chunk_bytes,
            block_bytes,
            blocks,
            chunks,
        })
    }

    /// How many blocks the file has.
    #[must_use]
    pub fn block_count(&self) -> usize {
        usize::try_from(self.size.div_ceil(self.block_bytes)).unwrap_or(usize::MAX)
    }

    /// The length of block `index`'s bytes (the last one may be shorter).
    #[must_use]
    pub fn block_len(&self, index: usize) -> u64 {
        let start = (index as u64).saturating_mul(self.block_bytes);
        self.size.saturating_sub(start).min(self.block_bytes)
    }

    /// Where block `index` is: its chunk, and its offset in the chunk.
    #[must_use]
    pub fn block_place(&self, index: usize) -> (usize, u64) {
        let at = (index as u64).saturating_mul(self.block_bytes);
        (
            usize::try_from(at / self.chunk_bytes).unwrap_or(usize::MAX),
            at % self.chunk_bytes,
        )
    }

    /// The length of chunk `index`'s bytes (the last one may be shorter).
    #[must_use]
    pub fn chunk_len(&self, index: usize) -> u64 {
        let start = (index as u64).saturating_mul(self.chunk_bytes);
        self.size.saturating_sub(start).min(self.chunk_bytes)
    }
}

/// The hex SHA-256 of `bytes`, a chunk's id.
#[must_use]
pub fn chunk_id(bytes: &[u8]) -> String {
    hex(&block_hash(bytes))
}

/// The SHA-256 of `bytes`, as a block list holds it.
#[must_use]
pub fn block_hash(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}

/// The block list of `bytes`, cut in blocks of `block_bytes`: appended to `list`.
pub fn push_block_hashes(list: &mut Vec<u8>, bytes: &[u8], block_bytes: usize) {
    for block in bytes.chunks(block_bytes.max(1)) {
        list.extend_from_slice(&block_hash(block));
    }
}

/// Lower-case hex.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sidecar {
        Sidecar {
            store: Source::Directory("/srv/objects".into()),
            size: 10,
            chunk_bytes: 4,
            block_bytes: 2,
            blocks: chunk_id(b"list"),
            chunks: vec![chunk_id(b"abcd"), chunk_id(b"efgh"), chunk_id(b"ij")],
        }
    }

    #[test]
    fn a_sidecar_reads_back() {
        let s = sample();
        assert_eq!(Sidecar::decode(&s.encode()).unwrap(), s);
        let remote = Sidecar {
            store: Source::Socket("/var/lib/perceptron/lazy/shop.sock".into()),
            ..s.clone()
        };
        let text = remote.encode();
        assert!(
            text.starts_with(b"perceptron-lazy 2\nstore unix:/var/lib/perceptron/lazy/shop.sock\n")
        );
        assert_eq!(Sidecar::decode(&text).unwrap(), remote);
        assert_eq!((s.chunk_len(0), s.chunk_len(2), s.chunk_len(3)), (4, 2, 0));
        assert_eq!(
            (s.block_count(), s.block_len(4), s.block_place(3)),
            (5, 2, (1, 2))
        );
    }

    #[test]
    fn bad_sidecars_are_refused_by_what_is_wrong() {
        let text = String::from_utf8(sample().encode()).unwrap();
        for (from, to, why) in [
            ("perceptron-lazy 2", "perceptron-lazy 1", "first line"),
            ("block-bytes 2", "block-bytes 3", "divide"),
            ("size 10", "size 13", "cover"),
            ("size 10", "size x", "size"),
            ("/srv/objects", "srv", "absolute"),
            ("/srv/objects", "unix:srv.sock", "absolute"),
            ("chunk-bytes 4", "chunk-bytes 0", "range"),
        ] {
            let bad = text.replacen(from, to, 1);
            let err = Sidecar::decode(bad.as_bytes()).unwrap_err();
            assert!(err.0.contains(why), "{from} → {to}: {err}");
        }
        let short = text.rsplitn(3, '\n').last().unwrap().to_owned();
        assert!(Sidecar::decode(short.as_bytes()).is_err());
        assert!(Sidecar::decode(b"\xff").is_err());
        let wrong_id = text.replacen(&chunk_id(b"ij"), "zz", 1);
        assert!(Sidecar::decode(wrong_id.as_bytes()).is_err());
    }

    #[test]
    fn paths_beside_the_file_and_in_the_store() {
        let f = Path::new("/d/db/shop/data.sqlite");
        assert_eq!(chunks_path(f), Path::new("/d/db/shop/data.sqlite.lazy"));
        assert_eq!(have_path(f), Path::new("/d/db/shop/data.sqlite.lazy-have"));
        assert!(is_sidecar("data.sqlite.lazy") && is_sidecar("data.sqlite.lazy-have"));
        assert!(!is_sidecar("data.sqlite"));
        assert_eq!(
            chunk_file(Path::new("/s"), "ab12"),
            Path::new("/s/chunks/ab/ab12")
        );
    }
}
