//! Offloading a data directory no compute uses to an object store, and restoring it.
//!
//! Nothing is lost at any step (docs/offload.md, "Crash safety"):
//! - offload: every chunk is put (atomically, durably), then the manifest; both are read back
//!   and every chunk's SHA-256 checked; then the manifest's digest is written beside the data
//!   directory (the *marker*); only then is the directory renamed aside and removed. Until the
//!   marker exists the local directory is the data; once it does, the store is.
//! - restore: into `<dir>.restoring`, every chunk checked against its id as it is written,
//!   files and directories fsynced, then renamed into place, and the marker removed.
//!
//! A data directory missing with no marker is a new instance (its compute creates it); missing
//! with a marker must be restored, and a restore that cannot finish fails the wake, so a
//! compute never starts on an empty directory in place of offloaded data.

use std::path::{Path, PathBuf};

use lazy_vfs::sidecar::Source;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::gc;
use super::manifest::{self, BLOCK_BYTES, CHUNK_BYTES, FileEntry, Manifest};

/// What an offload or a restore moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Files in the data directory.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Their chunks.
    pub chunks: usize,
    /// Chunks sent to (offload) or read from (restore) the store; an offload skips the ones
    /// the store holds already.
    pub transferred: usize,
    /// Files a restore left in the store, to be read as needed (a lazy restore).
    pub lazy_files: usize,
}

/// The files a lazy restore leaves in the store: server-shim's databases
/// (`db/<name>/data.sqlite`), which it reads through its VFS (lazy_vfs). Every other file —
/// and every file of a compute that is not server-shim — is restored before the start.
pub const LAZY_FILE_NAME: &str = "data.sqlite";

/// Why an offload or a restore stopped. Each names what it was working on.
#[derive(Debug)]
pub enum ArchiveError {
    /// A local file or directory.
    Local(PathBuf, std::io::Error),
    /// An object in the store.
    Store(String, object_store::Error),
    /// A chunk whose bytes are not its id's.
    Corrupt(String),
    /// The manifest.
    Manifest(String, manifest::ManifestError),
    /// Something in the data directory that is neither a file nor a directory.
    Special(PathBuf),
    /// A wake asked for the compute: the offload stopped, the local copy is untouched.
    Cancelled,
    /// The data directory exists beside a marker, and is not the offloaded data.
    Conflict(PathBuf, PathBuf),
    /// A garbage collection runs on the store (`relay offload gc`): the offload waits for the
    /// next pause.
    Collecting,
}

impl std::fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Local(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Store(key, e) => write!(f, "store object {key}: {e}"),
            Self::Corrupt(key) => write!(f, "store object {key}: its bytes do not match its id"),
            Self::Manifest(key, e) => write!(f, "store object {key}: {e}"),
            Self::Special(p) => write!(
                f,
                "{}: not a regular file or directory (cannot offload it)",
                p.display()
            ),
            Self::Cancelled => f.write_str("cancelled by a wake"),
            Self::Collecting => {
                f.write_str("a garbage collection is running on the store (relay offload gc)")
            }
            Self::Conflict(dir, marker) => write!(
                f,
                "{} exists but is not the data {} says is offloaded (created since?); \
                 move it away to restore the offloaded data",
                dir.display(),
                marker.display()
            ),
        }
    }
}

impl std::error::Error for ArchiveError {}

