//! Instances defined one per instance file (`<name>.toml`), added, changed and removed while
//! the relay runs (docs/instances.md): in `relay.instances_dir`, or for a fleet in its store
//! (`<prefix>/definitions/<name>.toml`, the same for every relay). That place is the one where
//! these definitions live: the admin API writes and deletes them there, and a scan (every
//! [`SCAN_EVERY`], on SIGHUP, and at once after an admin request) makes the running set
//! follow it:
//! - a new file starts its instance;
//! - a file gone removes its instance: no new login reaches it, its open connections end on
//!   their own (`relay instances remove --force` cuts them), then its compute is stopped;
//! - a changed file is a removal of the old definition, then the new one starts once the old
//!   one has drained (two definitions never drive one compute).
//!
//! A file that cannot be used (bad TOML, a value out of range, a listen address in use) is
//! logged once per change and shown by `GET /v1/instances`; the instance it defined before,
//! if any, runs on unchanged.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::config::instance_file::{
    SUFFIX, check_directory, instance_name, is_instance_name, read_trusted,
};
use crate::config::{Config, ConfigError, InstanceConfig};
use crate::fleet::{FleetStore, seal};
use crate::hosting::{InstanceHost, Removal, RemoveError, StartError};
use crate::registry::Origin;
use authplugin::key_file::LiveKeyRing;

/// How often the directory is read for changes.
pub const SCAN_EVERY: Duration = Duration::from_secs(2);

/// What a file looked like when last read: size, modification time, inode. A file whose
/// stamp is unchanged is not read again.
type Stamp = (u64, Option<SystemTime>, u64);

/// Where the definitions are.
pub enum Place {
    /// `relay.instances_dir`.
    Directory(PathBuf),
    /// A fleet's store.
    Store {
        /// The store.
        store: Arc<dyn FleetStore>,
        /// `[relay.store] definitions_key_file`: what seals the definitions this relay writes
        /// and verifies those it reads (`crate::fleet::seal`); none runs without it.
        seal_keys: Option<Arc<LiveKeyRing>>,
        /// Where definitions are, as error messages name them (`<prefix>/definitions`).
        at: PathBuf,
        /// What relative paths in a definition are relative to (the configuration file's
        /// directory).
        base: PathBuf,
    },
}

/// The watched place and what the last scan found.
pub struct InstanceDir {
    place: Place,
    /// The configuration an instance file is checked against (its relay settings and
    /// endpoints).
    config: Arc<Config>,
    host: Arc<InstanceHost>,
    scan: tokio::sync::Mutex<Scanned>,
    /// Held by each change through the API from its write to its answer, so one change's
    /// undo cannot overwrite another's file.
    changes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for InstanceDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceDir")
            .field("at", &self.describe())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Scanned {
    /// Each file read, by instance name: its stamp and text.
    files: HashMap<String, (Stamp, String)>,
    /// The store's definitions stamp when they were last read.
    store_stamp: Option<(u64, i64)>,
    /// Every name the store listed then (sealed or not).
    listed: HashSet<String>,
    /// The key ring the definitions were verified with then: a changed ring (a key added or
    /// revoked) verifies every definition again, and vouches for none of the old ones.
    ring: Option<Arc<authplugin::identity::KeyRing>>,
    /// Why an instance file is not running as written, by instance name.
    problems: BTreeMap<String, String>,
}

/// How a problem reading a definition starts (what it defined before runs on).
const UNREADABLE: &str = "cannot read ";

impl Scanned {
    /// Whether `name`'s definition could not be read at the last scan.
    fn unreadable(&self, name: &str) -> bool {
        self.problems
            .get(name)
            .is_some_and(|p| p.starts_with(UNREADABLE))
    }

    /// `name`'s definition was read: a problem reading it before is gone.
    fn read_again(&mut self, name: &str) {
        if self.unreadable(name) {
            self.problems.remove(name);
        }
    }

    /// `name`'s definition at `path` cannot be read (`why`): noted, and what it defined
    /// before stays in `seen`, to run on.
    fn not_read(
        &mut self,
        name: String,
        path: &Path,
        why: &dyn std::fmt::Display,
        seen: &mut HashMap<String, (Stamp, String)>,
    ) {
        note(
            &mut self.problems,
            &name,
            format!("{UNREADABLE}{}: {why}", path.display()),
        );
        if let Some(before) = self.files.get(&name).cloned() {
            seen.insert(name, before);
        }
    }
}

/// Where an instance file's definition stands after a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// Running as written.
    Running,
    /// Waiting for the previous definition under that name to drain.
    WaitingForDrain,
    /// Not running as written, and why (the previous definition, if any, still runs).
    Problem(String),
    /// No such file.
    Absent,
}

