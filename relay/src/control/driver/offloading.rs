//! `[instance.offload]`: a driver wrapped so that a compute's data directory goes to the object
//! store once the instance has been paused for `after`, and comes back before the next start
//! (docs/offload.md). The data moves only while no compute exists: every start, adoption and
//! exit is seen here, and the wrapped driver's computes are numbered so the late exit of an
//! old one cannot release the data of the next.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use tokio_util::sync::CancellationToken;

pub use super::mover::{Mover, MoverError, Storage};
use super::{CapacityError, Driver, RunningCompute, WakeError};
use crate::capacity::Ccu;
use crate::future::BoxFuture;
use crate::ledger::Ledger;
use crate::offload::archive::{self, ArchiveError};
use lazy_vfs::sidecar::Source;

/// Why offloaded data could not be brought back before a start.
#[derive(Debug)]
enum RestoreError {
    /// The relay's own restore.
    Archive(archive::ArchiveError),
    /// The exec driver's `restore` command.
    Command(super::exec::CommandError),
    /// The exec driver's marker could not be removed after its restore.
    Marker(PathBuf, std::io::Error),
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Archive(e) => write!(f, "{e}"),
            Self::Command(e) => write!(f, "{e}"),
            Self::Marker(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

/// What an "offload now" did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadNow {
    /// The offload started.
    Started,
    /// An offload was already under way.
    UnderWay,
    /// The data was already in the store only.
    AlreadyOffloaded,
}

impl OffloadNow {
    /// Its name in the admin API's answer.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::UnderWay => "under_way",
            Self::AlreadyOffloaded => "already_offloaded",
        }
    }
}

/// Why an "offload now" was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadNowError {
    /// The instance has no `[instance.offload]`.
    NotConfigured,
    /// A compute runs or is frozen: its data is in use.
    ComputeExists,
}

impl std::fmt::Display for OffloadNowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotConfigured => "the instance has no [instance.offload]",
            Self::ComputeExists => {
                "a compute runs or is frozen; its data moves only once it has stopped \
                 (pause with stop, or wait for stop_after)"
            }
        })
    }
}

impl std::error::Error for OffloadNowError {}

/// What the wrapper and its computes share about one instance's data.
pub struct OffloadPlan {
    instance: String,
    mover: Mover,
    after: Duration,
    storage: Mutex<Storage>,
    /// The process driver's pid file: a compute recorded there and still alive (one a stop
    /// failed to end) keeps the data where it is.
    pid_file: Option<PathBuf>,
    /// Held while data moves, so a start waits for an offload to stop (or finish).
    moving: tokio::sync::Mutex<()>,
    /// Whether a compute may exist, changed under one lock with the scheduled offload.
    computes: Mutex<Computes>,
    /// Where storage is metered (`None` in tests that meter nothing).
    ledger: Option<Arc<Ledger>>,
    /// The last storage record written, (local, stored) bytes: an unchanged one is not
    /// written again.
    metered: Mutex<Option<(u64, u64)>>,
}

/// What [`OffloadPlan`] knows of its computes.
struct Computes {
    /// A compute may exist: started, adopted, or not yet known at relay start.
    computing: bool,
    /// The number of the latest compute: a compute's exit counts only if it is the latest.
    generation: u64,
    /// Cancels the scheduled (or running) offload.
    pending: Option<CancellationToken>,
}

impl OffloadPlan {
    /// The plan for `instance`'s data, moved by `mover` once paused for `after`.
    #[must_use]
    pub fn new(
        instance: &str,
        after: Duration,
        mover: Mover,
        pid_file: Option<PathBuf>,
        ledger: Option<Arc<Ledger>>,
    ) -> Arc<Self> {
        let storage = mover.on_disk();
        Arc::new(Self {
            instance: instance.to_owned(),
            mover,
            after,
            pid_file,
            storage: Mutex::new(storage),
            moving: tokio::sync::Mutex::new(()),
            computes: Mutex::new(Computes {
                computing: true,
                generation: 0,
                pending: None,
            }),
            ledger,
            metered: Mutex::new(None),
        })
    }