/// The file beside `dir` that holds the SHA-256 of its offloaded manifest: while it exists
/// and `dir` does not, the data is in the store.
#[must_use]
pub fn marker(dir: &Path) -> PathBuf {
    sibling(dir, "offloaded")
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

/// Whether `dir`'s data is in the store (not on the local disk).
#[must_use]
pub fn is_offloaded(dir: &Path) -> bool {
    !dir.exists() && marker(dir).exists()
}

fn local(path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
    move |e| ArchiveError::Local(path.to_path_buf(), e)
}

/// Offloads `dir`, which no compute may use, as `instance`'s data; removes it once the store
/// holds a verified copy. Checks `cancel` between chunks.
///
/// # Errors
/// [`ArchiveError`]; `dir` is then as it was.
pub async fn offload(
    store: &dyn ObjectStore,
    instance: &str,
    dir: &Path,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<Report, ArchiveError> {
    // Announced before the first chunk is looked for, left after the manifest is verified:
    // a collection never deletes a chunk this offload is about to name (see `gc`).
    let fence = gc::Fence::enter(store, instance, now_ms)
        .await
        .map_err(|e| match e {
            gc::GcError::Store(key, e) => ArchiveError::Store(key, e),
            gc::GcError::Locked | gc::GcError::Unreadable(_) => ArchiveError::Collecting,
        })?;
    let result = offload_fenced(store, instance, dir, now_ms, cancel).await;
    fence.leave(store).await;
    result
}

async fn offload_fenced(
    store: &dyn ObjectStore,
    instance: &str,
    dir: &Path,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<Report, ArchiveError> {
    let (dirs, files) = list(dir).await?;
    let mut report = Report::default();
    let mut entries = Vec::with_capacity(files.len());
    for (rel, mode) in files {
        let path = dir.join(&rel);
        let mut file = tokio::fs::File::open(&path).await.map_err(local(&path))?;
        // A file still being filled in after a lazy restore: its missing blocks are the
        // store's already (and locally only holes).
        let lazy = LazyState::load(store, &path).await?;
        let local_len = file.metadata().await.map_err(local(&path))?.len();
        let with_blocks = Path::new(&rel).file_name() == Some(LAZY_FILE_NAME.as_ref());
        let mut block_list = Vec::new();
        let mut entry = FileEntry {
            path: rel,
            mode,
            size: 0,
            chunks: Vec::new(),
            blocks: None,
        };
        for index in 0.. {
            if cancel.is_cancelled() {
                return Err(ArchiveError::Cancelled);
            }
            let missing = lazy.as_ref().map(|l| l.missing(index, local_len));
            if let (Some(l), Some(Missing::All)) = (&lazy, &missing) {
                // Wholly in the store still: taken by its id, not read from the holes.
                let (id, len, hashes) = l.stored_chunk(index);
                let key = manifest::chunk_key(&id);
                match store.head(&Key::from(key.as_str())).await {
                    Ok(meta) if meta.size == len => {}
                    Ok(_) => return Err(ArchiveError::Corrupt(key)),
                    Err(e) => return Err(ArchiveError::Store(key, e)),
                }
                use tokio::io::AsyncSeekExt as _;
                file.seek(std::io::SeekFrom::Current(len as i64))
                    .await
                    .map_err(local(&path))?;
                block_list.extend_from_slice(hashes);
                entry.size += len;
                entry.chunks.push(id);
                report.chunks += 1;
                continue;
            }
            let mut chunk = read_chunk(&mut file).await.map_err(local(&path))?;
            if chunk.is_empty() {
                break;
            }
            if let (Some(l), Some(Missing::Some(blocks))) = (&lazy, missing) {
                // Partly local: the missing blocks' bytes come from the store's chunk.
                let stored = read_chunk_from(store, &l.stored_chunk(index).0).await?;
                for (at, len) in blocks {
                    if let (Some(to), Some(from)) =
                        (chunk.get_mut(at..at + len), stored.get(at..at + len))
                    {
                        to.copy_from_slice(from);
                    }
                }
            }
            let (id, hashes, chunk) = hashed_with_blocks(chunk, with_blocks).await?;
            block_list.extend_from_slice(&hashes);
            let len = chunk.len() as u64;
            report.transferred += put_unless_held(store, &id, chunk).await?;
            entry.size += len;
            entry.chunks.push(id);
            report.chunks += 1;
        }
        if with_blocks && entry.size > 0 {
            // Always put (it is small: 32 bytes a block), so a corrupt copy in the store is
            // replaced rather than trusted.
            let (id, _, list) = hashed_with_blocks(block_list, false).await?;
            let key = manifest::chunk_key(&id);
            store
                .put(&Key::from(key.as_str()), PutPayload::from(list))
                .await
                .map_err(|e| ArchiveError::Store(key, e))?;
            report.transferred += 1;
            entry.blocks = Some(id);
        }
        report.bytes += entry.size;
        entries.push(entry);
    }
    report.files = entries.len();
    let m = Manifest {
        format: manifest::FORMAT,
        instance: instance.to_owned(),
        created_ms: now_ms,
        dirs,
        files: entries,
    };
    let bytes = m.encode();
    let digest = manifest::hex_sha256(&bytes);
    let key = manifest::manifest_key(instance, &digest);
    store
        .put(&Key::from(key.as_str()), PutPayload::from(bytes))
        .await
        .map_err(|e| ArchiveError::Store(key.clone(), e))?;
    // Verified as a restore would read it: the manifest, then every chunk's bytes.
    let stored = read_manifest(store, instance, &digest).await?;
    for file in &stored.files {
        if let Some(blocks) = &file.blocks {
            read_chunk_from(store, blocks).await?;
        }
        for (index, id) in file.chunks.iter().enumerate() {
            if cancel.is_cancelled() {
                return Err(ArchiveError::Cancelled);
            }
            match read_chunk_from(store, id).await {
                Ok(_) => {}
                // A chunk an earlier offload left corrupt (the upload skips a chunk the store
                // holds at the right size): put again from the local copy, then checked.
                Err(ArchiveError::Corrupt(key)) => {
                    let path = dir.join(&file.path);
                    let bytes = local_chunk(&path, index).await?;
                    let (again, bytes) = hashed(bytes).await?;
                    if again != *id {
                        // The local file changed under the offload: not this manifest's data.
                        return Err(ArchiveError::Corrupt(key));
                    }
                    store
                        .put(&Key::from(key.as_str()), PutPayload::from(bytes))
                        .await
                        .map_err(|e| ArchiveError::Store(key.clone(), e))?;
                    read_chunk_from(store, id).await?;
                    report.transferred += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
    let marker = marker(dir);
    write_durably(&marker, digest.as_bytes()).await?;
    // The store holds the data now; the local copy goes, renamed aside first so a crash
    // never leaves a half-removed directory where the data was.
    let aside = sibling(dir, "removing");
    tokio::fs::rename(dir, &aside).await.map_err(local(dir))?;
    sync_parent(dir).await?;
    tokio::fs::remove_dir_all(&aside)
        .await
        .map_err(local(&aside))?;
    // No lazily restored copy reads an older manifest any more.
    gc::unpin(store, instance).await;
    Ok(report)
}

/// Puts `bytes` as object `id` unless the store holds it at its size; 1 if it was put.
async fn put_unless_held(
    store: &dyn ObjectStore,
    id: &str,
    bytes: Vec<u8>,
) -> Result<usize, ArchiveError> {
    let key = manifest::chunk_key(id);
    let location = Key::from(key.as_str());
    let held = match store.head(&location).await {
        Ok(meta) => meta.size == bytes.len() as u64,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => return Err(ArchiveError::Store(key, e)),
    };
    if held {
        return Ok(0);
    }
    store
        .put(&location, PutPayload::from(bytes))
        .await
        .map_err(|e| ArchiveError::Store(key, e))?;
    Ok(1)
}

/// Restores `instance`'s data into `dir` if it is offloaded ([`is_offloaded`]); does nothing
/// (and clears what an earlier offload or restore left) when `dir` is there or was never
/// offloaded. With `lazy` (where the compute reads the store: its directory, or the relay's
/// socket), the files named [`LAZY_FILE_NAME`] are left in the store: each is created at its
/// size with nothing in it, beside sidecars naming its chunks (every chunk checked to be in
/// the store first).
///
/// # Errors
/// [`ArchiveError`]; `dir` then still does not exist, and the store is untouched.
pub async fn restore(
    store: &dyn ObjectStore,
    instance: &str,
    dir: &Path,
    lazy: Option<&Source>,
) -> Result<Option<Report>, ArchiveError> {
    let marker = marker(dir);
    let restoring = sibling(dir, "restoring");
    remove_if_present(&sibling(dir, "removing")).await?;
    remove_if_present(&restoring).await?;
    let digest = match tokio::fs::read_to_string(&marker).await {
        Ok(d) => d.trim().to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ArchiveError::Local(marker, e)),
    };
    let m = read_manifest(store, instance, &digest).await?;
    if dir.exists() {
        // Both: an offload stopped between its marker and the removal, or a restore between
        // its rename and the marker's removal; then the directory is what the manifest lists.
        // Anything else (an empty directory a compute or an operator created) is not the data.
        if !matches_manifest(dir, &m).await? {
            return Err(ArchiveError::Conflict(dir.to_path_buf(), marker));
        }
        remove_if_present(&marker).await?;
        return Ok(None);
    }
    let result = write_tree(store, &m, &restoring, lazy).await;
    // A lazily restored database reads this manifest's chunks until it is filled in: pinned
    // before the compute can start, so no collection deletes them meanwhile.
    let result =
        match result {
            Ok(r) if r.lazy_files > 0 => gc::pin(store, instance, &digest)
                .await
                .map(|()| r)
                .map_err(|e| match e {
                    gc::GcError::Store(key, e) => ArchiveError::Store(key, e),
                    gc::GcError::Locked | gc::GcError::Unreadable(_) => ArchiveError::Collecting,
                }),
            other => other,
        };
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&restoring).await;
            return Err(e);
        }
    };
    tokio::fs::rename(&restoring, dir)
        .await
        .map_err(local(dir))?;
    sync_parent(dir).await?;
    tokio::fs::remove_file(&marker)
        .await
        .map_err(local(&marker))?;
    sync_parent(dir).await?;
    Ok(Some(report))
}

/// Whether `dir` holds exactly `m`'s directories and files, each of its size.
async fn matches_manifest(dir: &Path, m: &Manifest) -> Result<bool, ArchiveError> {
    let (dirs, files) = list(dir).await?;
    let mut sizes = Vec::with_capacity(files.len());
    for (rel, _) in &files {
        let path = dir.join(rel);
        sizes.push((
            rel.clone(),
            tokio::fs::metadata(&path)
                .await
                .map_err(local(&path))?
                .len(),
        ));
    }
    let listed: Vec<(String, u64)> = m.files.iter().map(|f| (f.path.clone(), f.size)).collect();
    Ok(dirs == m.dirs && sizes == listed)
}

/// Writes `m`'s directories and files under `root` (created, mode 0700), each chunk checked;
/// with `lazy`, [`LAZY_FILE_NAME`] files are left in that store ([`write_lazily`]).
async fn write_tree(
    store: &dyn ObjectStore,
    m: &Manifest,
    root: &Path,
    lazy: Option<&Source>,
) -> Result<Report, ArchiveError> {
    create_private_dir(root).await?;
    for d in &m.dirs {
        let path = root.join(d);
        create_private_dir(&path).await?;
    }
    let mut report = Report {
        files: m.files.len(),
        bytes: m.bytes(),
        ..Report::default()
    };
    for f in &m.files {
        let path = root.join(&f.path);
        let mut out = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode & 0o777)
            .open(&path)
            .await
            .map_err(local(&path))?;
        report.chunks += f.chunks.len();
        let name = Path::new(&f.path).file_name();
        match (lazy, &f.blocks) {
            (Some(source), Some(blocks)) if f.size > 0 && name == Some(LAZY_FILE_NAME.as_ref()) => {
                write_lazily(store, source, f, blocks, &path, &out).await?;
                report.lazy_files += 1;
            }
            _ => {
                // The next chunk is fetched and checked while this one is written.
                let mut ids = f.chunks.iter();
                let mut pending = match ids.next() {
                    Some(id) => Some(read_chunk_from(store, id).await?),
                    None => None,
                };
                while let Some(bytes) = pending.take() {
                    let next = ids.next();
                    let (written, fetched) = tokio::join!(out.write_all(&bytes), async {
                        match next {
                            Some(id) => read_chunk_from(store, id).await.map(Some),
                            None => Ok(None),
                        }
                    });
                    written.map_err(local(&path))?;
                    report.transferred += 1;
                    pending = fetched?;
                }
            }
        }
        out.sync_all().await.map_err(local(&path))?;
    }
    for d in m.dirs.iter().rev() {
        sync_dir(&root.join(d)).await?;
    }
    sync_dir(root).await?;
    Ok(report)
}

/// Makes `out` (empty, at `path`) a lazily restored copy of `f`: its size in holes, and the
/// sidecars naming its chunks and block list, read from `source`, none of them local yet.
/// Every one must be in the store at its size, so a missing one fails the wake now, naming it.
async fn write_lazily(
    store: &dyn ObjectStore,
    source: &Source,
    f: &FileEntry,
    blocks: &str,
    path: &Path,
    out: &tokio::fs::File,
) -> Result<(), ArchiveError> {
    let sidecar = lazy_vfs::sidecar::Sidecar {
        store: source.clone(),
        size: f.size,
        chunk_bytes: CHUNK_BYTES as u64,
        block_bytes: BLOCK_BYTES as u64,
        blocks: blocks.to_owned(),
        chunks: f.chunks.clone(),
    };
    let list_len = sidecar.block_count() as u64 * 32;
    let sized: Vec<(String, u64)> = f
        .chunks
        .iter()
        .enumerate()
        .map(|(index, id)| (id.clone(), sidecar.chunk_len(index)))
        .chain([(blocks.to_owned(), list_len)])
        .collect();
    match source {
        Source::Directory(objects) => check_files(objects, sized).await?,
        Source::Socket(_) => check_objects(store, sized).await?,
    }
    out.set_len(f.size).await.map_err(local(path))?;
    // Inside the restore's tree, whose directories are synced before it is renamed in.
    let have = lazy_vfs::sidecar::have_path(path);
    write_synced(&have, &vec![0u8; sidecar.block_count()]).await?;
    let chunks = lazy_vfs::sidecar::chunks_path(path);
    write_synced(&chunks, &sidecar.encode()).await
}

/// Checks that each object is a file of its size in the directory store `objects`, as the
/// compute will read it, in one blocking task (a thousand chunks take a millisecond).
async fn check_files(objects: &Path, sized: Vec<(String, u64)>) -> Result<(), ArchiveError> {
    let objects_dir = objects.to_path_buf();
    let absent = tokio::task::spawn_blocking(move || {
        sized.into_iter().find_map(|(id, len)| {
            let object = lazy_vfs::sidecar::chunk_file(&objects_dir, &id);
            match std::fs::metadata(&object) {
                Ok(m) if m.len() == len => None,
                Ok(_) => Some((id, None)),
                Err(e) => Some((id, Some(e))),
            }
        })
    })
    .await
    .map_err(|e| ArchiveError::Local(objects.to_path_buf(), std::io::Error::other(e)))?;
    match absent {
        None => Ok(()),
        Some((id, None)) => Err(ArchiveError::Corrupt(manifest::chunk_key(&id))),
        Some((id, Some(e))) => {
            let object = lazy_vfs::sidecar::chunk_file(objects, &id);
            Err(ArchiveError::Local(object, e))
        }
    }
}

/// How many of a lazy restore's objects are looked up in the store at once.
const HEADS_IN_FLIGHT: usize = 32;

/// Checks that each object is in `store` at its size (the relay will read it for the
/// compute), [`HEADS_IN_FLIGHT`] lookups at a time.
async fn check_objects(
    store: &dyn ObjectStore,
    sized: Vec<(String, u64)>,
) -> Result<(), ArchiveError> {
    use futures_util::StreamExt as _;
    let mut heads = futures_util::stream::iter(sized)
        .map(|(id, len)| async move {
            let key = manifest::chunk_key(&id);
            match store.head(&Key::from(key.as_str())).await {
                Ok(meta) if meta.size == len => Ok(()),
                Ok(_) => Err(ArchiveError::Corrupt(key)),
                Err(e) => Err(ArchiveError::Store(key, e)),
            }
        })
        .buffer_unordered(HEADS_IN_FLIGHT);
    while let Some(checked) = heads.next().await {
        checked?;
    }
    Ok(())
}

/// A file a lazy restore left partly in the store: its sidecar, which blocks are local, and
/// its block list.
struct LazyState {
    sidecar: lazy_vfs::sidecar::Sidecar,
    have: Vec<u8>,
    list: bytes::Bytes,
}

/// Which blocks of a chunk are still only in the store.
enum Missing {
    None,
    /// Every one: the chunk is the store's.
    All,
    /// These (offset in the chunk, length).
    Some(Vec<(usize, usize)>),
}

impl LazyState {
    /// The state of the file at `path` if it has a sidecar.
    async fn load(store: &dyn ObjectStore, path: &Path) -> Result<Option<Self>, ArchiveError> {
        use lazy_vfs::sidecar::{self, Sidecar};
        let chunks_path = sidecar::chunks_path(path);
        let bytes = match tokio::fs::read(&chunks_path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ArchiveError::Local(chunks_path, e)),
        };
        let bad =
            |what: String| ArchiveError::Local(chunks_path.clone(), std::io::Error::other(what));
        let s = Sidecar::decode(&bytes).map_err(|e| bad(e.to_string()))?;
        if s.chunk_bytes != CHUNK_BYTES as u64 {
            return Err(bad(format!(
                "chunks of {} bytes, not {CHUNK_BYTES}",
                s.chunk_bytes
            )));
        }
        let have_path = sidecar::have_path(path);
        let have = tokio::fs::read(&have_path)
            .await
            .map_err(local(&have_path))?;
        let list = read_chunk_from(store, &s.blocks).await?;
        if have.len() != s.block_count() || list.len() != s.block_count() * 32 {
            return Err(bad("the sidecars do not match the block list".into()));
        }
        Ok(Some(Self {
            sidecar: s,
            have,
            list,
        }))
    }

    fn blocks_per_chunk(&self) -> usize {
        usize::try_from(self.sidecar.chunk_bytes / self.sidecar.block_bytes).unwrap_or(1)
    }

    /// Which blocks of chunk `index` are missing locally, in a file now `len` long. A chunk
    /// the file has grown into since (its last one, short in the store) is never taken whole
    /// from the store: its new bytes are local.
    fn missing(&self, index: usize, len: u64) -> Missing {
        let per = self.blocks_per_chunk();
        let first = index * per;
        let last = (first + per).min(self.have.len());
        if first >= last {
            return Missing::None;
        }
        let block = usize::try_from(self.sidecar.block_bytes).unwrap_or(1);
        let missing: Vec<(usize, usize)> = (first..last)
            .filter(|&b| self.have.get(b) == Some(&0))
            .map(|b| {
                let len = usize::try_from(self.sidecar.block_len(b)).unwrap_or(0);
                ((b - first) * block, len)
            })
            .collect();
        let start = (index as u64).saturating_mul(self.sidecar.chunk_bytes);
        let local_extent = len
            .min(start.saturating_add(self.sidecar.chunk_bytes))
            .saturating_sub(start);
        if missing.is_empty() {
            Missing::None
        } else if missing.len() == last - first && local_extent == self.sidecar.chunk_len(index) {
            Missing::All
        } else {
            Missing::Some(missing)
        }
    }

    /// Chunk `index` as the store holds it: id, length, and its blocks' hashes.
    fn stored_chunk(&self, index: usize) -> (String, u64, &[u8]) {
        let per = self.blocks_per_chunk();
        let first = index * per;
        let last = (first + per).min(self.have.len());
        (
            self.sidecar.chunks.get(index).cloned().unwrap_or_default(),
            self.sidecar.chunk_len(index),
            self.list.get(first * 32..last * 32).unwrap_or_default(),
        )
    }
}

/// Bytes allocated on disk under `dir` (blocks, so a sparse file counts what it holds), the
/// directories included; 0 when `dir` does not exist. Unreadable entries are skipped: this
/// meters, it does not move data.
#[must_use]
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        if let Ok(meta) = std::fs::symlink_metadata(&d) {
            total = total.saturating_add(meta.blocks().saturating_mul(512));
        }
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    total
}