impl InstanceDir {
    /// Watches `place`, starting and removing instances through `host`.
    #[must_use]
    pub fn new(place: Place, config: Arc<Config>, host: Arc<InstanceHost>) -> Arc<Self> {
        Arc::new(Self {
            place,
            config,
            host,
            scan: tokio::sync::Mutex::new(Scanned::default()),
            changes: tokio::sync::Mutex::new(()),
        })
    }

    /// One change through the API at a time: hold this from the write to the answer.
    pub async fn one_change(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changes.lock().await
    }

    /// Where the definitions are, for people.
    #[must_use]
    pub fn describe(&self) -> String {
        match &self.place {
            Place::Directory(dir) => dir.display().to_string(),
            Place::Store { at, .. } => format!("the fleet's store, {}", at.display()),
        }
    }

    /// The file (or store key) that defines instance `name`.
    #[must_use]
    pub fn path_of(&self, name: &str) -> PathBuf {
        match &self.place {
            Place::Directory(dir) => dir.join(format!("{name}{SUFFIX}")),
            Place::Store { at, .. } => at.join(format!("{name}{SUFFIX}")),
        }
    }

    /// `text` checked as instance `name`'s definition.
    fn parse(&self, name: &str, text: &str) -> Result<InstanceConfig, ConfigError> {
        let path = self.path_of(name);
        let base = match &self.place {
            Place::Directory(dir) => dir.clone(),
            Place::Store { base, .. } => base.clone(),
        };
        self.config.parse_instance_file(text, &path, &base)
    }

    /// Checks `text` as the definition of instance `name` (before the admin API writes it).
    ///
    /// # Errors
    /// [`ConfigError`]: what is wrong, naming the file and the key.
    pub fn check(&self, name: &str, text: &str) -> Result<(), ConfigError> {
        self.parse(name, text).map(drop)
    }

    /// Writes `text` as instance `name`'s definition, whole or not at all (a file: a
    /// temporary file renamed over it, then the directory synced); returns the text it
    /// replaced.
    ///
    /// # Errors
    /// [`DefinitionError`]: what failed; the definition is as it was then.
    pub async fn write(&self, name: &str, text: &str) -> Result<Option<String>, DefinitionError> {
        if !is_instance_name(name) {
            return Err(DefinitionError::Name(name.to_owned()));
        }
        self.replace(name, Some(text), Seal::New).await
    }

    /// Puts back what [`InstanceDir::write`] replaced: `before`, or no definition.
    ///
    /// # Errors
    /// [`DefinitionError`]: what failed.
    pub async fn restore(&self, name: &str, before: Option<&str>) -> Result<(), DefinitionError> {
        self.replace(name, before, Seal::AsItWas).await.map(drop)
    }

    /// Writes `text` as `name`'s definition (none: removes it); returns what it replaced, as
    /// it was stored. In a fleet's store a new text is sealed ([`Seal::New`]); what a restore
    /// puts back is written as it was ([`Seal::AsItWas`]): sealing it would make a relay vouch
    /// for a text it never verified (one written to the store directly).
    async fn replace(
        &self,
        name: &str,
        text: Option<&str>,
        seal: Seal,
    ) -> Result<Option<String>, DefinitionError> {
        let path = self.path_of(name);
        match &self.place {
            Place::Store {
                store, seal_keys, ..
            } => {
                let stored = match (text, seal, seal_keys) {
                    (None, _, _) => None,
                    (Some(text), Seal::AsItWas, _) => Some(text.to_owned()),
                    (Some(text), Seal::New, Some(keys)) => {
                        Some(seal::seal(&keys.current(), name, text))
                    }
                    (Some(_), Seal::New, None) => return Err(DefinitionError::Unsealable),
                };
                store
                    .define(name, stored.as_deref())
                    .await
                    .map_err(|e| DefinitionError::StoreWrite(path, e))
            }
            Place::Directory(dir) => {
                replace_file(dir, name, text).map_err(|e| DefinitionError::Write(path, e))
            }
        }
    }