    /// Records in the ledger what the data takes now: the data directory's allocated bytes
    /// on the local disk, and `stored` bytes of an offloaded copy it depends on.
    async fn meter(&self, stored: u64) {
        // The exec driver's data is out of the relay's sight: not metered.
        let (Some(ledger), Mover::Archive { dir, .. }) = (&self.ledger, &self.mover) else {
            return;
        };
        let dir = dir.clone();
        let local = tokio::task::spawn_blocking(move || archive::allocated_bytes(&dir))
            .await
            .unwrap_or(0);
        {
            let mut metered = self.metered.lock().unwrap_or_else(PoisonError::into_inner);
            if *metered == Some((local, stored)) {
                return;
            }
            *metered = Some((local, stored));
        }
        if let Err(e) = ledger.record_storage(&self.instance, local, stored) {
            tracing::error!(instance = %self.instance, error = %e, ledger = %ledger.path().display(), "cannot append to the usage ledger");
        }
    }

    /// The stored bytes the data depends on while it is local: the offloaded copy while a
    /// lazily restored database still reads from it, else none.
    fn stored_while_local(&self) -> u64 {
        if self.storage() == Storage::Hydrating {
            self.metered
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .map_or(0, |(_, stored)| stored)
        } else {
            0
        }
    }

    /// Where the data is now (a lazily restored directory is local once the compute has
    /// filled every file in).
    #[must_use]
    pub fn storage(&self) -> Storage {
        let mut storage = self.storage.lock().unwrap_or_else(PoisonError::into_inner);
        if *storage == Storage::Hydrating
            && let Mover::Archive { dir, .. } = &self.mover
            && archive::lazy_sidecars(dir).is_empty()
        {
            *storage = Storage::Local;
        }
        *storage
    }

    fn set(&self, storage: Storage) {
        *self.storage.lock().unwrap_or_else(PoisonError::into_inner) = storage;
    }

    fn computes(&self) -> std::sync::MutexGuard<'_, Computes> {
        self.computes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A compute is about to exist: any offload stops; returns its number.
    fn computing(&self) -> u64 {
        let mut c = self.computes();
        c.computing = true;
        if let Some(token) = c.pending.take() {
            token.cancel();
        }
        c.generation += 1;
        c.generation
    }

    /// Compute `generation` is gone (or, `None`, none exists at relay start): the data may
    /// be offloaded after `after`, unless another compute starts first.
    fn gone(self: &Arc<Self>, generation: Option<u64>) {
        let mut c = self.computes();
        if generation.is_some_and(|g| g != c.generation) {
            return;
        }
        if !c.computing && c.pending.is_some() {
            // Already gone (a stop and the exit it causes both say so): its offload is
            // scheduled, perhaps sooner than `after` by an operator's request.
            return;
        }
        c.computing = false;
        self.schedule(c, self.after);
    }

    /// Schedules the offload `delay` from now in place of any scheduled before; `c` is the
    /// lock [`Self::computes`] held by the caller.
    fn schedule(self: &Arc<Self>, mut c: std::sync::MutexGuard<'_, Computes>, delay: Duration) {
        let token = CancellationToken::new();
        if let Some(old) = c.pending.replace(token.clone()) {
            old.cancel();
        }
        let scheduled = c.generation;
        drop(c);
        tokio::spawn(Arc::clone(self).offload_later(token, scheduled, delay));
    }