/// The sidecars of files under `dir` a lazy restore left partly in the store (none once the
/// compute has filled them in).
#[must_use]
pub fn lazy_sidecars(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(path),
                Ok(t) if t.is_file() && path.extension() == Some("lazy".as_ref()) => {
                    found.push(path);
                }
                _ => {}
            }
        }
    }
    found
}

async fn read_manifest(
    store: &dyn ObjectStore,
    instance: &str,
    digest: &str,
) -> Result<Manifest, ArchiveError> {
    let key = manifest::manifest_key(instance, digest);
    let bytes = get(store, &key).await?;
    Manifest::decode(&bytes, instance, digest).map_err(|e| ArchiveError::Manifest(key, e))
}

/// Chunk `id`'s bytes, checked against it.
async fn read_chunk_from(store: &dyn ObjectStore, id: &str) -> Result<bytes::Bytes, ArchiveError> {
    let key = manifest::chunk_key(id);
    let (got, bytes) = hashed(get(store, &key).await?).await?;
    if got != id {
        return Err(ArchiveError::Corrupt(key));
    }
    Ok(bytes)
}

/// `bytes` with their chunk id and (`blocks`) the SHA-256 of each of their [`BLOCK_BYTES`]
/// blocks, hashed on a blocking thread.
async fn hashed_with_blocks(
    bytes: Vec<u8>,
    blocks: bool,
) -> Result<(String, Vec<u8>, Vec<u8>), ArchiveError> {
    tokio::task::spawn_blocking(move || {
        let mut list = Vec::new();
        if blocks {
            lazy_vfs::sidecar::push_block_hashes(&mut list, &bytes, BLOCK_BYTES);
        }
        (manifest::chunk_id(&bytes), list, bytes)
    })
    .await
    .map_err(|e| ArchiveError::Local(PathBuf::from("(hashing)"), std::io::Error::other(e)))
}