    /// Removes instance `name`: its file, then the instance (drained, or its connections cut
    /// when `force`). A draining instance takes `force` to cut what is left.
    ///
    /// # Errors
    /// [`RemoveError`]: no such instance or file, an instance of the configuration file, or a
    /// file that cannot be removed.
    pub async fn remove(&self, name: &str, force: bool) -> Result<Removal, RemoveError> {
        // Under the scan's lock: a scan in between would see the file gone and drain the
        // instance itself, without `force`.
        if !is_instance_name(name) {
            return Err(RemoveError::NotFound(name.to_owned()));
        }
        let mut scanned = self.scan.lock().await;
        let live = self.host.registry.get(name);
        if live
            .as_ref()
            .is_some_and(|r| r.origin == Origin::ConfigFile)
        {
            return Err(RemoveError::ConfigFile(name.to_owned()));
        }
        if let Err(e) = self.replace(name, None, Seal::AsItWas).await {
            return Err(RemoveError::File(e.to_string()));
        }
        // Forgotten only once it is gone: a failed removal leaves what the next scan reads.
        let had_file = scanned.files.remove(name).is_some();
        scanned.problems.remove(name);
        match self.host.remove(name, force) {
            Err(RemoveError::NotFound(_)) if had_file => Ok(Removal {
                open: 0,
                forced: force,
            }),
            other => other,
        }
    }

    /// Why instance files do not run as written, by instance name.
    pub async fn problems(&self) -> BTreeMap<String, String> {
        self.scan.lock().await.problems.clone()
    }

