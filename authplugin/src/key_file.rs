//! Secret files on disk: the only I/O in this crate, kept here so that every binary (the
//! relay's key file and admin token, the compute's key file) refuses the same unsafe files with
//! the same messages.
//!
//! A secret file must not be readable or writable by group or others (mode `0600` or
//! stricter, as `ssh` demands of private keys) and must belong to the process's effective user
//! or to root. [`read_secret_file`] opens the path once, without following a symlink at its
//! end (`O_NOFOLLOW`), and checks the type, owner and mode of the file it opened (`fstat`), so
//! nothing can be swapped in between the check and the read. New key files are created with
//! mode `0600` atomically, never widened and then narrowed.

use core::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use zeroize::Zeroizing;

/// Largest secret file read: key rings and tokens are a few hundred bytes.
pub const MAX_SECRET_FILE_BYTES: u64 = 1024 * 1024;

/// Why a secret file could not be read.
#[derive(Debug)]
pub enum SecretFileError {
    /// The file could not be opened or read.
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
    /// The file is larger than [`MAX_SECRET_FILE_BYTES`] (or not UTF-8).
    Unusable {
        /// The file.
        path: PathBuf,
    },
    /// The path is a symbolic link (not followed) or not a regular file.
    NotARegularFile {
        /// The file.
        path: PathBuf,
    },
    /// The file belongs to another user than the process's effective user and root.
    WrongOwner {
        /// The file.
        path: PathBuf,
        /// The file's owner.
        owner: u32,
        /// The process's effective uid.
        euid: u32,
    },
}

impl fmt::Display for SecretFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::TooOpen { path, mode } => write!(
                f,
                "{} has mode {mode:04o}: it must not be accessible by group or others \
                 (run: chmod 600 {})",
                path.display(),
                path.display()
            ),
            Self::Unusable { path } => write!(
                f,
                "{}: not a UTF-8 text file of at most {MAX_SECRET_FILE_BYTES} bytes",
                path.display()
            ),
            Self::NotARegularFile { path } => write!(
                f,
                "{}: a symbolic link or not a regular file; name the file itself",
                path.display()
            ),
            Self::WrongOwner { path, owner, euid } => write!(
                f,
                "{} belongs to uid {owner}: it must belong to this process's user (uid {euid}) \
                 or root (run: chown {euid} {})",
                path.display(),
                path.display()
            ),
        }
    }
}

impl std::error::Error for SecretFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::TooOpen { .. }
            | Self::Unusable { .. }
            | Self::NotARegularFile { .. }
            | Self::WrongOwner { .. } => None,
        }
    }
}