/// `bytes` with their chunk id, hashed on a blocking thread (4 MiB take milliseconds).
async fn hashed<B: AsRef<[u8]> + Send + 'static>(bytes: B) -> Result<(String, B), ArchiveError> {
    tokio::task::spawn_blocking(move || (manifest::chunk_id(bytes.as_ref()), bytes))
        .await
        .map_err(|e| ArchiveError::Local(PathBuf::from("(hashing)"), std::io::Error::other(e)))
}

async fn get(store: &dyn ObjectStore, key: &str) -> Result<bytes::Bytes, ArchiveError> {
    let fail = |e| ArchiveError::Store(key.to_owned(), e);
    store
        .get(&Key::from(key))
        .await
        .map_err(fail)?
        .bytes()
        .await
        .map_err(fail)
}

/// Chunk `index` of the local file at `path`.
async fn local_chunk(path: &Path, index: usize) -> Result<Vec<u8>, ArchiveError> {
    use tokio::io::AsyncSeekExt as _;
    let mut file = tokio::fs::File::open(path).await.map_err(local(path))?;
    file.seek(std::io::SeekFrom::Start((index * CHUNK_BYTES) as u64))
        .await
        .map_err(local(path))?;
    read_chunk(&mut file).await.map_err(local(path))
}

/// Up to [`CHUNK_BYTES`] from `file`; empty at its end.
async fn read_chunk(file: &mut tokio::fs::File) -> std::io::Result<Vec<u8>> {
    let mut chunk = Vec::with_capacity(CHUNK_BYTES);
    (&mut *file)
        .take(CHUNK_BYTES as u64)
        .read_to_end(&mut chunk)
        .await?;
    Ok(chunk)
}

