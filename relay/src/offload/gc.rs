//! Deleting what no manifest needs any more (`relay offload gc`, docs/offload.md "Garbage
//! collection"). Chunks are shared: an offload stores only the chunks the store does not hold
//! yet, whichever instance put them. So a chunk can be deleted only when no manifest that may
//! still be restored names it, and no offload in progress is about to name it.
//!
//! Which manifests may still be needed: each instance's newest (the one its relay's marker
//! names while it is offloaded), the one its last lazy restore reads from (`pins/<instance>`,
//! written by that restore: a later offload that failed after its manifest was put would
//! otherwise be the newest while the database still reads the older one's chunks), and every
//! manifest younger than `keep`. The others are deleted, then every chunk none of the kept
//! ones names and older than `keep`.
//!
//! The fence between a collection and offloads, both through the store alone (it is strongly
//! consistent: a local directory, S3):
//! - an offload first puts `inflight/<instance>-<nonce>`, then looks for `gc/lock`: if a live
//!   lock is there it removes its object and fails (tried again after the next pause);
//! - a collection creates `gc/lock` only if absent (a conditional put), then lists
//!   `inflight/`: if a live offload is there it removes its lock and deletes nothing.
//!
//! Whichever looks second sees the other: an offload that found no lock put its object before
//! the lock existed, so the collection that took the lock finds it. A lock or an inflight
//! object older than [`STALE`] was left by a process that died and no longer counts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use object_store::path::Path as Key;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};

use super::manifest::{self, Manifest};

/// The collection's lock.
const LOCK: &str = "gc/lock";
/// Where offloads in progress announce themselves.
const INFLIGHT: &str = "inflight";
/// `pins/<instance>`: the digest of the manifest its last lazy restore reads from.
const PINS: &str = "pins";
/// A lock or an inflight object this old was left by a process that died: an offload or a
/// collection takes minutes, not hours.
pub const STALE: Duration = Duration::from_secs(6 * 3600);

/// Why a collection or an offload's fence failed.
#[derive(Debug)]
pub enum GcError {
    /// Another collection holds the lock.
    Locked,
    /// The store refused or failed (the operation, the key).
    Store(String, object_store::Error),
    /// A manifest that cannot be read: nothing is deleted, since what it names is unknown.
    Unreadable(String),
}

impl std::fmt::Display for GcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Locked => write!(
                f,
                "a garbage collection is running on this store ({LOCK} is held)"
            ),
            Self::Store(key, e) => write!(f, "store object {key}: {e}"),
            Self::Unreadable(key) => write!(
                f,
                "manifest {key} cannot be read; nothing was deleted (what it names is unknown)"
            ),
        }
    }
}

impl std::error::Error for GcError {}

fn store_error(key: &str) -> impl FnOnce(object_store::Error) -> GcError + '_ {
    move |e| GcError::Store(key.to_owned(), e)
}

/// An offload's announcement; [`Fence::leave`] removes it.
#[derive(Debug)]
pub struct Fence {
    key: Key,
}

impl Fence {
    /// Announces an offload of `instance` and checks that no collection runs.
    ///
    /// # Errors
    /// [`GcError::Locked`] while a collection runs (the announcement is removed again), or
    /// the store's error.
    pub async fn enter(
        store: &dyn ObjectStore,
        instance: &str,
        now_ms: u64,
    ) -> Result<Self, GcError> {
        let key = format!("{INFLIGHT}/{instance}-{:016x}", rand::random::<u64>());
        let fence = Self {
            key: Key::from(key.as_str()),
        };
        store
            .put(
                &fence.key,
                PutPayload::from(now_ms.to_string().into_bytes()),
            )
            .await
            .map_err(store_error(&key))?;
        match store.head(&Key::from(LOCK)).await {
            Ok(lock) if !stale(&lock, now_ms) => {
                fence.leave(store).await;
                Err(GcError::Locked)
            }
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(fence),
            Err(e) => {
                fence.leave(store).await;
                Err(GcError::Store(LOCK.to_owned(), e))
            }
        }
    }

    /// Removes the announcement (a failure is logged: the object goes stale on its own).
    pub async fn leave(self, store: &dyn ObjectStore) {
        if let Err(e) = store.delete(&self.key).await {
            tracing::warn!(key = %self.key, error = %e, "cannot remove an offload's inflight object; it counts until it is stale");
        }
    }
}

