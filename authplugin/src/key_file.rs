//! Key files on disk: the only I/O in this crate, kept here so the relay and the compute
//! refuse the same unsafe files with the same messages.
//!
//! A key file holds secrets, so it must not be readable or writable by group or others
//! (mode `0600` or stricter, as `ssh` demands of private keys). New files are created with
//! mode `0600` atomically, never widened and then narrowed.

use core::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::identity::{IdentityError, KeyRing, PerceptronKey};

/// Why a key file could not be used.
#[derive(Debug)]
pub enum KeyFileError {
    /// The file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file's permissions let group or others at it.
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The content is not a valid key ring.
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: IdentityError,
    },
    /// A key with this id is already in the file.
    DuplicateKeyId {
        /// The file.
        path: PathBuf,
        /// The id.
        id: String,
    },
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "key file {}: {source}", path.display()),
            Self::TooOpen { path, mode } => write!(
                f,
                "key file {} has mode {mode:04o}: it must not be accessible by group or others \
                 (run: chmod 600 {})",
                path.display(),
                path.display()
            ),
            Self::Invalid { path, source } => write!(f, "key file {}: {source}", path.display()),
            Self::DuplicateKeyId { path, id } => {
                write!(
                    f,
                    "key file {} already has a key with id '{id}'",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for KeyFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Invalid { source, .. } => Some(source),
            Self::TooOpen { .. } | Self::DuplicateKeyId { .. } => None,
        }
    }
}

/// Reads a key ring from `path`, refusing a file that group or others can access.
///
/// # Errors
/// [`KeyFileError`] naming the file and what is wrong with it.
pub fn load(path: &Path) -> Result<KeyRing, KeyFileError> {
    let io_err = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = fs::metadata(path).map_err(io_err)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    let text = zeroize::Zeroizing::new(fs::read_to_string(path).map_err(io_err)?);
    KeyRing::parse(&text).map_err(|source| KeyFileError::Invalid {
        path: path.to_owned(),
        source,
    })
}

/// Adds `key` as the newest key of the file at `path`, creating the file with mode `0600`
/// when it does not exist. An existing file must pass the same checks as [`load`], and must
/// not already hold the key's id.
///
/// # Errors
/// [`KeyFileError`] naming the file and what is wrong.
pub fn append(path: &Path, key: &PerceptronKey) -> Result<(), KeyFileError> {
    let io_err = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    let exists = path.try_exists().map_err(io_err)?;
    if exists {
        let ring = load(path)?;
        if ring.get(key.id()).is_some() {
            return Err(KeyFileError::DuplicateKeyId {
                path: path.to_owned(),
                id: key.id().to_string(),
            });
        }
    }
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err)?;
    let mut text = String::new();
    if !exists {
        text.push_str(HEADER);
    }
    let line = zeroize::Zeroizing::new(key.to_key_file_line());
    text.push_str(&line);
    let result = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_err);
    zeroize::Zeroize::zeroize(&mut text);
    result
}

/// The comment block a new key file starts with.
const HEADER: &str = "\
# Perceptron key ring (HMAC-SHA256). One key per line: <key-id> <64 hex digits>.
# The last key is the newest and signs; every key verifies. Keep this file mode 0600.
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::KeyId;
    use std::os::unix::fs::PermissionsExt as _;

    fn tmp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("authplugin-keyfile-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir.join("perceptron.key")
    }

    #[test]
    fn creates_file_with_mode_0600_and_appends_newest_key() {
        let path = tmp("append");
        let k1 = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
        let k2 = PerceptronKey::generate(KeyId::new("k2").unwrap(), &mut rand::rngs::OsRng);
        append(&path, &k1).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        append(&path, &k2).unwrap();
        let ring = load(&path).unwrap();
        assert_eq!(ring.signing_key().id().as_str(), "k2");
        assert!(ring.get(k1.id()).is_some());
        assert!(matches!(
            append(&path, &k1),
            Err(KeyFileError::DuplicateKeyId { .. })
        ));
    }

    #[test]
    fn rejects_file_readable_by_others() {
        let path = tmp("mode");
        append(
            &path,
            &PerceptronKey::generate(KeyId::new("k").unwrap(), &mut rand::rngs::OsRng),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load(&path).unwrap_err();
        assert!(matches!(err, KeyFileError::TooOpen { mode: 0o644, .. }));
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn names_the_file_and_line_of_bad_content() {
        let path = tmp("bad");
        fs::write(&path, "k1 nothex\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains("perceptron.key") && err.contains("line 1"),
            "{err}"
        );
    }
}
