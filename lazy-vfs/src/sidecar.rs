//! The sidecar beside a lazily restored file: where its chunks are, and which of them the
//! local file holds. Pure: bytes in, values out.
//!
//! A lazy restore (the relay, docs/offload.md) creates the file at its full size with nothing
//! written (a sparse file), `<file>.lazy` naming its chunks, and `<file>.lazy-have` with one
//! zero byte per chunk. Whoever fills a chunk in writes its byte to 1 once the chunk's bytes
//! are durable; when every chunk is there both sidecars are removed and the file is an
//! ordinary file again.
//!
//! ```text
//! perceptron-lazy 1
//! store /var/lib/perceptron/objects
//! size 1073741824
//! chunk-bytes 4194304
//! 6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b
//! …
//! ```

use std::path::{Path, PathBuf};

/// The first line of every sidecar this version writes and reads.
pub const HEADER: &str = "perceptron-lazy 1";

/// Suffix of the sidecar naming the chunks.
pub const CHUNKS_SUFFIX: &str = ".lazy";

/// Suffix of the sidecar saying which chunks are local.
pub const HAVE_SUFFIX: &str = ".lazy-have";

/// What `<file>.lazy` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// The local directory store holding the chunks (`chunks/ab/<id>`).
    pub store: PathBuf,
    /// The file's size when it was offloaded.
    pub size: u64,
    /// The size of every chunk but the last.
    pub chunk_bytes: u64,
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
            "{HEADER}\nstore {}\nsize {}\nchunk-bytes {}\n",
            self.store.display(),
            self.size,
            self.chunk_bytes
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
        let store = PathBuf::from(field("store")?);
        let size: u64 = field("size")?.parse().map_err(|_| bad("size"))?;
        let chunk_bytes: u64 = field("chunk-bytes")?
            .parse()
            .map_err(|_| bad("chunk-bytes"))?;
        if !store.is_absolute() {
            return Err(bad("the store is not an absolute path"));
        }
        if chunk_bytes == 0 || chunk_bytes > 1 << 30 {
            return Err(bad("chunk-bytes out of range"));
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
            chunks,
        })
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
    use sha2::Digest as _;
    use std::fmt::Write as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sidecar {
        Sidecar {
            store: "/srv/objects".into(),
            size: 10,
            chunk_bytes: 4,
            chunks: vec![chunk_id(b"abcd"), chunk_id(b"efgh"), chunk_id(b"ij")],
        }
    }

    #[test]
    fn a_sidecar_reads_back() {
        let s = sample();
        assert_eq!(Sidecar::decode(&s.encode()).unwrap(), s);
        assert_eq!((s.chunk_len(0), s.chunk_len(2), s.chunk_len(3)), (4, 2, 0));
    }

    #[test]
    fn bad_sidecars_are_refused_by_what_is_wrong() {
        let text = String::from_utf8(sample().encode()).unwrap();
        for (from, to, why) in [
            ("perceptron-lazy 1", "perceptron-lazy 2", "first line"),
            ("size 10", "size 13", "cover"),
            ("size 10", "size x", "size"),
            ("/srv/objects", "srv", "absolute"),
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
