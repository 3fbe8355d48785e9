//! Offloading a paused instance's data to object storage (`[instance.offload]`), and
//! restoring it before its compute starts again: [`archive`] moves a data directory,
//! [`manifest`] is what the store holds, `s3` opens an S3 store. The control plane decides
//! when (`control::driver::offloading`).

pub mod archive;
pub mod manifest;
#[cfg(feature = "s3")]
mod s3;

use std::os::unix::fs::DirBuilderExt as _;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

use crate::config::ArchiveConfig;

/// Where a `store` URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `file:///dir`: a local directory.
    File(String),
    /// `s3://bucket/prefix`.
    S3(S3Location),
}

/// A bucket, and the key prefix under which this store's objects go (empty: the bucket's
/// root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket's name.
    pub bucket: String,
    /// Without leading or trailing `/`.
    pub prefix: String,
}

impl StoreUrl {
    /// Parses a `store` value.
    ///
    /// # Errors
    /// A message saying what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!(
                    "{url:?}: a file store needs an absolute path (file:///dir)"
                ));
            }
            return Ok(Self::File(path.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if !is_bucket_name(bucket) {
                return Err(format!(
                    "{url:?}: {bucket:?} is not an S3 bucket name (3 to 63 lowercase letters, \
                     digits, '.' and '-', starting and ending with a letter or digit)"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if prefix
                .split('/')
                .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
            {
                return Err(format!(
                    "{url:?}: the prefix may not hold empty, '.' or '..' parts"
                ));
            }
            return Ok(Self::S3(S3Location {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            }));
        }
        Err(format!(
            "{url:?}: not a store URL (file:///dir or s3://bucket/prefix)"
        ))
    }
}

fn is_bucket_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge(name.chars().next())
        && edge(name.chars().last())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_name_a_directory_or_a_bucket_and_prefix() {
        assert_eq!(
            StoreUrl::parse("file:///var/lib/objects"),
            Ok(StoreUrl::File("/var/lib/objects".into()))
        );
        assert_eq!(
            StoreUrl::parse("s3://my-bucket/perceptron/eu/"),
            Ok(StoreUrl::S3(S3Location {
                bucket: "my-bucket".into(),
                prefix: "perceptron/eu".into()
            }))
        );
        assert_eq!(
            StoreUrl::parse("s3://b.example"),
            Ok(StoreUrl::S3(S3Location {
                bucket: "b.example".into(),
                prefix: String::new()
            }))
        );
        for bad in [
            "file://relative/dir",
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://-edge",
            "s3://b_under/x",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
            "gs://bucket",
            "/var/lib/objects",
        ] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
