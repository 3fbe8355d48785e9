//! Offloading a paused instance's data to object storage (`[instance.offload]`), and
//! restoring it before its compute starts again: [`archive`] moves a data directory,
//! [`manifest`] is what the store holds, [`gc`] deletes what no manifest needs,
//! [`range_server`] reads the store for a compute filling a database in, `s3` opens an S3
//! store. The control plane decides when (`control::driver::offloading`).

pub mod archive;
pub mod gc;
pub mod manifest;
pub mod range_server;
#[cfg(feature = "s3")]
mod s3;

use std::os::unix::fs::DirBuilderExt as _;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

use crate::config::store_url::StoreUrlError;
use crate::config::{ArchiveConfig, StoreUrl};

/// Why a store could not be opened.
#[derive(Debug)]
pub enum StoreError {
    /// `store` is not a store URL.
    Url(StoreUrlError),
    /// The local directory cannot be created.
    Directory {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// object_store refused the local directory.
    LocalStore {
        /// The directory.
        path: String,
        /// Its refusal.
        source: object_store::Error,
    },
    /// The S3 store cannot be opened.
    #[cfg(feature = "s3")]
    S3(s3::S3OpenError),
    /// An `s3://` URL, and this relay was built without the `s3` feature.
    #[cfg(not(feature = "s3"))]
    NoS3 {
        /// The URL.
        url: String,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(e) => write!(f, "{e}"),
            Self::Directory { path, source } => write!(f, "{path}: {source}"),
            Self::LocalStore { path, source } => write!(f, "{path}: {source}"),
            #[cfg(feature = "s3")]
            Self::S3(e) => write!(f, "{e}"),
            #[cfg(not(feature = "s3"))]
            Self::NoS3 { url } => {
                write!(f, "{url:?}: this relay was built without the `s3` feature")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// Opens the store `cfg` names. `file:///dir` is a local directory (created, mode 0700, when
/// missing); `s3://bucket/prefix` is S3 or, with `endpoint`, an S3-compatible server.
///
/// # Errors
/// [`StoreError`]: what is wrong with the URL, the directory or the S3 settings.
pub fn open_store(cfg: &ArchiveConfig) -> Result<Arc<dyn ObjectStore>, StoreError> {
    match StoreUrl::parse(&cfg.store).map_err(StoreError::Url)? {
        StoreUrl::File(path) => open_directory(&path),
        #[cfg(feature = "s3")]
        StoreUrl::S3(location) => s3::open(&location, &cfg.s3).map_err(StoreError::S3),
        #[cfg(not(feature = "s3"))]
        StoreUrl::S3(_) => Err(StoreError::NoS3 {
            url: cfg.store.clone(),
        }),
    }
}

fn open_directory(path: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| StoreError::Directory {
            path: path.to_owned(),
            source,
        })?;
    let store = LocalFileSystem::new_with_prefix(path)
        .map_err(|source| StoreError::LocalStore {
            path: path.to_owned(),
            source,
        })?
        // Every chunk and the manifest durable before the local copy is removed.
        .with_fsync(true);
    Ok(Arc::new(store))
}
