//! One lazily restored file, shared by every handle open on it: which blocks are local, and
//! filling the missing ones in from the store — on demand before a read or write touches
//! them (a range of a chunk's object), and in the background, a chunk at a time at a limited
//! rate, until the file is whole.
//!
//! Safety of the data (docs/offload.md, "Lazy restore"):
//! - a block is checked against its SHA-256 in the block list (itself checked against its id
//!   when the file is opened) and written where it belongs; a block that fails the check is
//!   never written;
//! - a block is marked local on disk (`<file>.lazy-have`) only after its bytes are durable, and
//!   always before the first write into it: a crash can lose the mark of a block that was only
//!   read (it is fetched again, the same bytes), never a write;
//! - blocks wholly beyond the file's end (it was truncated) count as local, so a file that
//!   grows again is never filled with stale bytes;
//! - once every block is local, the sidecars are removed: an ordinary file again.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::object;
use crate::sidecar::{self, Sidecar, Source};

/// Why a chunk could not be made local; each names the object or the file.
#[derive(Debug)]
pub enum HydrateError {
    /// The sidecars cannot be read.
    Sidecar(PathBuf, String),
    /// An object missing from the store, or unreadable (named as logs should name it).
    Fetch(String, std::io::Error),
    /// An object (or a block of it) whose bytes are not the ones its id or the block list says.
    Corrupt(String),
    /// The local file.
    Local(PathBuf, std::io::Error),
}

impl std::fmt::Display for HydrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sidecar(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Fetch(object, e) => write!(f, "store object {object}: {e}"),
            Self::Corrupt(object) => {
                write!(f, "store object {object}: its bytes do not match its id")
            }
            Self::Local(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for HydrateError {}

/// Where a block's bytes are (an `AtomicU8` each: read without the lock, changed under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Have {
    /// Only in the store: the local range is a hole.
    Missing = 0,
    /// Written locally, maybe not yet durable, and not yet marked on disk.
    Fetched = 1,
    /// Durable and marked on disk: writes may go into it.
    Marked = 2,
}

/// A lazily restored file.
#[derive(Debug)]
pub struct LazyFile {
    path: PathBuf,
    /// The file's (device, inode): a database dropped and created again under the same path
    /// is another file.
    identity: (u64, u64),
    sidecar: Sidecar,
    /// The SHA-256 of every block.
    block_hashes: Vec<[u8; 32]>,
    /// Each block's [`Have`]: a read of local blocks takes no lock, so the background fill
    /// (or another connection's fetch) never holds it up.
    have: Vec<AtomicU8>,
    /// How many are [`Have::Missing`].
    missing: AtomicUsize,
    /// The sidecars are gone: every chunk is local.
    whole: AtomicBool,
    /// Held to change `have` and to write into the file; never while reading the store.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The file, for writing fetched chunks (SQLite has its own handles).
    file: File,
    have_file: File,
}

/// Counts of a file's chunks, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Blocks in the file.
    pub blocks: usize,
    /// Still only in the store.
    pub missing: usize,
    /// The sidecars are removed.
    pub whole: bool,
}

/// The files open lazily in this process, by path: every handle on one file shares its state.
fn registry() -> MutexGuard<'static, HashMap<PathBuf, Arc<LazyFile>>> {
    static FILES: OnceLock<Mutex<HashMap<PathBuf, Arc<LazyFile>>>> = OnceLock::new();
    FILES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

impl LazyFile {
    /// The shared state of `path` if it is restored lazily (its sidecar exists), loading it on
    /// first use; `Ok(None)` for an ordinary file. `started` is told of a file newly loaded, to
    /// start its background fill.
    ///
    /// # Errors
    /// [`HydrateError::Sidecar`] if the sidecars exist but cannot be used.
    pub fn open(
        path: &Path,
        started: impl FnOnce(&Arc<Self>),
    ) -> Result<Option<Arc<Self>>, HydrateError> {
        let mut files = registry();
        if let Some(f) = files.get(path) {
            if identity(path).ok() == Some(f.identity) {
                return Ok(Some(Arc::clone(f)));
            }
            files.remove(path);
        }
        let chunks_path = sidecar::chunks_path(path);
        let bytes = match std::fs::read(&chunks_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(HydrateError::Sidecar(chunks_path, e.to_string())),
        };
        let sidecar =
            Sidecar::decode(&bytes).map_err(|e| HydrateError::Sidecar(chunks_path, e.0))?;
        let lazy = Arc::new(Self::load(path, sidecar)?);
        files.insert(path.to_path_buf(), Arc::clone(&lazy));
        drop(files);
        started(&lazy);
        Ok(Some(lazy))
    }

