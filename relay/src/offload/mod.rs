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

use crate::config::{ArchiveConfig, StoreUrl};

/// Opens the store `cfg` names. `file:///dir` is a local directory (created, mode 0700, when
/// missing); `s3://bucket/prefix` is S3 or, with `endpoint`, an S3-compatible server.
///
/// # Errors
/// A message naming what is wrong with the URL, the directory or the S3 settings.
pub fn open_store(cfg: &ArchiveConfig) -> Result<Arc<dyn ObjectStore>, String> {
    match StoreUrl::parse(&cfg.store)? {
        StoreUrl::File(path) => open_directory(&path),
        #[cfg(feature = "s3")]
        StoreUrl::S3(location) => s3::open(&location, &cfg.s3),
        #[cfg(not(feature = "s3"))]
        StoreUrl::S3(_) => Err(format!(
            "{:?}: this relay was built without the `s3` feature",
            cfg.store
        )),
    }
}

fn open_directory(path: &str) -> Result<Arc<dyn ObjectStore>, String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("{path}: {e}"))?;
    let store = LocalFileSystem::new_with_prefix(path)
        .map_err(|e| format!("{path}: {e}"))?
        // Every chunk and the manifest durable before the local copy is removed.
        .with_fsync(true);
    Ok(Arc::new(store))
}