/// Records that a lazily restored copy of `instance` reads from manifest `digest`, before the
/// compute may read it: a collection keeps that manifest and its chunks.
///
/// # Errors
/// The store's error (the restore then fails: nothing has started reading).
pub async fn pin(store: &dyn ObjectStore, instance: &str, digest: &str) -> Result<(), GcError> {
    let key = format!("{PINS}/{instance}");
    store
        .put(
            &Key::from(key.as_str()),
            PutPayload::from(digest.as_bytes().to_vec()),
        )
        .await
        .map(|_| ())
        .map_err(store_error(&key))
}

/// Removes `instance`'s pin once its data is offloaded again (the new manifest is the one
/// needed). Best effort: a pin left behind only keeps one manifest's chunks longer.
pub async fn unpin(store: &dyn ObjectStore, instance: &str) {
    let key = Key::from(format!("{PINS}/{instance}"));
    match store.delete(&key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => tracing::warn!(%key, error = %e, "cannot remove a lazy restore's pin"),
    }
}

fn stale(meta: &ObjectMeta, now_ms: u64) -> bool {
    let modified = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
    now_ms.saturating_sub(modified) > STALE.as_millis() as u64
}

/// What a collection did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Why nothing was deleted, if so (offloads in progress).
    pub skipped: Option<String>,
    /// Manifests kept.
    pub manifests_kept: usize,
    /// Manifests deleted.
    pub manifests_deleted: usize,
    /// Chunks (and block lists) kept.
    pub chunks_kept: usize,
    /// Chunks deleted.
    pub chunks_deleted: usize,
    /// Their bytes.
    pub bytes_deleted: u64,
}

/// Collects `store`: deletes manifests that can no longer be restored and the chunks no kept
/// manifest names, keeping anything younger than `keep`. `dry_run` deletes nothing (and
/// takes no lock).
///
/// # Errors
/// [`GcError`]; whatever was deleted before it was not needed.
pub async fn collect(
    store: &dyn ObjectStore,
    now_ms: u64,
    keep: Duration,
    dry_run: bool,
) -> Result<GcReport, GcError> {
    if !dry_run {
        lock(store, now_ms).await?;
    }
    let result = sweep(store, now_ms, keep, dry_run).await;
    if !dry_run && let Err(e) = store.delete(&Key::from(LOCK)).await {
        tracing::warn!(error = %e, "cannot remove {LOCK}; offloads wait until it is stale");
    }
    result
}

/// Takes the lock: created only if absent; a stale one is replaced once.
async fn lock(store: &dyn ObjectStore, now_ms: u64) -> Result<(), GcError> {
    let key = Key::from(LOCK);
    for _ in 0..2 {
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let body = PutPayload::from(now_ms.to_string().into_bytes());
        match store.put_opts(&key, body, create).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let held = store.head(&key).await.map_err(store_error(LOCK))?;
                if !stale(&held, now_ms) {
                    return Err(GcError::Locked);
                }
                tracing::warn!("replacing a stale {LOCK} (its collection died)");
                store.delete(&key).await.map_err(store_error(LOCK))?;
            }
            Err(e) => return Err(GcError::Store(LOCK.to_owned(), e)),
        }
    }
    Err(GcError::Locked)
}

async fn sweep(
    store: &dyn ObjectStore,
    now_ms: u64,
    keep: Duration,
    dry_run: bool,
) -> Result<GcReport, GcError> {
    let mut report = GcReport::default();
    let live: Vec<ObjectMeta> = list_all(store, INFLIGHT)
        .await?
        .into_iter()
        .filter(|o| !stale(o, now_ms))
        .collect();
    if !live.is_empty() {
        report.skipped = Some(format!(
            "{} offload(s) in progress; nothing deleted (run again later)",
            live.len()
        ));
        return Ok(report);
    }
    let keep_ms = keep.as_millis() as u64;
    let young = |created_ms: u64| now_ms.saturating_sub(created_ms) < keep_ms;

    let mut pinned: BTreeSet<String> = BTreeSet::new();
    for meta in list_all(store, PINS).await? {
        let key = meta.location.to_string();
        let instance = meta.location.filename().unwrap_or_default().to_owned();
        let digest = store
            .get(&meta.location)
            .await
            .map_err(store_error(&key))?
            .bytes()
            .await
            .map_err(store_error(&key))?;
        let digest = String::from_utf8_lossy(&digest).trim().to_owned();
        pinned.insert(manifest::manifest_key(&instance, &digest));
    }
    // Every manifest, by instance: (created, key, what it names).
    let mut by_instance: BTreeMap<String, Vec<(u64, Key, Vec<String>)>> = BTreeMap::new();
    for meta in list_all(store, "instances").await? {
        let key = meta.location.to_string();
        let (instance, digest) =
            manifest_parts(&key).ok_or_else(|| GcError::Unreadable(key.clone()))?;
        let bytes = store
            .get(&meta.location)
            .await
            .map_err(store_error(&key))?
            .bytes()
            .await
            .map_err(store_error(&key))?;
        let m = Manifest::decode(&bytes, &instance, &digest)
            .map_err(|_| GcError::Unreadable(key.clone()))?;
        let names = m
            .files
            .iter()
            .flat_map(|f| f.chunks.iter().chain(f.blocks.iter()).cloned())
            .collect();
        by_instance
            .entry(instance)
            .or_default()
            .push((m.created_ms, meta.location, names));
    }
    let mut named: BTreeSet<String> = BTreeSet::new();
    for manifests in by_instance.values_mut() {
        manifests.sort_by_key(|(created, key, _)| (*created, key.to_string()));
        let newest = manifests.len().saturating_sub(1);
        for (i, (created, key, names)) in manifests.iter().enumerate() {
            if i == newest || young(*created) || pinned.contains(key.as_ref()) {
                report.manifests_kept += 1;
                named.extend(names.iter().cloned());
            } else {
                report.manifests_deleted += 1;
                if !dry_run {
                    store.delete(key).await.map_err(store_error(key.as_ref()))?;
                }
            }
        }
    }
    for meta in list_all(store, "chunks").await? {
        let id = meta.location.filename().unwrap_or_default().to_owned();
        let modified = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
        if named.contains(&id) || young(modified) {
            report.chunks_kept += 1;
            continue;
        }
        report.chunks_deleted += 1;
        report.bytes_deleted += meta.size;
        if !dry_run {
            let key = meta.location.to_string();
            store
                .delete(&meta.location)
                .await
                .map_err(store_error(&key))?;
        }
    }
    Ok(report)
}