/// Reads a secret file, refusing a symlink, anything but a regular file, a file of another
/// user (root excepted), and one that group or others can access.
///
/// The path is opened once with `O_NOFOLLOW` (a symlink fails with `ELOOP`) and the checks
/// run on the open file, and the text is read into a buffer that is wiped when dropped (and
/// sized up front, so no reallocation leaves a copy behind).
///
/// # Errors
/// [`SecretFileError`] naming the file and what is wrong with it.
pub fn read_secret_file(path: &Path) -> Result<Zeroizing<String>, SecretFileError> {
    let io_err = |source| SecretFileError::Io {
        path: path.to_owned(),
        source,
    };
    let file = match OpenOptions::new()
        .read(true)
        // Non-blocking: opening a FIFO planted at the path must not hang the caller (the
        // type check below then refuses it).
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(SecretFileError::NotARegularFile {
                path: path.to_owned(),
            });
        }
        Err(e) => return Err(io_err(e)),
    };
    let meta = file.metadata().map_err(io_err)?;
    if !meta.file_type().is_file() {
        return Err(SecretFileError::NotARegularFile {
            path: path.to_owned(),
        });
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(SecretFileError::WrongOwner {
            path: path.to_owned(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretFileError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    let unusable = || SecretFileError::Unusable {
        path: path.to_owned(),
    };
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(unusable());
    }
    let capacity = usize::try_from(meta.len()).map_err(|_| unusable())?;
    let mut bytes = Zeroizing::new(Vec::with_capacity(capacity.saturating_add(1)));
    file.take(MAX_SECRET_FILE_BYTES.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if u64::try_from(bytes.len()).map_or(true, |n| n > MAX_SECRET_FILE_BYTES) {
        return Err(unusable());
    }
    match String::from_utf8(std::mem::take(&mut *bytes)) {
        Ok(text) => Ok(Zeroizing::new(text)),
        Err(e) => {
            // Wipe the bytes the failed conversion hands back.
            drop(Zeroizing::new(e.into_bytes()));
            Err(unusable())
        }
    }
}

use crate::identity::{IdentityError, KeyId, KeyRing, PerceptronKey};

/// Why a key file could not be used.
#[derive(Debug)]
pub enum KeyFileError {
    /// The file could not be written (or checked for existence).
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file could not be read, or group or others can access it.
    Unreadable(SecretFileError),
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
            Self::Unreadable(e) => write!(f, "key file {e}"),
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
            Self::Unreadable(e) => Some(e),
            Self::DuplicateKeyId { .. } => None,
        }
    }
}

/// Reads a key ring from `path`, refusing a file that group or others can access.
///
/// # Errors
/// [`KeyFileError`] naming the file and what is wrong with it.
pub fn load(path: &Path) -> Result<KeyRing, KeyFileError> {
    let text = read_secret_file(path).map_err(KeyFileError::Unreadable)?;
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
    let exists = check_appendable(path, key.id())?;
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

/// What tells one version of a file from another: a rename changes the inode, a write the
/// size or the modification time (nanoseconds), a `chmod` the change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStamp {
    /// The stamp of `path` itself (a symbolic link is not followed, as [`load`] refuses one).
    fn of(path: &Path) -> Option<Self> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// What [`LiveKeyRing::check`] did.
#[derive(Debug)]
pub enum Reload {
    /// The file is the version last examined; nothing was read.
    Unchanged,
    /// The file changed and its ring is now in use.
    Reloaded {
        /// The signing key before.
        previous: KeyId,
        /// The ring now in use.
        ring: Arc<KeyRing>,
    },
    /// The file changed but is unusable: the ring in use stays. The same version is not
    /// read again (one log line per bad version), a newer one is.
    Refused(KeyFileError),
}

/// A key ring that follows its key file: the binaries poll [`LiveKeyRing::check`] (every
/// second, and at once on SIGHUP), and a login signed with a key id the ring does not hold
/// checks too, so a compute that shares the relay's file never refuses a key the file already
/// has. Readers take the ring in use with [`LiveKeyRing::current`]; a reload swaps it whole.
#[derive(Debug)]
pub struct LiveKeyRing {
    /// The key file; `None` for a fixed ring (tests, fuzzing).
    path: Option<PathBuf>,
    current: RwLock<Arc<KeyRing>>,
    /// The version of the file last examined, accepted or refused. Its lock also makes
    /// checks one at a time.
    seen: Mutex<Option<FileStamp>>,
}

impl LiveKeyRing {
    /// Loads the ring from `path` and remembers which version of the file it came from.
    ///
    /// # Errors
    /// [`KeyFileError`] as [`load`].
    pub fn open(path: &Path) -> Result<Self, KeyFileError> {
        // Stamped before reading: a write during the read changes the stamp, so the next
        // check reads the file again.
        let stamp = FileStamp::of(path);
        let ring = load(path)?;
        Ok(Self {
            path: Some(path.to_owned()),
            current: RwLock::new(Arc::new(ring)),
            seen: Mutex::new(stamp),
        })
    }

    /// A ring without a file: [`LiveKeyRing::check`] never changes it.
    #[must_use]
    pub fn fixed(ring: KeyRing) -> Self {
        Self {
            path: None,
            current: RwLock::new(Arc::new(ring)),
            seen: Mutex::new(None),
        }
    }

    /// The key file, unless the ring is fixed.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The ring in use.
    #[must_use]
    pub fn current(&self) -> Arc<KeyRing> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads the key file again when it changed since it was last examined, or always with
    /// `force` (SIGHUP). A valid file replaces the ring in use; an invalid one is refused and
    /// the ring in use stays.
    pub fn check(&self, force: bool) -> Reload {
        let Some(path) = &self.path else {
            return Reload::Unchanged;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let stamp = FileStamp::of(path);
        if !force && stamp == *seen {
            return Reload::Unchanged;
        }
        *seen = stamp;
        match load(path) {
            Ok(ring) => {
                let ring = Arc::new(ring);
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                let previous = current.signing_key().id().clone();
                *current = Arc::clone(&ring);
                Reload::Reloaded { previous, ring }
            }
            Err(e) => Reload::Refused(e),
        }
    }
}

/// Whether a key with `id` can be added to the file at `path`: a missing file can be
/// created (`Ok(false)`); an existing one must pass [`load`] and not hold `id` (`Ok(true)`).
///
/// # Errors
/// [`KeyFileError`] naming the file and what is wrong.
pub fn check_appendable(path: &Path, id: &KeyId) -> Result<bool, KeyFileError> {
    let exists = path.try_exists().map_err(|source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    })?;
    if exists && load(path)?.get(id).is_some() {
        return Err(KeyFileError::DuplicateKeyId {
            path: path.to_owned(),
            id: id.to_string(),
        });
    }
    Ok(exists)
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
    use std::fs;
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
        assert!(matches!(
            err,
            KeyFileError::Unreadable(SecretFileError::TooOpen { mode: 0o644, .. })
        ));
        assert!(
            err.to_string().starts_with("key file ") && err.to_string().contains("chmod 600"),
            "{err}"
        );
    }

    #[test]
    fn reads_a_private_secret_file_and_refuses_an_open_one() {
        let path = tmp("secret").with_file_name("token");
        fs::write(&path, "s3cret-token\n").unwrap();
        for (mode, ok) in [(0o600, true), (0o400, true), (0o640, false), (0o604, false)] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            match read_secret_file(&path) {
                Ok(text) => assert!(ok && *text == "s3cret-token\n", "{mode:o}"),
                Err(SecretFileError::TooOpen { mode: m, .. }) => {
                    assert!(!ok && m == mode, "{mode:o}");
                }
                Err(e) => panic!("{mode:o}: {e}"),
            }
        }
        let missing = read_secret_file(&path.with_file_name("missing")).unwrap_err();
        assert!(matches!(missing, SecretFileError::Io { .. }), "{missing}");
    }

    #[test]
    fn refuses_an_oversized_or_binary_secret_file() {
        let path = tmp("big").with_file_name("token");
        let big = usize::try_from(MAX_SECRET_FILE_BYTES).unwrap() + 1;
        fs::write(&path, vec![b'a'; big]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            read_secret_file(&path),
            Err(SecretFileError::Unusable { .. })
        ));
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_secret_file(&path),
            Err(SecretFileError::Unusable { .. })
        ));
    }

    #[test]
    fn refuses_a_symlink_to_a_secret_file_and_a_fifo() {
        let path = tmp("symlink").with_file_name("token");
        fs::write(&path, "s3cret-token\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let link = path.with_file_name("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = read_secret_file(&link).unwrap_err();
        assert!(
            matches!(err, SecretFileError::NotARegularFile { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // A directory (or a FIFO: opened non-blocking, so this cannot hang) is refused too.
        let dir = path.with_file_name("dir");
        fs::create_dir(&dir).unwrap();
        assert!(matches!(
            read_secret_file(&dir),
            Err(SecretFileError::NotARegularFile { .. } | SecretFileError::Io { .. })
        ));
        assert!(read_secret_file(&path).is_ok());
    }

    #[test]
    fn refuses_a_secret_file_of_another_user() {
        let euid = nix::unistd::geteuid().as_raw();
        let path = tmp("owner").with_file_name("token");
        fs::write(&path, "s3cret-token\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().uid(), euid);
        assert!(read_secret_file(&path).is_ok());
        // Only root can give a file away; as root (this machine's test runs), hand it to
        // nobody and expect the refusal.
        if euid == 0 {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            let err = read_secret_file(&path).unwrap_err();
            assert!(
                matches!(
                    err,
                    SecretFileError::WrongOwner {
                        owner: 65534,
                        euid: 0,
                        ..
                    }
                ),
                "{err}"
            );
        }
        let e = SecretFileError::WrongOwner {
            path: "/k".into(),
            owner: 1001,
            euid: 1000,
        };
        assert_eq!(
            e.to_string(),
            "/k belongs to uid 1001: it must belong to this process's user (uid 1000) or root \
             (run: chown 1000 /k)"
        );
    }

    #[test]
    fn refuses_an_all_zero_key() {
        let path = tmp("zero");
        fs::write(&path, format!("k1 {}\n", "0".repeat(64))).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("all zero"), "{err}");
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

    fn ids(ring: &KeyRing) -> Vec<String> {
        ring.ids().map(|id| id.as_str().to_owned()).collect()
    }

    #[test]
    fn a_live_ring_follows_appends_and_atomic_replacements() {
        let path = tmp("live");
        let key = |id| PerceptronKey::generate(KeyId::new(id).unwrap(), &mut rand::rngs::OsRng);
        append(&path, &key("k1")).unwrap();
        let live = LiveKeyRing::open(&path).unwrap();
        assert!(matches!(live.check(false), Reload::Unchanged));
        append(&path, &key("k2")).unwrap();
        let Reload::Reloaded { previous, ring } = live.check(false) else {
            panic!("an appended key is read");
        };
        assert_eq!(previous.as_str(), "k1");
        assert_eq!(ids(&ring), ["k1", "k2"]);
        assert_eq!(live.current().signing_key().id().as_str(), "k2");
        assert!(matches!(live.check(false), Reload::Unchanged));
        // What `sed -i` does: a new file renamed over the old one (same size, new inode).
        let text = fs::read_to_string(&path).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.starts_with("k1 "))
            .map(|l| format!("{l}\n"))
            .collect();
        let new = path.with_extension("new");
        fs::write(&new, kept).unwrap();
        fs::set_permissions(&new, fs::Permissions::from_mode(0o600)).unwrap();
        fs::rename(&new, &path).unwrap();
        assert!(matches!(live.check(false), Reload::Reloaded { .. }));
        assert_eq!(ids(&live.current()), ["k2"]);
        assert!(
            matches!(live.check(true), Reload::Reloaded { .. }),
            "forced"
        );
    }

    #[test]
    fn a_live_ring_keeps_its_keys_when_the_new_file_is_invalid() {
        let path = tmp("live-bad");
        append(
            &path,
            &PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng),
        )
        .unwrap();
        let live = LiveKeyRing::open(&path).unwrap();
        fs::write(&path, "k2 nothex\n").unwrap();
        let Reload::Refused(e) = live.check(false) else {
            panic!("an invalid file is refused");
        };
        assert!(e.to_string().contains("line 1"), "{e}");
        assert_eq!(ids(&live.current()), ["k1"]);
        // The same bad version is not read (or logged) again.
        assert!(matches!(live.check(false), Reload::Unchanged));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(live.check(false), Reload::Refused(_)), "mode 0644");
        assert_eq!(ids(&live.current()), ["k1"]);
        fs::remove_file(&path).unwrap();
        assert!(
            matches!(live.check(false), Reload::Refused(_)),
            "a missing file"
        );
        assert_eq!(ids(&live.current()), ["k1"]);
    }

    #[test]
    fn a_fixed_ring_never_changes() {
        let ring = KeyRing::new(vec![PerceptronKey::generate(
            KeyId::new("k1").unwrap(),
            &mut rand::rngs::OsRng,
        )])
        .unwrap();
        let live = LiveKeyRing::fixed(ring);
        assert!(matches!(live.check(true), Reload::Unchanged));
        assert!(live.path().is_none());
    }
}