    /// Scans until `stop`, every [`SCAN_EVERY`] and on SIGHUP.
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).ok();
        let mut every = tokio::time::interval(SCAN_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => {}
                _ = every.tick() => {}
            }
            self.scan().await;
        }
    }

    /// Reads the directory and makes the running set follow it; returns where instance
    /// `name`'s file stands then (for the admin API).
    pub async fn scan_for(&self, name: &str) -> FileState {
        // A changed definition's scan only begins the old one's drain; one with nothing open
        // is drained at once, and the next scan starts the new one.
        for _ in 0..2 {
            self.scan().await;
            let scanned = self.scan.lock().await;
            if let Some(problem) = scanned.problems.get(name) {
                return FileState::Problem(problem.clone());
            }
            let Some((_, text)) = scanned.files.get(name) else {
                return FileState::Absent;
            };
            match self.host.registry.get(name).map(|r| r.origin.clone()) {
                Some(Origin::Defined { text: running, .. }) if running == *text => {
                    return FileState::Running;
                }
                _ if self.host.registry.draining(name).is_some() => {
                    return FileState::WaitingForDrain;
                }
                _ => {}
            }
        }
        FileState::Problem("not started yet".into())
    }

    /// Reads the definitions and makes the running set follow them.
    pub async fn scan(&self) {
        let mut scanned = self.scan.lock().await;
        let read = match &self.place {
            Place::Directory(dir) => self.read_directory(dir, &mut scanned),
            Place::Store {
                store,
                seal_keys,
                at,
                ..
            } => read_store(store.as_ref(), seal_keys.as_deref(), at, &mut scanned).await,
        };
        let (seen, listed) = match read {
            Ok(read) => read,
            Err(e) => {
                let problem = e.to_string();
                // Nothing is removed for a place that cannot be read: a mount that went away
                // for a moment, or a store out of reach, must not drain every instance.
                if scanned.problems.get("") != Some(&problem) {
                    tracing::error!(at = %self.describe(), problem = %problem, "cannot read the instance definitions; the instances run on as they are");
                    scanned.problems.insert(String::new(), problem);
                }
                return;
            }
        };
        scanned.problems.remove("");
        for (name, (_, text)) in &seen {
            if scanned.unreadable(name) {
                // What it defined before runs on.
                continue;
            }
            self.follow(name, text, &mut scanned.problems).await;
        }
        // Files gone: their instances are removed (drained).
        for live in self.host.registry.live() {
            if matches!(live.origin, Origin::Defined { .. }) && !seen.contains_key(live.name()) {
                let name = live.name().to_owned();
                tracing::info!(instance = %name, "instance file removed; removing the instance");
                if let Err(e) = self.host.remove(&name, false) {
                    tracing::warn!(instance = %name, error = %e, "cannot remove the instance");
                }
            }
        }
        scanned
            .problems
            .retain(|name, _| name.is_empty() || listed.contains(name));
        scanned.files = seen;
    }

    /// Makes instance `name` follow its file's `text`.
    async fn follow(&self, name: &str, text: &str, problems: &mut BTreeMap<String, String>) {
        let path = self.path_of(name);
        match self.host.registry.get(name).map(|r| r.origin.clone()) {
            Some(Origin::Defined { text: running, .. }) if running == text => {
                problems.remove(name);
                return;
            }
            Some(Origin::ConfigFile) => {
                let problem = format!(
                    "{}: an [[instance]] of the configuration file has this name; the file is \
                     not used",
                    path.display()
                );
                note(problems, name, problem);
                return;
            }
            _ => {}
        }
        let cfg = match self.parse(name, text) {
            Ok(cfg) => cfg,
            Err(e) => {
                note(problems, name, e.to_string());
                return;
            }
        };
        if let Some(old) = self.host.registry.get(name) {
            // Changed: the old definition drains first, unless the new one could not even
            // listen (checked by binding and letting go; its own address it frees by draining).
            if let Some(listen) = cfg
                .listen
                .filter(|l| Some(*l) != old.rt.instance.config.listen)
                && let Err(e) = std::net::TcpListener::bind(listen)
            {
                note(
                    problems,
                    name,
                    format!(
                        "{}: listen: cannot listen on {listen}: {e}; the old definition runs on",
                        path.display()
                    ),
                );
                return;
            }
            tracing::info!(instance = name, file = %path.display(), "instance file changed; the old definition drains, then the new one starts");
            if let Err(e) = self.host.remove(name, false) {
                note(problems, name, e.to_string());
            }
            problems.remove(name);
            return;
        }
        if self.host.registry.draining(name).is_some() {
            return;
        }
        let origin = Origin::Defined {
            at: path.display().to_string(),
            text: text.to_owned(),
        };
        match self.host.start(cfg, origin, None).await {
            Ok(_) => {
                problems.remove(name);
            }
            Err(StartError::Exists(_)) => {}
            Err(e) => note(problems, name, e.to_string()),
        }
    }

    /// The definitions in directory `dir`, by instance name, and every name listed there
    /// (a file that cannot be read is listed; what it defined before runs on). A file whose
    /// stamp is unchanged is not read again.
    fn read_directory(&self, dir: &Path, scanned: &mut Scanned) -> Result<Read, DefinitionError> {
        check_directory(dir).map_err(|e| DefinitionError::Read(dir.to_owned(), e))?;
        let listing = list(dir).map_err(|e| DefinitionError::Read(dir.to_owned(), e))?;
        let mut seen: HashMap<String, (Stamp, String)> = HashMap::with_capacity(listing.len());
        let mut listed = HashSet::with_capacity(listing.len());
        for (name, stamp) in listing {
            listed.insert(name.clone());
            let known = scanned
                .files
                .get(&name)
                .filter(|(s, _)| *s == stamp)
                .map(|(_, text)| text.clone());
            let text = match known {
                Some(text) => text,
                None => match read_trusted(&self.path_of(&name)) {
                    Ok(text) => {
                        scanned.read_again(&name);
                        text
                    }
                    Err(e) => {
                        let path = self.path_of(&name);
                        scanned.not_read(name, &path, &e, &mut seen);
                        continue;
                    }
                },
            };
            seen.insert(name, (stamp, text));
        }
        Ok((seen, listed))
    }
}

/// Whether [`InstanceDir::replace`] seals what it writes to a fleet's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seal {
    /// A new definition, from the admin API: sealed with the newest key.
    New,
    /// What a definition replaced, put back byte for byte.
    AsItWas,
}

/// Why instance definitions could not be read or written.
#[derive(Debug)]
pub enum DefinitionError {
    /// Not an instance name.
    Name(String),
    /// The directory of instance files cannot be read.
    Read(PathBuf, std::io::Error),
    /// An instance file cannot be written.
    Write(PathBuf, std::io::Error),
    /// The fleet's store cannot be read.
    StoreRead(crate::fleet::StoreError),
    /// The fleet's store refused a definition (at this path, as the relay names it).
    StoreWrite(PathBuf, crate::fleet::StoreError),
    /// This relay has no `[relay.store] definitions_key_file` to seal a definition with.
    Unsealable,
}

