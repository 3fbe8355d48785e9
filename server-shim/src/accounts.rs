//! The account store: `DATA/accounts`, one account per line, holding only
//! password hashes (architecture.md §1: "an account store that keeps only password hashes").
//!
//! ```text
//! # comment
//! <name> <role> <credential> [generation=<16 hex>]
//! app    user   native=*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9,caching_sha2=<64 hex> generation=9f2c...
//! guest  user   empty generation=07d1...
//! root   admin  native=*...,caching_sha2=...
//! ```
//! `role` is `admin` (may run `CREATE/ALTER/DROP USER`) or `user`. `native` is
//! SHA1(SHA1(password)) in MySQL's `*HEX` form, `caching_sha2` is SHA256(SHA256(password)) in
//! hex; `empty` is an account with an empty password. A password is never written.
//! `generation` is random, drawn afresh whenever the account is created or its password set:
//! resumption tickets are bound to it, so an account dropped and created again, even with the
//! same password, opens none of the old one's sessions (a line without it, from an older
//! shim, gets one at its next password change).
//!
//! The file is mode `0600` and must stay so (a wider file is refused at load, as key files
//! are): a stage-2 hash plus one captured login is enough to impersonate a user. Every change
//! is atomic: write a temp file (created `0600`), fsync, rename over the old one, fsync the
//! directory. Read-modify-write cycles hold an exclusive lock on `DATA/accounts.lock`, so the
//! CLI and a running shim never lose each other's changes; the shim re-reads the file when it
//! changed on disk.

use core::fmt;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use authplugin::Credential;
use authplugin::caching_sha2::CachingSha2Digest;
use authplugin::native_password::NativeStage2;

/// The account file's name inside the data directory.
pub const ACCOUNTS_FILE: &str = "accounts";
/// The lock file serialising changes.
pub const LOCK_FILE: &str = "accounts.lock";
/// Longest account name.
pub const MAX_NAME_LEN: usize = 32;

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May manage accounts with SQL.
    Admin,
    /// Ordinary account.
    User,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::User => "user",
        }
    }
}

/// One account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Admin or ordinary.
    pub role: Role,
    /// The stored hashes.
    pub credential: Credential,
    /// Drawn afresh when the account is created or its password set ([`Self::new`]); `None`
    /// for an account written by an older shim.
    pub generation: Option<[u8; GENERATION_LEN]>,
}

/// Bytes of an account's generation.
pub const GENERATION_LEN: usize = 8;

impl Account {
    /// A new account (or a new password for one): a fresh random generation.
    #[must_use]
    pub fn new(role: Role, credential: Credential) -> Self {
        Self {
            role,
            credential,
            generation: Some(rand::random()),
        }
    }
}

/// Why the account store failed.
#[derive(Debug)]
pub enum AccountError {
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
    /// A line of the file is not a valid account.
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// The account name is not allowed.
    BadName,
    /// An account with this name exists already.
    Exists(String),
    /// No account has this name.
    NotFound(String),
}

impl fmt::Display for AccountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "account file {}: {source}", path.display()),
            Self::TooOpen { path, mode } => write!(
                f,
                "account file {} has mode {mode:04o}: it must not be accessible by group or \
                 others (run: chmod 600 {})",
                path.display(),
                path.display()
            ),
            Self::Invalid { path, line, what } => {
                write!(f, "account file {} line {line}: {what}", path.display())
            }
            Self::BadName => write!(
                f,
                "account names are 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -"
            ),
            Self::Exists(n) => write!(f, "account '{n}' already exists"),
            Self::NotFound(n) => write!(f, "no account '{n}'"),
        }
    }
}

impl std::error::Error for AccountError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Whether `name` is an allowed account name.
#[must_use]
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Accounts by name.
pub type Accounts = BTreeMap<String, Account>;

