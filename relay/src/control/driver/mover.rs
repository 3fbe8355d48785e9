//! Where an instance's data is ([`Storage`]) and who moves it to the object store and back
//! ([`Mover`]): the relay itself, or the exec driver's commands.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;

use crate::offload::archive;
use crate::offload::range_server::RangeServer;
use lazy_vfs::sidecar::Source;

/// Where an instance's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// On the local disk.
    Local,
    /// Being copied to the store (the local copy is still the data).
    Offloading,
    /// In the store only.
    Offloaded,
    /// Being copied back before the compute starts.
    Restoring,
    /// Restored lazily: the compute runs and reads what it needs from the store while the rest
    /// is filled in behind it.
    Hydrating,
}

impl Storage {
    /// Where the data of `dir` is at rest, as the disk says (offloaded, local, or local with
    /// files still being filled in).
    fn on_disk(dir: &Path) -> Self {
        if archive::is_offloaded(dir) {
            Self::Offloaded
        } else if archive::lazy_sidecars(dir).is_empty() {
            Self::Local
        } else {
            Self::Hydrating
        }
    }

    /// Every place, for the metric's series.
    pub const NAMES: [&'static str; 5] =
        ["local", "offloading", "offloaded", "restoring", "hydrating"];

    /// Its name in status output and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Offloading => "offloading",
            Self::Offloaded => "offloaded",
            Self::Restoring => "restoring",
            Self::Hydrating => "hydrating",
        }
    }
}

/// Who moves the data, and how.
pub enum Mover {
    /// The relay: a data directory on its host, archived into a store (the process driver).
    Archive {
        /// The compute's data directory.
        dir: PathBuf,
        /// The store.
        store: Arc<dyn ObjectStore>,
        /// Where the compute reads a lazily restored database's chunks: the store's
        /// directory, or the relay's socket ([`Self::Archive::range_server`]); none when
        /// every file is restored before the start (`restore = "full"`).
        lazy: Option<Source>,
        /// Serves the socket, for a store the compute cannot read itself (S3).
        range_server: Option<RangeServer>,
    },
    /// The exec driver's `offload` and `restore` commands, wherever the data is. The relay
    /// keeps one file, `marker`: written (and synced) before `offload` runs, removed after a
    /// `restore` succeeds. While it exists every start runs `restore` first, so a relay that
    /// died while `offload` ran never starts a compute without its data.
    Commands {
        /// Runs the commands (its `command_timeout` and `cwd`).
        exec: Box<super::exec::ExecDriver>,
        /// `[instance.driver] offload`.
        offload: Vec<String>,
        /// `[instance.driver] restore`.
        restore: Vec<String>,
        /// `[instance.offload] store`, passed to both as `PERCEPTRON_OFFLOAD_STORE`.
        store: Option<String>,
        /// `<state_dir>/offloaded/<instance>`.
        marker: PathBuf,
    },
}

/// Why the relay's mover for an instance cannot be built.
#[derive(Debug)]
pub enum MoverError {
    /// The store cannot be opened.
    Store(crate::offload::StoreError),
    /// The socket a lazy restore's reads go through cannot be used.
    LazyReads(crate::offload::range_server::SocketError),
    /// Offload and restore commands, and a driver other than exec (the configuration's
    /// loader refuses it first).
    CommandsWithoutExec,
}

impl std::fmt::Display for MoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(e) => write!(f, "{e}"),
            Self::LazyReads(e) => write!(f, "{e}"),
            Self::CommandsWithoutExec => {
                f.write_str("the offload and restore commands need the exec driver")
            }
        }
    }
}

impl std::error::Error for MoverError {}

impl Mover {
    /// The relay's own mover for `instance`'s `cfg`; opens the store. A lazy restore from a
    /// store other than a directory is read through `<state_dir>/lazy/<instance>.sock`.
    ///
    /// # Errors
    /// [`MoverError`]: the store cannot be opened, or the socket's path is too long.
    pub fn archive(
        instance: &str,
        cfg: &crate::config::ArchiveConfig,
        state_dir: &Path,
    ) -> Result<Self, MoverError> {
        use crate::config::{RestoreMode, StoreUrl};
        let store = crate::offload::open_store(cfg).map_err(MoverError::Store)?;
        let url = StoreUrl::parse(&cfg.store)
            .map_err(|e| MoverError::Store(crate::offload::StoreError::Url(e)))?;
        let (lazy, range_server) = match (cfg.restore, url) {
            (RestoreMode::Full, _) => (None, None),
            (RestoreMode::Lazy, StoreUrl::File(dir)) => {
                (Some(Source::Directory(PathBuf::from(dir))), None)
            }
            (RestoreMode::Lazy, StoreUrl::S3(_)) => {
                let socket = state_dir.join("lazy").join(format!("{instance}.sock"));
                let server = RangeServer::new(
                    instance,
                    socket.clone(),
                    cfg.data_dir.clone(),
                    Arc::clone(&store),
                )
                .map_err(MoverError::LazyReads)?;
                (Some(Source::Socket(socket)), Some(server))
            }
        };
        Ok(Self::Archive {
            dir: cfg.data_dir.clone(),
            store,
            lazy,
            range_server,
        })
    }

    /// Makes sure the compute can read what a lazy restore left in the store: the relay's
    /// socket is served while any database is still being filled in (after a restore, and
    /// when a relay starts or adopts a compute mid-fill).
    pub(super) fn serve_lazy_reads(&self, instance: &str) {
        if let Self::Archive {
            range_server: Some(server),
            ..
        } = self
            && let Err(e) = server.ensure()
        {
            tracing::error!(instance, error = %e, "cannot serve the store to the compute; its reads of blocks not yet filled in fail");
        }
    }

    /// Where the data is at rest, as the disk says.
    pub(super) fn on_disk(&self) -> Storage {
        match self {
            Self::Archive { dir, .. } => Storage::on_disk(dir),
            Self::Commands { marker, .. } if marker.exists() => Storage::Offloaded,
            Self::Commands { .. } => Storage::Local,
        }
    }

    /// The commands' environment: the instance, and the store if one was named.
    pub(super) fn env(instance: &str, store: Option<&String>) -> Vec<(&'static str, String)> {
        let mut env = vec![("PERCEPTRON_INSTANCE", instance.to_owned())];
        if let Some(store) = store {
            env.push(("PERCEPTRON_OFFLOAD_STORE", store.clone()));
        }
        env
    }
}