impl std::fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => write!(f, "'{name}' cannot name an instance"),
            Self::Read(path, e) => write!(f, "cannot read {}: {e}", path.display()),
            Self::Write(path, e) => write!(f, "cannot write {}: {e}", path.display()),
            Self::StoreRead(e) => write!(f, "{e}"),
            Self::StoreWrite(path, e) => write!(f, "cannot write {}: {e}", path.display()),
            Self::Unsealable => f.write_str(
                "this relay has no [relay.store] definitions_key_file to seal the definition \
                 with (relays run only sealed definitions from the store)",
            ),
        }
    }
}

impl std::error::Error for DefinitionError {}

/// What a read of the definitions found: each by instance name (with its file's stamp), and
/// every name listed.
type Read = (HashMap<String, (Stamp, String)>, HashSet<String>);

/// The definitions in `store` (under `at`), each once its seal verifies with `keys`
/// (`crate::fleet::seal`): those read last time while its stamp is unchanged, else all of
/// them again. A definition that does not verify is listed, with why as its problem; what
/// it defined before runs on.
async fn read_store(
    store: &dyn FleetStore,
    keys: Option<&LiveKeyRing>,
    at: &Path,
    scanned: &mut Scanned,
) -> Result<Read, DefinitionError> {
    let stamp = store
        .definitions_stamp()
        .await
        .map_err(DefinitionError::StoreRead)?;
    let ring = keys.map(LiveKeyRing::current);
    let same_ring = match (&ring, &scanned.ring) {
        (Some(now), Some(then)) => Arc::ptr_eq(now, then),
        (None, None) => true,
        _ => false,
    };
    if scanned.store_stamp == Some(stamp) && same_ring {
        let listed = scanned.listed.clone();
        return Ok((scanned.files.clone(), listed));
    }
    if !same_ring {
        // What the old ring verified is no longer vouched for: nothing falls back to it.
        scanned.files.clear();
        scanned.ring.clone_from(&ring);
    }
    let definitions = store
        .definitions()
        .await
        .map_err(DefinitionError::StoreRead)?;
    scanned.store_stamp = Some(stamp);
    let mut seen = HashMap::with_capacity(definitions.len());
    let mut listed = HashSet::with_capacity(definitions.len());
    for (name, stored) in definitions {
        if !is_instance_name(&name) {
            continue;
        }
        listed.insert(name.clone());
        match seal::unseal(ring.as_deref(), &name, &stored) {
            Ok(text) => {
                scanned.read_again(&name);
                seen.insert(name, ((0, None, 0), text.to_owned()));
            }
            Err(e) => {
                let path = at.join(format!("{name}{SUFFIX}"));
                scanned.not_read(name, &path, &e, &mut seen);
            }
        }
    }
    scanned.listed = listed.clone();
    Ok((seen, listed))
}

/// The instance files in `dir`, with their stamps.
fn list(dir: &Path) -> std::io::Result<Vec<(String, Stamp)>> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(instance_name)
            .map(str::to_owned)
        else {
            continue;
        };
        // Followed through a symlink, as the relay would read it.
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        files.push((name, (meta.len(), meta.modified().ok(), meta.ino())));
    }
    Ok(files)
}

/// Writes `text` as instance `name`'s file in `dir` (none: removes it), whole or not at all;
/// returns the text it replaced.
fn replace_file(dir: &Path, name: &str, text: Option<&str>) -> std::io::Result<Option<String>> {
    use std::io::Write as _;
    let path = dir.join(format!("{name}{SUFFIX}"));
    let before = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match text {
        Some(text) => {
            // Hidden, so a scan in between does not read it as an instance.
            // Named by the process too: another relay may share the directory.
            let temporary = dir.join(format!(".{name}{SUFFIX}.{}.tmp", std::process::id()));
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        },
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(before)
}

/// Records `problem` for `name`, logging it when it is new.
fn note(problems: &mut BTreeMap<String, String>, name: &str, problem: String) {
    if problems.get(name) != Some(&problem) {
        tracing::error!(instance = name, problem = %problem, "instance file not used as written");
        problems.insert(name.to_owned(), problem);
    }
}