/// Formats the file content for `accounts`.
#[must_use]
pub fn encode(accounts: &Accounts) -> String {
    let mut out = String::from(HEADER);
    for (name, account) in accounts {
        let credential = match &account.credential {
            Credential::EmptyPassword => "empty".to_owned(),
            Credential::Hashed {
                native,
                caching_sha2,
            } => {
                let mut parts = Vec::new();
                if let Some(n) = native {
                    parts.push(format!("native={}", n.to_text()));
                }
                if let Some(c) = caching_sha2 {
                    parts.push(format!(
                        "caching_sha2={}",
                        authplugin::hex::encode(c.as_bytes())
                    ));
                }
                parts.join(",")
            }
        };
        let generation = account
            .generation
            .map(|g| format!(" generation={}", authplugin::hex::encode(&g)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{name} {} {credential}{generation}\n",
            account.role.as_str()
        ));
    }
    out
}

/// Parses the file content.
///
/// # Errors
/// [`AccountError::Invalid`] naming the first bad line.
pub fn decode(text: &str, path: &Path) -> Result<Accounts, AccountError> {
    let mut accounts = Accounts::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let invalid = |what| AccountError::Invalid {
            path: path.to_owned(),
            line: i + 1,
            what,
        };
        let mut fields = line.split_ascii_whitespace();
        let (Some(name), Some(role), Some(cred), generation, None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return Err(invalid(
                "expected <name> <role> <credential> [generation=<16 hex>]",
            ));
        };
        let generation = match generation.map(|g| g.strip_prefix("generation=")) {
            None => None,
            Some(hex) => Some(
                hex.and_then(authplugin::hex::decode_array)
                    .ok_or_else(|| invalid("bad generation"))?,
            ),
        };
        if !valid_name(name) {
            return Err(invalid("bad account name"));
        }
        let role = match role {
            "admin" => Role::Admin,
            "user" => Role::User,
            _ => return Err(invalid("role must be admin or user")),
        };
        let credential = if cred == "empty" {
            Credential::EmptyPassword
        } else {
            let mut native = None;
            let mut caching_sha2 = None;
            for part in cred.split(',') {
                match part.split_once('=') {
                    Some(("native", v)) if native.is_none() => {
                        native = Some(
                            NativeStage2::parse_text(v).map_err(|_| invalid("bad native hash"))?,
                        );
                    }
                    Some(("caching_sha2", v)) if caching_sha2.is_none() => {
                        caching_sha2 = Some(
                            authplugin::hex::decode_array(v)
                                .map(CachingSha2Digest::from_bytes)
                                .ok_or_else(|| invalid("bad caching_sha2 hash"))?,
                        );
                    }
                    _ => return Err(invalid("bad credential")),
                }
            }
            Credential::Hashed {
                native,
                caching_sha2,
            }
        };
        if accounts
            .insert(
                name.to_owned(),
                Account {
                    role,
                    credential,
                    generation,
                },
            )
            .is_some()
        {
            return Err(invalid("duplicate account name"));
        }
    }
    Ok(accounts)
}

const HEADER: &str = "\
# Perceptron server-shim accounts: <name> <role> <credential> generation=<hex>. Only hashes.
# native = SHA1(SHA1(pw)) as *HEX; caching_sha2 = SHA256(SHA256(pw)) as hex. Keep mode 0600.
";

/// Identity of the file's last version we read, to notice changes made by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

/// The account file of one data directory, with an in-memory copy.
#[derive(Debug)]
pub struct AccountStore {
    dir: PathBuf,
    cache: Mutex<(Option<Stamp>, Accounts)>,
}

impl AccountStore {
    /// Opens the store of `data_dir` and reads it (a missing file is an empty store).
    ///
    /// # Errors
    /// [`AccountError`] if the file is unreadable, too open or invalid.
    pub fn open(data_dir: &Path) -> Result<Self, AccountError> {
        let store = Self {
            dir: data_dir.to_owned(),
            cache: Mutex::new((None, Accounts::new())),
        };
        store.refresh()?;
        Ok(store)
    }

