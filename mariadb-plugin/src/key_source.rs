//! The plugin's key ring: loaded from `perceptron_dual_key_file` at `init` (mode 0600 or
//! the plugin refuses to load) and reloaded when the file changes, so a key added for
//! rotation (architecture.md §3: computes first, then relays) is accepted without restarting
//! `mariadbd`. A file that changes into something invalid is refused with one error-log line
//! and the ring in use stays.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use authplugin::KeyRing;
use authplugin::key_file::{self, KeyFileError};

use crate::error_log::{self, Level};

/// What identifies one version of the file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

#[derive(Debug)]
struct Loaded {
    ring: Arc<KeyRing>,
    stamp: Option<FileStamp>,
}

/// A key ring that follows its file.
#[derive(Debug)]
pub struct KeySource {
    path: PathBuf,
    loaded: RwLock<Loaded>,
}

impl KeySource {
    /// Loads the ring.
    ///
    /// # Errors
    /// [`KeyFileError`] naming the file and the problem (missing, readable by others,
    /// malformed, no key).
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let stamp = FileStamp::of(path);
        let ring = key_file::load(path)?;
        Ok(Self {
            path: path.to_owned(),
            loaded: RwLock::new(Loaded {
                ring: Arc::new(ring),
                stamp,
            }),
        })
    }

    /// The file the ring comes from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ring to verify with now: the file is re-read first if it changed since it was last
    /// read (one `stat` per call).
    pub fn current(&self) -> Arc<KeyRing> {
        let stamp = FileStamp::of(&self.path);
        {
            let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
            if loaded.stamp == stamp {
                return Arc::clone(&loaded.ring);
            }
        }
        let mut loaded = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
        if loaded.stamp != stamp {
            // Recorded whatever the outcome, so a bad file is reported once, not per login.
            loaded.stamp = stamp;
            match key_file::load(&self.path) {
                Ok(ring) => {
                    error_log::write(Level::Note, &describe_reload(&ring, &self.path));
                    loaded.ring = Arc::new(ring);
                }
                Err(e) => error_log::write(
                    Level::Error,
                    &format!(
                        "key file changed but cannot be used ({e}); keeping the previous key ring"
                    ),
                ),
            }
        }
        Arc::clone(&loaded.ring)
    }
}

/// `loaded N keys (ids a, b) from PATH`.
#[must_use]
pub fn describe(ring: &KeyRing, path: &Path) -> String {
    let ids: Vec<&str> = ring.ids().map(authplugin::KeyId::as_str).collect();
    format!(
        "loaded {} key(s) ({}) from {}",
        ids.len(),
        ids.join(", "),
        path.display()
    )
}

fn describe_reload(ring: &KeyRing, path: &Path) -> String {
    format!("key file changed: {}", describe(ring, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use authplugin::{KeyId, PerceptronKey};
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "perceptron-dual-keys-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn key(id: &str) -> PerceptronKey {
        PerceptronKey::generate(KeyId::new(id).unwrap(), &mut rand::rngs::OsRng)
    }

    #[test]
    fn follows_the_file_and_keeps_the_old_ring_on_a_bad_change() {
        let d = dir();
        let path = d.join("k");
        key_file::append(&path, &key("one")).unwrap();
        let source = KeySource::load(&path).unwrap();
        assert_eq!(source.current().signing_key().id().as_str(), "one");

        key_file::append(&path, &key("two")).unwrap();
        let ring = source.current();
        assert_eq!(ring.signing_key().id().as_str(), "two");
        assert!(ring.get(&KeyId::new("one").unwrap()).is_some());

        // Readable by others: refused, the two-key ring stays.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(source.current().ids().count(), 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_a_world_readable_file_at_load() {
        let d = dir();
        let path = d.join("k");
        key_file::append(&path, &key("one")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = KeySource::load(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