    fn load(path: &Path, sidecar: Sidecar) -> Result<Self, HydrateError> {
        let have_path = sidecar::have_path(path);
        let sidecar_err =
            |e: std::io::Error| HydrateError::Sidecar(have_path.clone(), e.to_string());
        let have_file = File::options()
            .read(true)
            .write(true)
            .open(&have_path)
            .map_err(sidecar_err)?;
        let block_hashes = block_list(&sidecar)?;
        let mut marks = vec![0u8; sidecar.block_count()];
        have_file
            .read_exact_at(&mut marks, 0)
            .map_err(sidecar_err)?;
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| HydrateError::Local(path.to_path_buf(), e))?;
        let identity = identity(path).map_err(|e| HydrateError::Local(path.to_path_buf(), e))?;
        let have: Vec<AtomicU8> = marks
            .iter()
            .map(|&m| AtomicU8::new(if m == 0 { Have::Missing } else { Have::Marked } as u8))
            .collect();
        let missing = marks.iter().filter(|m| **m == 0).count();
        let lazy = Self {
            path: path.to_path_buf(),
            identity,
            sidecar,
            block_hashes,
            have,
            missing: missing.into(),
            whole: false.into(),
            state: Mutex::new(State { file, have_file }),
        };
        // A truncation the process did not live to mark (see `truncated`).
        let len = lazy
            .lock()
            .file
            .metadata()
            .map_err(|e| HydrateError::Local(path.to_path_buf(), e))?
            .len();
        lazy.truncated(len)?;
        Ok(lazy)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn have(&self, index: usize) -> Option<Have> {
        let v = self.have.get(index)?.load(Ordering::Acquire);
        Some(match v {
            0 => Have::Missing,
            1 => Have::Fetched,
            _ => Have::Marked,
        })
    }