    /// An operator's "offload now" (`POST /v1/instances/<name>/offload`): the offload that
    /// would run `after` the last compute's end runs at once.
    ///
    /// # Errors
    /// [`OffloadNowError::ComputeExists`] while a compute runs or is frozen: its data is in
    /// use (pause it with `stop`, or wait for `stop_after`).
    pub fn offload_now(self: &Arc<Self>) -> Result<OffloadNow, OffloadNowError> {
        // Read before the lock below: it may look at the disk.
        let storage = self.storage();
        let c = self.computes();
        if c.computing {
            return Err(OffloadNowError::ComputeExists);
        }
        // An offload under way (it holds `moving` from before it checks that nothing started)
        // is left to finish: starting it again would throw away what it has sent.
        if storage == Storage::Offloading || self.moving.try_lock().is_err() {
            return Ok(OffloadNow::UnderWay);
        }
        if storage == Storage::Offloaded {
            return Ok(OffloadNow::AlreadyOffloaded);
        }
        self.schedule(c, Duration::ZERO);
        Ok(OffloadNow::Started)
    }

    /// Whether the offload scheduled after compute `scheduled` may still run: nothing
    /// started since.
    fn still_idle(&self, token: &CancellationToken, scheduled: u64) -> bool {
        let c = self.computes();
        !token.is_cancelled() && !c.computing && c.generation == scheduled
    }

    async fn offload_later(
        self: Arc<Self>,
        token: CancellationToken,
        scheduled: u64,
        delay: Duration,
    ) {
        // The compute is gone: what it left on disk is what is held until the next change.
        if self.mover.on_disk() != Storage::Offloaded {
            self.meter(self.stored_while_local()).await;
        }
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        // A start cancels the token, then waits for this lock before it restores and starts
        // its compute: no compute runs while an offload holds it.
        let _moving = self.moving.lock().await;
        if !self.still_idle(&token, scheduled) {
            return;
        }
        match &self.mover {
            Mover::Archive { dir, store, .. } => {
                if !dir.exists() {
                    return;
                }
                if self
                    .pid_file
                    .as_deref()
                    .is_some_and(super::process::recorded_compute_alive)
                {
                    tracing::warn!(instance = %self.instance, "a compute process recorded for this instance is still alive; its data is not offloaded");
                    return;
                }
                self.archive(store.as_ref(), dir, &token).await;
            }
            Mover::Commands {
                exec,
                offload,
                store,
                marker,
                ..
            } => {
                if marker.exists() {
                    return;
                }
                self.run_offload(exec, offload, store.as_ref(), marker)
                    .await;
            }
        }
    }

