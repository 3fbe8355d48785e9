//! Offloading a paused instance's data to object storage (`[instance.offload]`), and
//! restoring it before its compute starts again: [`archive`] moves a data directory,
//! [`manifest`] is what the store holds. The control plane decides when
//! (`control::driver::offloading`).

pub mod archive;
pub mod manifest;

use std::os::unix::fs::DirBuilderExt as _;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

/// Opens the store a `store` URL names. `file:///dir` is a local directory (created, mode
/// 0700, when missing).
///
/// # Errors
/// A message naming what is wrong with the URL or the directory.
pub fn open_store(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let Some(path) = url.strip_prefix("file://") else {
        return Err(format!(
            "{url:?}: only file:///path stores are built in this version (s3:// and the others are planned)"
        ));
    };
    if !path.starts_with('/') {
        return Err(format!(
            "{url:?}: a file store needs an absolute path (file:///dir)"
        ));
    }
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