    /// The account file's path.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.dir.join(ACCOUNTS_FILE)
    }

    fn io_err(&self, source: io::Error) -> AccountError {
        AccountError::Io {
            path: self.path(),
            source,
        }
    }

    /// Re-reads the file if it changed since the last read.
    fn refresh(&self) -> Result<(), AccountError> {
        let path = self.path();
        let stamp = match fs::metadata(&path) {
            Ok(m) => {
                let mode = m.mode() & 0o7777;
                if mode & 0o077 != 0 {
                    return Err(AccountError::TooOpen { path, mode });
                }
                Some(Stamp {
                    ino: m.ino(),
                    len: m.len(),
                    mtime: m.modified().ok(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.io_err(e)),
        };
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.0 == stamp && stamp.is_some() {
            return Ok(());
        }
        let accounts = match stamp {
            Some(_) => decode(
                &fs::read_to_string(&path).map_err(|e| self.io_err(e))?,
                &path,
            )?,
            None => Accounts::new(),
        };
        *cache = (stamp, accounts);
        Ok(())
    }

    /// The account called `name`, from the current file.
    ///
    /// # Errors
    /// [`AccountError`] if the file changed and cannot be read.
    pub fn get(&self, name: &str) -> Result<Option<Account>, AccountError> {
        self.refresh()?;
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(cache.1.get(name).cloned())
    }

    /// Every account, from the current file.
    ///
    /// # Errors
    /// [`AccountError`] if the file cannot be read.
    pub fn list(&self) -> Result<Accounts, AccountError> {
        self.refresh()?;
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(cache.1.clone())
    }

    /// Applies `change` to the accounts and writes the result atomically, under the lock
    /// file. Blocking file I/O.
    ///
    /// # Errors
    /// What `change` returns, or [`AccountError`] on I/O failure.
    pub fn update(
        &self,
        change: impl FnOnce(&mut Accounts) -> Result<(), AccountError>,
    ) -> Result<(), AccountError> {
        fs::create_dir_all(&self.dir).map_err(|e| self.io_err(e))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(LOCK_FILE))
            .map_err(|e| self.io_err(e))?;
        lock.lock().map_err(|e| self.io_err(e))?;
        // Under the lock, read the newest version, change it, write it.
        self.refresh()?;
        let mut accounts = self.list()?;
        change(&mut accounts)?;
        write_atomically(&self.path(), encode(&accounts).as_bytes()).map_err(|e| self.io_err(e))?;
        // Invalidate: the next read picks up the file just written (and its new stamp).
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).0 = None;
        self.refresh()?;
        drop(lock);
        Ok(())
    }

    /// Adds an account.
    ///
    /// # Errors
    /// [`AccountError::BadName`], [`AccountError::Exists`], or I/O failure.
    pub fn add(&self, name: &str, account: Account) -> Result<(), AccountError> {
        if !valid_name(name) {
            return Err(AccountError::BadName);
        }
        self.update(|accounts| {
            if accounts.contains_key(name) {
                return Err(AccountError::Exists(name.to_owned()));
            }
            accounts.insert(name.to_owned(), account);
            Ok(())
        })
    }

    /// Replaces an account's credential.
    ///
    /// # Errors
    /// [`AccountError::NotFound`], or I/O failure.
    pub fn set_credential(&self, name: &str, credential: Credential) -> Result<(), AccountError> {
        self.update(|accounts| {
            let account = accounts
                .get_mut(name)
                .ok_or_else(|| AccountError::NotFound(name.to_owned()))?;
            *account = Account::new(account.role, credential);
            Ok(())
        })
    }

    /// Removes an account.
    ///
    /// # Errors
    /// [`AccountError::NotFound`], or I/O failure.
    pub fn remove(&self, name: &str) -> Result<(), AccountError> {
        self.update(|accounts| {
            accounts
                .remove(name)
                .map(drop)
                .ok_or_else(|| AccountError::NotFound(name.to_owned()))
        })
    }
}