    /// The relay's offload of `dir` into `store`.
    async fn archive(&self, store: &dyn ObjectStore, dir: &Path, token: &CancellationToken) {
        self.set(Storage::Offloading);
        let started = Instant::now();
        tracing::info!(instance = %self.instance, "offloading the paused instance's data");
        let result =
            archive::offload(store, &self.instance, dir, crate::clock::now_ms(), token).await;
        // What the disk says, whatever happened.
        self.set(self.mover.on_disk());
        let ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(r) => {
                tracing::info!(
                    instance = %self.instance, files = r.files, bytes = r.bytes, chunks = r.chunks,
                    uploaded = r.transferred, ms, "offloaded: the data is in the store only"
                );
                self.meter(r.bytes).await;
            }
            Err(ArchiveError::Cancelled) => {
                tracing::info!(instance = %self.instance, ms, "offload stopped by a wake; the data stays local");
            }
            Err(e) => tracing::warn!(
                instance = %self.instance, error = %e, ms,
                "offload failed; the data stays local (tried again after the next pause)"
            ),
        }
    }

    /// The exec driver's `offload` command, with the marker written first. A wake that
    /// arrives meanwhile waits for it (the command is bounded by `command_timeout`), then
    /// runs `restore`.
    async fn run_offload(
        &self,
        exec: &super::exec::ExecDriver,
        offload: &[String],
        store: Option<&String>,
        marker: &Path,
    ) {
        if let Err(e) = write_marker(marker).await {
            tracing::warn!(instance = %self.instance, error = %e, marker = %marker.display(), "cannot write the offload marker; the data is not offloaded");
            return;
        }
        self.set(Storage::Offloading);
        let started = Instant::now();
        tracing::info!(instance = %self.instance, "offloading the paused instance's data (the offload command)");
        let result = exec
            .run_with_env("offload", offload, &Mover::env(&self.instance, store))
            .await;
        let ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(()) => {
                self.set(Storage::Offloaded);
                tracing::info!(instance = %self.instance, ms, "offloaded: the offload command succeeded; the restore command runs before the next start");
            }
            Err(e) => {
                // The command's contract: a failure leaves the data where it was.
                if let Err(remove) = remove_marker(marker).await {
                    tracing::warn!(instance = %self.instance, error = %remove, "cannot remove the offload marker; the restore command runs before the next start");
                }
                self.set(self.mover.on_disk());
                tracing::warn!(
                    instance = %self.instance, error = %e, ms,
                    "offload failed; the data stays local (tried again after the next pause)"
                );
            }
        }
    }

    /// Before a start (after [`Self::computing`]): waits for any offload to stop and brings
    /// offloaded data back.
    async fn prepare_start(&self) -> Result<(), WakeError> {
        let _moving = self.moving.lock().await;
        let restored = match &self.mover {
            Mover::Archive {
                dir, store, lazy, ..
            } => {
                let restored = self
                    .restore_archive(store.as_ref(), dir, lazy.as_ref())
                    .await;
                self.mover.serve_lazy_reads(&self.instance);
                restored
            }
            Mover::Commands {
                exec,
                restore,
                store,
                marker,
                ..
            } => {
                self.run_restore(exec, restore, store.as_ref(), marker)
                    .await
            }
        };
        restored.map_err(|e| {
            self.set(self.mover.on_disk());
            tracing::error!(
                instance = %self.instance, error = %e,
                "cannot restore the offloaded data; the compute is not started (it would find no data)"
            );
            WakeError::Driver(format!("restoring the offloaded data: {e}"))
        })
    }

    /// The relay's restore of `dir` (also what clears a crash's leftovers when not
    /// offloaded).
    async fn restore_archive(
        &self,
        store: &dyn ObjectStore,
        dir: &Path,
        lazy: Option<&Source>,
    ) -> Result<(), RestoreError> {
        if archive::is_offloaded(dir) {
            self.set(Storage::Restoring);
            tracing::info!(instance = %self.instance, "restoring the offloaded data before the start");
        }
        let started = Instant::now();
        let restored = archive::restore(store, &self.instance, dir, lazy)
            .await
            .map_err(RestoreError::Archive)?;
        self.set(self.mover.on_disk());
        if let Some(r) = restored {
            tracing::info!(
                instance = %self.instance, files = r.files, bytes = r.bytes,
                chunks = r.chunks, read = r.transferred, lazy_files = r.lazy_files,
                ms = started.elapsed().as_millis() as u64,
                "restored{}",
                if r.lazy_files > 0 { " (databases are read from the store as needed and filled in behind)" } else { "" }
            );
            self.meter(if r.lazy_files > 0 { r.bytes } else { 0 }).await;
        }
        Ok(())
    }

    /// The exec driver's `restore` command, when the marker says the data may be away; the
    /// marker is removed only after it succeeds.
    async fn run_restore(
        &self,
        exec: &super::exec::ExecDriver,
        restore: &[String],
        store: Option<&String>,
        marker: &Path,
    ) -> Result<(), RestoreError> {
        if !marker.exists() {
            return Ok(());
        }
        self.set(Storage::Restoring);
        tracing::info!(instance = %self.instance, "restoring the offloaded data before the start (the restore command)");
        let started = Instant::now();
        exec.run_with_env("restore", restore, &Mover::env(&self.instance, store))
            .await
            .map_err(RestoreError::Command)?;
        remove_marker(marker)
            .await
            .map_err(|e| RestoreError::Marker(marker.to_owned(), e))?;
        self.set(Storage::Local);
        tracing::info!(
            instance = %self.instance, ms = started.elapsed().as_millis() as u64,
            "restored (the restore command succeeded)"
        );
        Ok(())
    }
}