/// Every directory (parents first) and regular file (with its mode) below `dir`, relative.
async fn list(dir: &Path) -> Result<(Vec<String>, Vec<(String, u32)>), ArchiveError> {
    let root = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::PermissionsExt as _;
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        let mut pending = vec![root.clone()];
        while let Some(d) = pending.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&d)
                .map_err(local(&d))?
                .collect::<Result<_, _>>()
                .map_err(local(&d))?;
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for entry in entries {
                let path = entry.path();
                let meta = std::fs::symlink_metadata(&path).map_err(local(&path))?;
                let rel = path
                    .strip_prefix(&root)
                    .ok()
                    .and_then(Path::to_str)
                    .filter(|r| manifest::safe_relative(r))
                    .ok_or_else(|| ArchiveError::Special(path.clone()))?
                    .to_owned();
                if meta.is_dir() {
                    dirs.push(rel);
                    pending.push(path);
                } else if meta.is_file() {
                    // A lazy restore's sidecars are not data (see `still_in_store`).
                    if !lazy_vfs::sidecar::is_sidecar(&rel) {
                        files.push((rel, meta.permissions().mode() & 0o777));
                    }
                } else {
                    return Err(ArchiveError::Special(path));
                }
            }
        }
        dirs.sort();
        files.sort();
        Ok((dirs, files))
    })
    .await
    .unwrap_or_else(|_| Err(ArchiveError::Special(dir.to_path_buf())))
}