    /// Sets chunk `index`'s state; the caller holds the lock (`_s`).
    fn set_have(&self, _s: &State, index: usize, to: Have) {
        if let Some(h) = self.have.get(index) {
            let was = h.swap(to as u8, Ordering::AcqRel);
            if was == Have::Missing as u8 && to != Have::Missing {
                self.missing.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How far the file is.
    #[must_use]
    pub fn progress(&self) -> Progress {
        Progress {
            blocks: self.have.len(),
            missing: self.missing.load(Ordering::Acquire),
            whole: self.whole.load(Ordering::Acquire),
        }
    }

    fn blocks_of(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        let count = self.have.len();
        if len == 0 {
            return 0..0;
        }
        let first = usize::try_from(offset / self.sidecar.block_bytes).unwrap_or(usize::MAX);
        let last = usize::try_from((offset.saturating_add(len) - 1) / self.sidecar.block_bytes)
            .unwrap_or(usize::MAX);
        first.min(count)..last.saturating_add(1).min(count)
    }

    /// Makes `len` bytes at `offset` local before a read; before a write (`write`), also marks
    /// their blocks on disk. Blocks already local cost an atomic load each, no lock.
    ///
    /// # Errors
    /// [`HydrateError`]; nothing was written for the chunk that failed.
    pub fn ensure(&self, offset: u64, len: u64, write: bool) -> Result<(), HydrateError> {
        if self.whole.load(Ordering::Acquire) {
            return Ok(());
        }
        let range = self.blocks_of(offset, len);
        for index in range.clone() {
            if self.have(index) == Some(Have::Missing) {
                self.fetch(index)?;
            }
        }
        if write && range.clone().any(|i| self.have(i) == Some(Have::Fetched)) {
            self.mark(&self.lock())?;
        }
        Ok(())
    }

    /// Fetches block `index` into the file: its range of the chunk's object is read and
    /// checked without the lock; it is written under it, unless another fetch (or a
    /// truncation) got there first.
    fn fetch(&self, index: usize) -> Result<(), HydrateError> {
        let (chunk, offset) = self.sidecar.block_place(index);
        let Some(id) = self.sidecar.chunks.get(chunk) else {
            return Ok(());
        };
        let len = usize::try_from(self.sidecar.block_len(index)).unwrap_or(0);
        let bytes = read_object(&self.sidecar.store, id, offset, len)?;
        self.install(index, &bytes, id)
    }

    /// Writes block `index`'s `bytes` (from object `id`) if they are the block's and it is
    /// still missing.
    fn install(&self, index: usize, bytes: &[u8], id: &str) -> Result<(), HydrateError> {
        if self.block_hashes.get(index) != Some(&sidecar::block_hash(bytes)) {
            return Err(HydrateError::Corrupt(object::name(&self.sidecar.store, id)));
        }
        let s = self.lock();
        if self.have(index) != Some(Have::Missing) {
            return Ok(());
        }
        let at = (index as u64) * self.sidecar.block_bytes;
        s.file
            .write_all_at(bytes, at)
            .map_err(|e| HydrateError::Local(self.path.clone(), e))?;
        self.set_have(&s, index, Have::Fetched);
        Ok(())
    }

    /// Makes every fetched block durable, then marks them on disk; under the lock (`s`).
    fn mark(&self, s: &State) -> Result<(), HydrateError> {
        let fetched: Vec<usize> = (0..self.have.len())
            .filter(|&i| self.have(i) == Some(Have::Fetched))
            .collect();
        if fetched.is_empty() {
            return Ok(());
        }
        let local = |e| HydrateError::Local(self.path.clone(), e);
        s.file.sync_data().map_err(local)?;
        let have_path = sidecar::have_path(&self.path);
        for &index in &fetched {
            s.have_file
                .write_all_at(&[1], index as u64)
                .map_err(|e| HydrateError::Local(have_path.clone(), e))?;
        }
        s.have_file
            .sync_data()
            .map_err(|e| HydrateError::Local(have_path, e))?;
        for index in fetched {
            self.set_have(s, index, Have::Marked);
        }
        Ok(())
    }

    /// Before the file is truncated to `len`: the block the new end falls in is made local
    /// and marked, so what remains of it is the real data.
    ///
    /// # Errors
    /// [`HydrateError`]; the truncation must not happen then.
    pub fn truncating(&self, len: u64) -> Result<(), HydrateError> {
        if len % self.sidecar.block_bytes == 0 {
            return Ok(());
        }
        self.ensure(len, 1, true)
    }

    /// The file is now `len` long: blocks wholly beyond it hold nothing of the store's any
    /// more, and count as local (marked), so that when the file grows again no stale block is
    /// fetched over what is written there.
    ///
    /// # Errors
    /// [`HydrateError`] if the marks cannot be written.
    pub fn truncated(&self, len: u64) -> Result<(), HydrateError> {
        let first_beyond =
            usize::try_from(len.div_ceil(self.sidecar.block_bytes)).unwrap_or(usize::MAX);
        let s = self.lock();
        for index in first_beyond..self.have.len() {
            if self.have(index) == Some(Have::Missing) {
                self.set_have(&s, index, Have::Fetched);
            }
        }
        self.mark(&s)
    }

    /// Fills in the missing blocks of the next chunk that has some, reading its object once;
    /// returns the bytes written (0 once none is missing, and then the file is made ordinary:
    /// everything durable, the sidecars removed).
    ///
    /// # Errors
    /// [`HydrateError`].
    pub fn fill_next(&self) -> Result<u64, HydrateError> {
        if self.whole.load(Ordering::Acquire) {
            return Ok(0);
        }
        let Some(first) = (0..self.have.len()).find(|&i| self.have(i) == Some(Have::Missing))
        else {
            self.mark(&self.lock())?;
            self.make_whole()?;
            return Ok(0);
        };
        let (chunk, _) = self.sidecar.block_place(first);
        let Some(id) = self.sidecar.chunks.get(chunk) else {
            return Ok(0);
        };
        let len = usize::try_from(self.sidecar.chunk_len(chunk)).unwrap_or(0);
        let bytes = read_object(&self.sidecar.store, id, 0, len)?;
        let per_chunk =
            usize::try_from(self.sidecar.chunk_bytes / self.sidecar.block_bytes).unwrap_or(1);
        let block_bytes = usize::try_from(self.sidecar.block_bytes).unwrap_or(1);
        let mut written = 0;
        for (n, block) in bytes.chunks(block_bytes).enumerate() {
            let index = chunk * per_chunk + n;
            if self.have(index) == Some(Have::Missing) {
                self.install(index, block, id)?;
                written += block.len() as u64;
            }
        }
        Ok(written.max(1))
    }

    /// Removes the sidecars of a file whose blocks are all marked; from then on it is opened
    /// as an ordinary file.
    fn make_whole(&self) -> Result<(), HydrateError> {
        let mut files = registry();
        let _s = self.lock();
        let chunks = sidecar::chunks_path(&self.path);
        let local = |p: &Path| {
            let p = p.to_path_buf();
            move |e| HydrateError::Local(p, e)
        };
        // The chunk list first: without it the file is ordinary, whatever the marks say.
        std::fs::remove_file(&chunks).map_err(local(&chunks))?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(local(dir))?;
        }
        let have = sidecar::have_path(&self.path);
        std::fs::remove_file(&have).map_err(local(&have))?;
        self.whole.store(true, Ordering::Release);
        files.remove(&self.path);
        Ok(())
    }

    /// Fills the whole file in, at most `bytes_per_second`, until it is whole; a failure is
    /// logged through `failed` and retried (backing off to 30 s), since the foreground keeps
    /// fetching what it needs anyway.
    pub fn fill_all(&self, bytes_per_second: u64, mut failed: impl FnMut(&HydrateError)) {
        let started = Instant::now();
        let mut done: u64 = 0;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.fill_next() {
                Ok(0) => return,
                Ok(bytes) => {
                    done += bytes;
                    backoff = Duration::from_millis(100);
                    let due = Duration::from_secs_f64(done as f64 / bytes_per_second.max(1) as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                Err(e) => {
                    failed(&e);
                    if !self.path.exists() {
                        // The database was dropped.
                        return;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}

/// The block list the sidecar names, checked against its id and the file's block count.
fn block_list(s: &Sidecar) -> Result<Vec<[u8; 32]>, HydrateError> {
    let bytes = read_object(&s.store, &s.blocks, 0, s.block_count() * 32)?;
    if sidecar::chunk_id(&bytes) != s.blocks {
        return Err(HydrateError::Corrupt(object::name(&s.store, &s.blocks)));
    }
    Ok(bytes
        .chunks_exact(32)
        .map(|h| {
            let mut hash = [0u8; 32];
            hash.copy_from_slice(h);
            hash
        })
        .collect())
}

fn read_object(
    source: &Source,
    id: &str,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, HydrateError> {
    object::read(source, id, offset, len).map_err(|e| HydrateError::Fetch(e.object, e.error))
}

fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sidecar::{chunk_file, chunk_id, chunks_path, have_path};

    fn put(store: &Path, bytes: &[u8]) -> String {
        let id = chunk_id(bytes);
        let at = chunk_file(store, &id);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, bytes).unwrap();
        id
    }

    /// Stores `data` as chunks of 4 bytes (blocks of 2) in `store`, and leaves `file` lazily
    /// restored.
    fn lazily_restored(dir: &Path, data: &[u8]) -> PathBuf {
        let store = dir.join("store");
        let file = dir.join("data");
        let chunks = data.chunks(4).map(|c| put(&store, c)).collect();
        let mut list = Vec::new();
        crate::sidecar::push_block_hashes(&mut list, data, 2);
        let s = Sidecar {
            blocks: put(&store, &list),
            store: Source::Directory(store),
            size: data.len() as u64,
            chunk_bytes: 4,
            block_bytes: 2,
            chunks,
        };
        File::create(&file).unwrap().set_len(s.size).unwrap();
        std::fs::write(have_path(&file), vec![0u8; s.block_count()]).unwrap();
        std::fs::write(chunks_path(&file), s.encode()).unwrap();
        file
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lazy-vfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_fetch_only_their_chunks_and_the_fill_makes_an_ordinary_file() {
        let dir = tempdir("fill");
        let file = lazily_restored(&dir, b"abcdefghij");
        let lazy = LazyFile::open(&file, |_| {}).unwrap().unwrap();
        lazy.ensure(5, 2, false).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"\0\0\0\0efgh\0\0");
        assert_eq!(lazy.progress().missing, 3);
        // Only read: nothing marked on disk yet.
        assert_eq!(std::fs::read(have_path(&file)).unwrap(), [0, 0, 0, 0, 0]);
        lazy.ensure(0, 1, true).unwrap();
        assert_eq!(std::fs::read(have_path(&file)).unwrap(), [1, 0, 1, 1, 0]);
        lazy.fill_all(1 << 30, |e| panic!("{e}"));
        assert_eq!(std::fs::read(&file).unwrap(), b"abcdefghij");
        assert!(!chunks_path(&file).exists() && !have_path(&file).exists());
        assert!(lazy.progress().whole);
        assert!(LazyFile::open(&file, |_| {}).unwrap().is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corrupt_or_missing_chunk_is_an_error_naming_it_and_writes_nothing() {
        let dir = tempdir("corrupt");
        let file = lazily_restored(&dir, b"abcdefghij");
        let s = Sidecar::decode(&std::fs::read(chunks_path(&file)).unwrap()).unwrap();
        let Source::Directory(store) = &s.store else {
            unreachable!()
        };
        let second = chunk_file(store, &s.chunks[1]);
        std::fs::write(&second, b"eXgh").unwrap();
        let lazy = LazyFile::open(&file, |_| {}).unwrap().unwrap();
        let err = lazy.ensure(4, 1, false).unwrap_err();
        assert!(
            matches!(&err, HydrateError::Corrupt(p) if *p == second.display().to_string()),
            "{err}"
        );
        std::fs::remove_file(&second).unwrap();
        assert!(matches!(
            lazy.ensure(4, 1, false),
            Err(HydrateError::Fetch(..))
        ));
        assert_eq!(std::fs::read(&file).unwrap(), [0; 10]);
        registry().remove(&file);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn after_a_truncation_chunks_beyond_the_end_are_never_fetched() {
        let dir = tempdir("truncate");
        let file = lazily_restored(&dir, b"abcdefghij");
        let lazy = LazyFile::open(&file, |_| {}).unwrap().unwrap();
        lazy.truncating(5).unwrap();
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(5)
            .unwrap();
        lazy.truncated(5).unwrap();
        assert_eq!(std::fs::read(have_path(&file)).unwrap(), [0, 0, 1, 1, 1]);
        // The file grows again with new bytes; filling in must not bring "ij" back.
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .write_all_at(b"XY", 8)
            .unwrap();
        lazy.fill_all(1 << 30, |e| panic!("{e}"));
        assert_eq!(std::fs::read(&file).unwrap(), b"abcde\0\0\0XY");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_created_again_at_the_path_is_not_the_lazy_one() {
        let dir = tempdir("again");
        let file = lazily_restored(&dir, b"abcdefgh");
        let first = LazyFile::open(&file, |_| {}).unwrap().unwrap();
        // Dropped (sidecars and all) and created again, as DROP and CREATE DATABASE do.
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_file(chunks_path(&file)).unwrap();
        std::fs::write(&file, b"new").unwrap();
        assert!(LazyFile::open(&file, |_| {}).unwrap().is_none());
        drop(first);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_sidecar_that_cannot_be_read_is_an_error_not_an_ordinary_file() {
        let dir = tempdir("badsidecar");
        let file = lazily_restored(&dir, b"abcd");
        std::fs::write(chunks_path(&file), b"perceptron-lazy 9\n").unwrap();
        assert!(matches!(
            LazyFile::open(&file, |_| {}),
            Err(HydrateError::Sidecar(..))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