/// Writes the exec driver's offload marker durably (file and directory synced): once the
/// `offload` command may have moved anything, a crash must not forget it.
async fn write_marker(marker: &Path) -> std::io::Result<()> {
    let marker = marker.to_owned();
    tokio::task::spawn_blocking(move || {
        let dir = marker.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let file = std::fs::File::create(&marker)?;
        file.sync_all()?;
        std::fs::File::open(dir)?.sync_all()
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Removes the marker durably.
async fn remove_marker(marker: &Path) -> std::io::Result<()> {
    let marker = marker.to_owned();
    tokio::task::spawn_blocking(move || {
        match std::fs::remove_file(&marker) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        std::fs::File::open(marker.parent().unwrap_or(Path::new(".")))?.sync_all()
    })
    .await
    .map_err(std::io::Error::other)?
}

/// A driver whose computes' data is offloaded while none runs.
pub struct OffloadingDriver {
    /// The wrapped driver.
    pub inner: Box<dyn Driver>,
    /// The instance's data.
    pub plan: Arc<OffloadPlan>,
}

impl OffloadingDriver {
    fn watched(
        &self,
        compute: Box<dyn RunningCompute>,
        generation: u64,
    ) -> Box<dyn RunningCompute> {
        Box::new(Watched {
            inner: compute,
            plan: Arc::clone(&self.plan),
            generation,
        })
    }
}

impl Driver for OffloadingDriver {
    fn start(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async move {
            let generation = self.plan.computing();
            if let Err(e) = self.plan.prepare_start().await {
                self.plan.gone(Some(generation));
                return Err(e);
            }
            match self.inner.start(timeout).await {
                Ok(compute) => Ok(self.watched(compute, generation)),
                Err(e) => {
                    self.plan.gone(Some(generation));
                    Err(e)
                }
            }
        })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            let compute = self.inner.adopt().await?;
            let generation = self.plan.computing();
            self.plan.mover.serve_lazy_reads(&self.plan.instance);
            Some(self.watched(compute, generation))
        })
    }

    fn adopt_frozen(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            let compute = self.inner.adopt_frozen().await?;
            let generation = self.plan.computing();
            self.plan.mover.serve_lazy_reads(&self.plan.instance);
            Some(self.watched(compute, generation))
        })
    }

    fn idle(&self) {
        self.plan.gone(None);
    }

    fn storage(&self) -> Option<Storage> {
        Some(self.plan.storage())
    }

    fn offload_now(&self) -> Result<OffloadNow, OffloadNowError> {
        self.plan.offload_now()
    }
}

/// A compute of an [`OffloadingDriver`]: its stop or exit lets the data go.
struct Watched {
    inner: Box<dyn RunningCompute>,
    plan: Arc<OffloadPlan>,
    generation: u64,
}

impl RunningCompute for Watched {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let reason = self.inner.wait_exit().await;
            self.plan.gone(Some(self.generation));
            reason
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.stop().await;
            self.plan.gone(Some(self.generation));
        })
    }

    fn resize(&self, ccu: Ccu) -> BoxFuture<'_, Result<(), CapacityError>> {
        self.inner.resize(ccu)
    }

    fn cpu_usage(&self) -> BoxFuture<'_, Option<Duration>> {
        self.inner.cpu_usage()
    }

    fn freeze(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        self.inner.freeze()
    }

    fn thaw(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        self.inner.thaw()
    }

    fn pid(&self) -> Option<u32> {
        self.inner.pid()
    }

    fn take_opened(&self) -> Option<crate::compute_conn::OpenedConnection> {
        self.inner.take_opened()
    }
}