/// `instances/<instance>/<digest>.json` → (instance, digest).
fn manifest_parts(key: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix("instances/")?;
    let (instance, file) = rest.split_once('/')?;
    let digest = file.strip_suffix(".json")?;
    (manifest::manifest_key(instance, digest) == key)
        .then(|| (instance.to_owned(), digest.to_owned()))
}

/// Every object under `prefix`, walking its directories (`chunks/ab/...`) one level at a time.
async fn list_all(store: &dyn ObjectStore, prefix: &str) -> Result<Vec<ObjectMeta>, GcError> {
    let mut objects = Vec::new();
    let mut pending = vec![Key::from(prefix)];
    while let Some(dir) = pending.pop() {
        let listed = store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(store_error(dir.as_ref()))?;
        pending.extend(listed.common_prefixes);
        objects.extend(listed.objects);
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::offload::archive;
    use crate::offload::manifest::CHUNK_BYTES;

    const DAY_MS: u64 = 24 * 3600 * 1000;
    const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

    struct Root(PathBuf);

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A store, and a data directory holding a file of three chunks.
    fn setup(name: &str) -> (Root, Arc<dyn ObjectStore>, PathBuf) {
        let root = std::env::temp_dir().join(format!("relay-gc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let big: Vec<u8> = (0..3 * CHUNK_BYTES).map(|i| (i % 253) as u8).collect();
        std::fs::write(data.join("big"), &big).unwrap();
        let store =
            super::super::open_directory(&root.join("store").display().to_string()).unwrap();
        (Root(root), store, data)
    }

    fn objects(store_dir: &Path, under: &str) -> usize {
        let mut n = 0;
        let mut pending = vec![store_dir.join(under)];
        while let Some(d) = pending.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    pending.push(e.path());
                } else {
                    n += 1;
                }
            }
        }
        n
    }

    /// Offloaded, restored, one chunk changed, offloaded again: the first manifest and the
    /// chunk only it named go (once older than `keep`); the newest restores byte for byte.
    #[tokio::test]
    async fn a_collection_deletes_what_only_superseded_manifests_name() {
        let (root, store, data) = setup("sweep");
        let store_dir = root.0.join("store");
        let now = crate::clock::now_ms();
        let cancel = CancellationToken::new();
        archive::offload(store.as_ref(), "a", &data, now, &cancel)
            .await
            .unwrap();
        archive::restore(store.as_ref(), "a", &data, None)
            .await
            .unwrap();
        let mut big = std::fs::read(data.join("big")).unwrap();
        big[CHUNK_BYTES + 7] ^= 0xff;
        std::fs::write(data.join("big"), &big).unwrap();
        archive::offload(store.as_ref(), "a", &data, now + 1, &cancel)
            .await
            .unwrap();
        assert_eq!(objects(&store_dir, "instances"), 2);
        assert_eq!(objects(&store_dir, "chunks"), 4);

        // Younger than keep: nothing goes.
        let r = collect(store.as_ref(), now, KEEP, false).await.unwrap();
        assert_eq!((r.manifests_deleted, r.chunks_deleted), (0, 0), "{r:?}");

        // Eight days on, dry: reported, not deleted.
        let later = now + 8 * DAY_MS;
        let dry = collect(store.as_ref(), later, KEEP, true).await.unwrap();
        assert_eq!(
            (dry.manifests_deleted, dry.chunks_deleted),
            (1, 1),
            "{dry:?}"
        );
        assert_eq!(dry.bytes_deleted, CHUNK_BYTES as u64);
        assert_eq!(objects(&store_dir, "chunks"), 4);

        let r = collect(store.as_ref(), later, KEEP, false).await.unwrap();
        assert_eq!(
            (
                r.manifests_deleted,
                r.manifests_kept,
                r.chunks_deleted,
                r.chunks_kept
            ),
            (1, 1, 1, 3),
            "{r:?}"
        );
        assert_eq!(objects(&store_dir, "instances"), 1);
        assert_eq!(objects(&store_dir, "chunks"), 3);
        assert!(!store_dir.join(LOCK).exists(), "the lock is released");
        archive::restore(store.as_ref(), "a", &data, None)
            .await
            .unwrap();
        assert_eq!(std::fs::read(data.join("big")).unwrap(), big);
    }

    /// A manifest a lazy restore pinned is kept, newest or not, with its chunks.
    #[tokio::test]
    async fn a_pinned_manifest_is_kept_though_a_newer_one_exists() {
        let (_root, store, data) = setup("pin");
        let now = crate::clock::now_ms();
        let cancel = CancellationToken::new();
        archive::offload(store.as_ref(), "a", &data, now, &cancel)
            .await
            .unwrap();
        let digest = std::fs::read_to_string(archive::marker(&data)).unwrap();
        archive::restore(store.as_ref(), "a", &data, None)
            .await
            .unwrap();
        std::fs::write(data.join("big"), b"now small").unwrap();
        archive::offload(store.as_ref(), "a", &data, now + 1, &cancel)
            .await
            .unwrap();
        // As a lazy restore of the first leaves it when the second offload fails after its
        // manifest (a successful offload removes the pin).
        pin(store.as_ref(), "a", digest.trim()).await.unwrap();
        let r = collect(store.as_ref(), now + 8 * DAY_MS, KEEP, false)
            .await
            .unwrap();
        assert_eq!(
            (r.manifests_kept, r.manifests_deleted, r.chunks_deleted),
            (2, 0, 0),
            "{r:?}"
        );
    }

    /// The fence, both ways: a collection deletes nothing while an offload is announced, and
    /// an offload refuses to start while a collection holds the lock (a stale lock is taken
    /// over).
    #[tokio::test]
    async fn offloads_and_collections_exclude_each_other() {
        let (root, store, data) = setup("fence");
        let now = crate::clock::now_ms();
        let cancel = CancellationToken::new();
        archive::offload(store.as_ref(), "a", &data, now, &cancel)
            .await
            .unwrap();
        archive::restore(store.as_ref(), "a", &data, None)
            .await
            .unwrap();
        std::fs::write(data.join("big"), b"now small").unwrap();
        archive::offload(store.as_ref(), "a", &data, now + 1, &cancel)
            .await
            .unwrap();
        archive::restore(store.as_ref(), "a", &data, None)
            .await
            .unwrap();
        let later = now + 8 * DAY_MS;

        let fence = Fence::enter(store.as_ref(), "b", now).await.unwrap();
        let r = collect(store.as_ref(), now + 60_000, KEEP, false)
            .await
            .unwrap();
        assert!(r.skipped.is_some(), "{r:?}");
        assert_eq!((r.manifests_deleted, r.chunks_deleted), (0, 0));
        fence.leave(store.as_ref()).await;
        assert_eq!(objects(&root.0.join("store"), "inflight"), 0);

        // A live lock: the offload stops before it touches anything, the data stays.
        lock(store.as_ref(), now).await.unwrap();
        let refused = archive::offload(store.as_ref(), "a", &data, now + 2, &cancel).await;
        assert!(
            matches!(refused, Err(archive::ArchiveError::Collecting)),
            "{refused:?}"
        );
        assert!(data.join("big").is_file());
        assert!(matches!(
            collect(store.as_ref(), now, KEEP, false).await,
            Err(GcError::Locked)
        ));
        // Stale (its collection died hours ago): taken over.
        let r = collect(store.as_ref(), later, KEEP, false).await.unwrap();
        assert_eq!(r.skipped, None);
        assert_eq!(r.manifests_deleted, 1, "{r:?}");
        assert_eq!(r.chunks_deleted, 3, "{r:?}");
    }
}