async fn create_private_dir(path: &Path) -> Result<(), ArchiveError> {
    tokio::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .await
        .map_err(local(path))
}

async fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
    write_synced(path, bytes).await?;
    sync_parent(path).await
}

/// Writes `path` and fsyncs it, not its directory (one inside a tree synced as a whole).
async fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .await
        .map_err(local(path))?;
    f.write_all(bytes).await.map_err(local(path))?;
    f.sync_all().await.map_err(local(path))
}

async fn remove_if_present(path: &Path) -> Result<(), ArchiveError> {
    let removed = if path.is_dir() {
        tokio::fs::remove_dir_all(path).await
    } else {
        tokio::fs::remove_file(path).await
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ArchiveError::Local(path.into(), e))
        }
        _ => Ok(()),
    }
}

async fn sync_parent(path: &Path) -> Result<(), ArchiveError> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent).await,
        None => sync_dir(Path::new(".")).await,
    }
}

async fn sync_dir(path: &Path) -> Result<(), ArchiveError> {
    tokio::fs::File::open(path)
        .await
        .map_err(local(path))?
        .sync_all()
        .await
        .map_err(local(path))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    struct Dirs {
        root: PathBuf,
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// A store and a data directory with nested files, one of three chunks.
    fn setup(name: &str) -> (Dirs, Arc<dyn ObjectStore>, PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let root =
            std::env::temp_dir().join(format!("relay-offload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data").join("shop");
        std::fs::create_dir_all(data.join("db/shop")).unwrap();
        std::fs::create_dir_all(data.join("empty")).unwrap();
        std::fs::write(data.join("accounts"), b"app admin x").unwrap();
        std::fs::set_permissions(
            data.join("accounts"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let big: Vec<u8> = (0..2 * CHUNK_BYTES + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(data.join("db/shop/data.sqlite"), &big).unwrap();
        std::fs::write(data.join("db/shop/empty-file"), b"").unwrap();
        let store =
            super::super::open_directory(&root.join("store").display().to_string()).unwrap();
        (Dirs { root }, store, data)
    }

    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
        use std::os::unix::fs::PermissionsExt as _;
        let mut out = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                if p.is_dir() {
                    out.push((rel, Vec::new(), 0));
                    pending.push(p);
                } else {
                    out.push((rel, std::fs::read(&p).unwrap(), mode));
                }
            }
        }
        out.sort();
        out
    }

    #[tokio::test]
    async fn an_offloaded_directory_comes_back_byte_for_byte_and_unchanged_chunks_stay_put() {
        let (_dirs, store, data) = setup("round-trip");
        let before = snapshot(&data);
        let cancel = CancellationToken::new();
        let sent = offload(store.as_ref(), "shop", &data, 1, &cancel)
            .await
            .unwrap();
        // Four chunks, and the database's block list.
        assert_eq!((sent.files, sent.chunks, sent.transferred), (3, 4, 5));
        assert!(
            is_offloaded(&data),
            "the local copy is gone, the marker is there"
        );
        let back = restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.bytes, sent.bytes);
        assert_eq!(snapshot(&data), before);
        assert!(!marker(&data).exists());
        // Again, with one file changed: only its chunk travels.
        std::fs::write(data.join("accounts"), b"app admin y").unwrap();
        let again = offload(store.as_ref(), "shop", &data, 2, &cancel)
            .await
            .unwrap();
        assert_eq!(
            again.transferred, 2,
            "the changed chunk, and the block list"
        );
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            std::fs::read(data.join("accounts")).unwrap(),
            b"app admin y"
        );
        // Nothing to restore when the directory is there.
        assert_eq!(
            restore(store.as_ref(), "shop", &data, None).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_lazy_restore_leaves_databases_in_the_store_and_offloads_again_without_reading_them()
    {
        use lazy_vfs::hydrate::LazyFile;
        use lazy_vfs::sidecar;
        let (dirs, store, data) = setup("lazy");
        let before = snapshot(&data);
        let cancel = CancellationToken::new();
        offload(store.as_ref(), "shop", &data, 1, &cancel)
            .await
            .unwrap();
        let objects = Source::Directory(dirs.root.join("store"));
        let back = restore(store.as_ref(), "shop", &data, Some(&objects))
            .await
            .unwrap()
            .unwrap();
        // The accounts file came back; the database's three chunks stayed in the store.
        assert_eq!((back.lazy_files, back.transferred, back.chunks), (1, 1, 4));
        let db = data.join("db/shop/data.sqlite");
        let size = 2 * CHUNK_BYTES + 123;
        assert_eq!(std::fs::read(&db).unwrap(), vec![0u8; size]);
        assert_eq!(
            std::fs::read(data.join("accounts")).unwrap(),
            b"app admin x"
        );
        assert_eq!(lazy_sidecars(&data), vec![sidecar::chunks_path(&db)]);
        // What the compute does: the middle chunk is read, then written.
        let lazy = LazyFile::open(&db, |_| {}).unwrap().unwrap();
        lazy.ensure(CHUNK_BYTES as u64 + 10, 1, true).unwrap();
        {
            use std::os::unix::fs::FileExt as _;
            let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
            f.write_all_at(b"changed", CHUNK_BYTES as u64 + 10).unwrap();
        }
        // The file grew past its stored end without a write into its last block (one SQLite
        // would track): the last chunk is still wholly in the store, but has new bytes.
        {
            use std::os::unix::fs::FileExt as _;
            let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
            f.write_all_at(b"grown", size as u64 + 20_000).unwrap();
        }
        // Paused again before the fill finished: only the changed chunks travel (their other
        // blocks taken from the store's copy), with the block list; the chunk still wholly
        // in the store is not read from the holes.
        let again = offload(store.as_ref(), "shop", &data, 2, &cancel)
            .await
            .unwrap();
        assert_eq!((again.chunks, again.transferred), (4, 3));
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        let mut expected: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        expected[CHUNK_BYTES + 10..CHUNK_BYTES + 17].copy_from_slice(b"changed");
        expected.resize(size + 20_000, 0);
        expected.extend_from_slice(b"grown");
        assert_eq!(std::fs::read(&db).unwrap(), expected);
        assert!(lazy_sidecars(&data).is_empty());
        assert_eq!(snapshot(&data).len(), before.len());
    }

    #[tokio::test]
    async fn a_lazy_restore_with_a_chunk_missing_fails_the_wake_naming_it() {
        let (dirs, store, data) = setup("lazy-missing");
        offload(store.as_ref(), "shop", &data, 1, &CancellationToken::new())
            .await
            .unwrap();
        let big: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
        let key = manifest::chunk_key(&manifest::chunk_id(&big));
        std::fs::remove_file(dirs.root.join("store").join(&key)).unwrap();
        // Checked in the directory the compute reads, or in the store the relay reads for it.
        for objects in [
            Source::Directory(dirs.root.join("store")),
            Source::Socket("/run/relay.sock".into()),
        ] {
            let err = restore(store.as_ref(), "shop", &data, Some(&objects))
                .await
                .unwrap_err();
            assert!(err.to_string().contains(&key), "{objects}: {err}");
            assert!(!data.exists() && is_offloaded(&data));
        }
    }

    #[tokio::test]
    async fn a_corrupt_or_missing_object_fails_the_restore_naming_it_and_restores_nothing() {
        let (dirs, store, data) = setup("corrupt");
        offload(store.as_ref(), "shop", &data, 1, &CancellationToken::new())
            .await
            .unwrap();
        let accounts = manifest::chunk_key(&manifest::chunk_id(b"app admin x"));
        let on_disk = dirs.root.join("store").join(&accounts);
        std::fs::write(&on_disk, b"app admin z").unwrap();
        let err = restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Corrupt(k) if *k == accounts),
            "{err}"
        );
        assert!(err.to_string().contains(&accounts), "{err}");
        assert!(!data.exists() && !sibling(&data, "restoring").exists());
        std::fs::remove_file(&on_disk).unwrap();
        let err = restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&accounts), "{err}");
        assert!(
            !data.exists(),
            "never an empty directory in place of the data"
        );
        // A manifest changed in the store is not trusted either.
        let digest = std::fs::read_to_string(marker(&data)).unwrap();
        let m = dirs
            .root
            .join("store")
            .join(manifest::manifest_key("shop", digest.trim()));
        let mut bytes = std::fs::read(&m).unwrap();
        bytes.push(b' ');
        std::fs::write(&m, bytes).unwrap();
        let err = restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ArchiveError::Manifest(_, manifest::ManifestError::Digest)
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_chunk_left_corrupt_in_the_store_is_put_again_by_the_next_offload() {
        let (dirs, store, data) = setup("heal");
        let before = snapshot(&data);
        offload(store.as_ref(), "shop", &data, 1, &CancellationToken::new())
            .await
            .unwrap();
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        // The same size, other bytes: the upload trusts it, the verification does not.
        let accounts = manifest::chunk_key(&manifest::chunk_id(b"app admin x"));
        std::fs::write(dirs.root.join("store").join(&accounts), b"app admin z").unwrap();
        let again = offload(store.as_ref(), "shop", &data, 2, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            again.transferred, 2,
            "only the corrupt chunk travels, and the block list (always put)"
        );
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snapshot(&data), before);
    }

    #[tokio::test]
    async fn a_cancelled_offload_leaves_the_local_copy_and_a_new_instance_has_nothing_to_restore() {
        let (_dirs, store, data) = setup("cancel");
        let before = snapshot(&data);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = offload(store.as_ref(), "shop", &data, 1, &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, ArchiveError::Cancelled));
        assert_eq!(snapshot(&data), before);
        assert!(!marker(&data).exists());
        let fresh = data.with_file_name("never-offloaded");
        assert_eq!(
            restore(store.as_ref(), "new", &fresh, None).await.unwrap(),
            None
        );
        assert!(!fresh.exists());
    }

    #[tokio::test]
    async fn what_a_crash_left_is_cleared_and_the_right_copy_wins() {
        let (_dirs, store, data) = setup("crash");
        let before = snapshot(&data);
        offload(store.as_ref(), "shop", &data, 1, &CancellationToken::new())
            .await
            .unwrap();
        // A restore that died half way, and a removal that died half way.
        std::fs::create_dir_all(sibling(&data, "restoring").join("db")).unwrap();
        std::fs::create_dir_all(sibling(&data, "removing").join("db")).unwrap();
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snapshot(&data), before);
        assert!(!sibling(&data, "restoring").exists() && !sibling(&data, "removing").exists());
        // An offload that died after its marker, before the local copy went: the local copy
        // is the data, the marker is cleared.
        offload(store.as_ref(), "shop", &data, 2, &CancellationToken::new())
            .await
            .unwrap();
        let digest = std::fs::read(marker(&data)).unwrap();
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        std::fs::write(marker(&data), &digest).unwrap();
        assert_eq!(
            restore(store.as_ref(), "shop", &data, None).await.unwrap(),
            None
        );
        assert!(!marker(&data).exists());
        assert_eq!(snapshot(&data), before);
        // An empty directory made while the data was offloaded (a compute started by hand):
        // not the data; the marker stays, and the restore says what to do.
        offload(store.as_ref(), "shop", &data, 3, &CancellationToken::new())
            .await
            .unwrap();
        std::fs::create_dir(&data).unwrap();
        let err = restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap_err();
        assert!(matches!(err, ArchiveError::Conflict(..)), "{err}");
        assert!(marker(&data).exists());
        std::fs::remove_dir(&data).unwrap();
        restore(store.as_ref(), "shop", &data, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snapshot(&data), before);
    }
}
