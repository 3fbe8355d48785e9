//! The instances the relay serves now, by name: what the endpoints route to, the admin API
//! lists and shutdown stops. Instances are added and removed while the relay runs
//! (docs/instances.md); everything that needs the current set reads it here, never a list
//! of its own made at start.
//!
//! A removed instance leaves the live set at once (no new login reaches it) and is kept as
//! *draining* until its last connection has ended and its compute is stopped; a new
//! definition under the same name starts only then, so two definitions never drive one
//! compute.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::runtime::InstanceRuntime;

use crate::future::Session;

/// Where an instance's definition came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An `[[instance]]` of the configuration file: removed only by a restart.
    ConfigFile,
    /// An instance file of `relay.instances_dir` or of the fleet's store, holding this text
    /// when the instance started.
    Defined {
        /// The file, or the store's key.
        at: String,
        /// Its text then (a definition whose text changes is a new definition).
        text: String,
    },
}

impl Origin {
    /// How `relay status` and the admin API name it.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::ConfigFile => "configuration file".into(),
            Self::Defined { at, .. } => at.clone(),
        }
    }
}

/// One instance the relay serves (or is draining).
#[derive(Debug)]
pub struct Registered {
    /// What its connections share.
    pub rt: Arc<InstanceRuntime>,
    /// Where it was defined.
    pub origin: Origin,
    /// Its slot in the pre-login admission.
    pub slot: usize,
    /// Its connections' tasks: a removal waits for them.
    pub connections: TaskTracker,
    /// Fired to cut its connections (a forced removal).
    pub cut: CancellationToken,
    /// Fired to end its background tasks (idle pause, scaling, the fleet's), once its
    /// connections are gone and its compute is stopped.
    pub tasks: CancellationToken,
}

impl Registered {
    /// `rt`, defined at `origin`, holding admission slot `slot`; `tasks` ends its background
    /// tasks.
    #[must_use]
    pub fn new(
        rt: Arc<InstanceRuntime>,
        origin: Origin,
        slot: usize,
        tasks: CancellationToken,
    ) -> Self {
        Self {
            rt,
            origin,
            slot,
            connections: TaskTracker::new(),
            cut: CancellationToken::new(),
            tasks,
        }
    }

    /// Its name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.rt.instance.config.name
    }

    /// Serves one connection of the instance: `session` runs until it ends or the instance's
    /// removal cuts it (a pre-login connection that made room for another is aborted:
    /// [`crate::limits::Attach`]); the connection counts among the instance's meanwhile.
    pub fn serve(&self, session: Session) -> impl Future<Output = ()> + Send + 'static {
        let cut = self.cut.clone();
        self.connections.track_future(async move {
            tokio::select! {
                () = session => {}
                () = cut.cancelled() => {}
            }
        })
    }

    /// Its open connections (sessions and logins in progress).
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.connections.len()
    }
}

/// The live and the draining instances.
#[derive(Debug, Default)]
pub struct Registry {
    live: RwLock<BTreeMap<String, Arc<Registered>>>,
    draining: RwLock<BTreeMap<String, Arc<Registered>>>,
    /// Bumped by every change of the live set (what an endpoint's cached greeting is from).
    changes: AtomicU64,
}

impl Registry {
    /// The live instance named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<Registered>> {
        read(&self.live).get(name).cloned()
    }

    /// The draining instance named `name`.
    #[must_use]
    pub fn draining(&self, name: &str) -> Option<Arc<Registered>> {
        read(&self.draining).get(name).cloned()
    }

    /// Every live instance, by name.
    #[must_use]
    pub fn live(&self) -> Vec<Arc<Registered>> {
        read(&self.live).values().cloned().collect()
    }

    /// Every removed instance still draining, by name.
    #[must_use]
    pub fn removed(&self) -> Vec<Arc<Registered>> {
        read(&self.draining).values().cloned().collect()
    }

    /// Every instance the relay still runs something for: the live ones, then the draining
    /// ones, each by name.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Registered>> {
        let mut all = self.live();
        all.extend(self.removed());
        all
    }

    /// How many instances are live.
    #[must_use]
    pub fn len(&self) -> usize {
        read(&self.live).len()
    }

    /// Changes of the live set so far.
    #[must_use]
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Adds `instance` to the live set.
    ///
    /// # Errors
    /// `instance` back when its name is live or still draining.
    pub fn insert(&self, instance: Arc<Registered>) -> Result<(), Arc<Registered>> {
        let mut live = write(&self.live);
        if live.contains_key(instance.name()) || read(&self.draining).contains_key(instance.name())
        {
            return Err(instance);
        }
        live.insert(instance.name().to_owned(), instance);
        self.changes.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Moves the live instance `name` to the draining set: no login reaches it from now on.
    pub fn start_draining(&self, name: &str) -> Option<Arc<Registered>> {
        let mut live = write(&self.live);
        let instance = live.remove(name)?;
        write(&self.draining).insert(name.to_owned(), Arc::clone(&instance));
        self.changes.fetch_add(1, Ordering::AcqRel);
        Some(instance)
    }

    /// Forgets the draining instance `name` (drained and stopped).
    pub fn drained(&self, name: &str) {
        write(&self.draining).remove(name);
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // Every update is one map operation: the maps stay whole under a panic elsewhere.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AuthMode;

    fn registered(name: &str) -> Arc<Registered> {
        use authplugin::{KeyId, KeyRing, PerceptronKey};
        let key = PerceptronKey::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
        let rt = crate::in_memory::runtime_with(
            AuthMode::Dual,
            KeyRing::new(vec![key]).unwrap(),
            std::time::Duration::from_secs(1),
            |c| c.name = name.into(),
        );
        Arc::new(Registered::new(
            Arc::new(rt),
            Origin::ConfigFile,
            0,
            CancellationToken::new(),
        ))
    }

    #[test]
    fn a_name_is_taken_until_its_instance_has_drained() {
        let registry = Registry::default();
        registry.insert(registered("b")).unwrap();
        registry.insert(registered("a")).unwrap();
        assert!(registry.insert(registered("a")).is_err());
        let names = |list: Vec<Arc<Registered>>| {
            list.iter().map(|r| r.name().to_owned()).collect::<Vec<_>>()
        };
        assert_eq!(names(registry.live()), ["a", "b"]);
        let before = registry.changes();
        let removed = registry.start_draining("a").unwrap();
        assert!(
            registry.changes() > before,
            "an endpoint's cached greeting must be made again"
        );
        assert!(registry.get("a").is_none());
        assert_eq!(registry.draining("a").unwrap().name(), removed.name());
        assert_eq!(names(registry.all()), ["b", "a"]);
        // A new definition waits for the old one's drain.
        assert!(registry.insert(registered("a")).is_err());
        registry.drained("a");
        assert!(registry.removed().is_empty());
        registry.insert(registered("a")).unwrap();
        assert_eq!(registry.len(), 2);
    }
}