/// Writes `bytes` to `path` atomically: a `0600` temp file beside it, fsync, rename over
/// `path`, fsync the directory. A crash leaves the old file or the new one, never a mix.
///
/// # Errors
/// The I/O error; the temp file is removed on failure.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        // `mode` is filtered by the umask; make sure it is exactly 0600.
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "server-shim-accounts-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn user(pw: &[u8]) -> Account {
        Account {
            role: Role::User,
            credential: Credential::from_password(pw),
            generation: Some([7; GENERATION_LEN]),
        }
    }

    #[test]
    fn round_trips_accounts_through_the_file() {
        let dir = temp_dir("round-trip");
        let store = AccountStore::open(&dir).unwrap();
        store.add("app", user(b"s3cret-pw")).unwrap();
        store.add("guest", user(b"")).unwrap();
        store
            .add(
                "root",
                Account::new(Role::Admin, Credential::from_password(b"rootpw")),
            )
            .unwrap();
        let reopened = AccountStore::open(&dir).unwrap();
        assert_eq!(reopened.list().unwrap(), store.list().unwrap());
        assert_eq!(reopened.get("app").unwrap(), Some(user(b"s3cret-pw")));
        assert_eq!(
            reopened.get("guest").unwrap().unwrap().credential,
            Credential::EmptyPassword
        );
        assert_eq!(reopened.get("root").unwrap().unwrap().role, Role::Admin);
        let text = encode(&store.list().unwrap());
        assert_eq!(decode(&text, &dir).unwrap(), store.list().unwrap());
        // A line from an older shim has no generation; a new password draws one, and every
        // new account or password a different one.
        let old = decode("old user empty\n", &dir).unwrap();
        assert_eq!(old["old"].generation, None);
        store
            .set_credential("app", Credential::from_password(b"s3cret-pw"))
            .unwrap();
        let again = store.get("app").unwrap().unwrap();
        assert_eq!(again.credential, user(b"s3cret-pw").credential);
        assert_ne!(again.generation, user(b"s3cret-pw").generation);
        assert!(again.generation.is_some());
        let a = Account::new(Role::User, Credential::EmptyPassword);
        let b = Account::new(Role::User, Credential::EmptyPassword);
        assert_ne!(a.generation, b.generation);
        assert!(decode("x user empty generation=zz\n", &dir).is_err());
        assert!(decode("x user empty nope=00\n", &dir).is_err());
    }

    #[test]
    fn writes_file_with_mode_0600_and_without_the_password() {
        let dir = temp_dir("mode");
        let store = AccountStore::open(&dir).unwrap();
        store.add("app", user(b"hunter2-password")).unwrap();
        let meta = fs::metadata(store.path()).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("native=*"), "{text}");
        // No temp file is left behind.
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn replaces_file_atomically_by_rename() {
        let dir = temp_dir("atomic");
        let path = dir.join("f");
        write_atomically(&path, b"old").unwrap();
        let old_ino = fs::metadata(&path).unwrap().ino();
        write_atomically(&path, b"new").unwrap();
        // A new inode: the old content was never overwritten in place.
        assert_ne!(fs::metadata(&path).unwrap().ino(), old_ino);
        assert_eq!(fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn rejects_file_readable_by_others() {
        let dir = temp_dir("too-open");
        let store = AccountStore::open(&dir).unwrap();
        store.add("app", user(b"pw")).unwrap();
        fs::set_permissions(store.path(), fs::Permissions::from_mode(0o644)).unwrap();
        let err = AccountStore::open(&dir).unwrap_err();
        assert!(
            matches!(err, AccountError::TooOpen { mode: 0o644, .. }),
            "{err}"
        );
    }

    #[test]
    fn sees_changes_made_by_another_writer() {
        let dir = temp_dir("reload");
        let server = AccountStore::open(&dir).unwrap();
        assert_eq!(server.get("app").unwrap(), None);
        let cli = AccountStore::open(&dir).unwrap();
        cli.add("app", user(b"pw")).unwrap();
        assert_eq!(server.get("app").unwrap(), Some(user(b"pw")));
        cli.remove("app").unwrap();
        assert_eq!(server.get("app").unwrap(), None);
    }

    #[test]
    fn rejects_bad_names_duplicates_and_missing_accounts() {
        let dir = temp_dir("errors");
        let store = AccountStore::open(&dir).unwrap();
        assert!(matches!(
            store.add("a b", user(b"")),
            Err(AccountError::BadName)
        ));
        store.add("app", user(b"")).unwrap();
        assert!(matches!(
            store.add("app", user(b"")),
            Err(AccountError::Exists(_))
        ));
        assert!(matches!(
            store.remove("nobody"),
            Err(AccountError::NotFound(_))
        ));
    }

    #[test]
    fn rejects_malformed_lines_with_their_number() {
        for bad in [
            "app user",
            "app boss empty",
            "app user native=nothex",
            "app user caching_sha2=zz",
            "app user empty\napp user empty",
        ] {
            let err = decode(bad, Path::new("f")).unwrap_err().to_string();
            assert!(err.contains("line"), "{bad}: {err}");
        }
    }
}
