//! The simulation's view of a relay's store: the real [`FleetStore`] with every request
//! counted by kind, so the report can say what a fleet costs its etcd.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::fleet::{
    FleetConnections, FleetOpen, FleetStore, LockPurpose, Observed, OpenRecord, StoreError,
};
use crate::future::BoxFuture;
use crate::lifecycle::Phase;

/// Store requests by kind, counted as they are made.
#[derive(Debug, Default)]
pub(super) struct Requests {
    pub(super) observe: AtomicU64,
    pub(super) begin: AtomicU64,
    pub(super) finish: AtomicU64,
    pub(super) watch: AtomicU64,
    pub(super) publish: AtomicU64,
    pub(super) connections: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) last_error: Mutex<Option<String>>,
}

impl Requests {
    pub(super) fn failed(&self, e: &StoreError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(e.to_string());
        }
    }

    pub(super) fn total(&self) -> u64 {
        [
            &self.observe,
            &self.begin,
            &self.finish,
            &self.publish,
            &self.connections,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// A relay's store with every request counted.
#[derive(Debug)]
pub(super) struct Counted {
    pub(super) inner: Arc<dyn FleetStore>,
    pub(super) requests: Arc<Requests>,
}

impl Counted {
    fn count<T>(
        &self,
        counter: &AtomicU64,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        counter.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &result {
            self.requests.failed(e);
        }
        result
    }

    /// Publishes `open` connections, idle since now.
    pub(super) async fn publish(&self, instance: &str, open: u64) -> Result<(), StoreError> {
        let record = OpenRecord {
            open,
            idle_since_ms: crate::clock::now_ms(),
        };
        self.publish_open(instance, record).await
    }
}

/// The protocol runs on the counted store: every request it makes is counted by kind; the
/// requests it does not make (hints, the ledger) go straight through.
impl FleetStore for Counted {
    fn definitions_stamp(&self) -> BoxFuture<'_, Result<(u64, i64), StoreError>> {
        self.inner.definitions_stamp()
    }

    fn definitions(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, StoreError>> {
        self.inner.definitions()
    }

    fn define<'a>(
        &'a self,
        name: &'a str,
        text: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.inner.define(name, text)
    }

    fn relay_id(&self) -> &str {
        self.inner.relay_id()
    }

    fn available(&self) -> bool {
        self.inner.available()
    }

    fn lease_epoch(&self) -> u64 {
        self.inner.lease_epoch()
    }

    fn observe<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<Observed, StoreError>> {
        Box::pin(async move {
            let r = self.inner.observe(instance).await;
            self.count(&self.requests.observe, r)
        })
    }

    fn begin<'a>(
        &'a self,
        instance: &'a str,
        seen: &'a Observed,
        purpose: LockPurpose,
        rate_milli: u64,
        connections_unchanged_since: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let r = self
                .inner
                .begin(
                    instance,
                    seen,
                    purpose,
                    rate_milli,
                    connections_unchanged_since,
                )
                .await;
            self.count(&self.requests.begin, r)
        })
    }

    fn finish<'a>(
        &'a self,
        instance: &'a str,
        phase: Phase,
        rate_milli: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let r = self.inner.finish(instance, phase, rate_milli).await;
            self.count(&self.requests.finish, r)
        })
    }

    fn wait_change<'a>(
        &'a self,
        instance: &'a str,
        after_revision: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.requests.watch.fetch_add(1, Ordering::Relaxed);
            let r = self.inner.wait_change(instance, after_revision).await;
            if let Err(e) = &r {
                self.requests.failed(e);
            }
            r
        })
    }

    fn publish_open<'a>(
        &'a self,
        instance: &'a str,
        record: OpenRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let r = self.inner.publish_open(instance, record).await;
            self.count(&self.requests.publish, r)
        })
    }

    fn connections<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<FleetConnections, StoreError>> {
        Box::pin(async move {
            let r = self.inner.connections(instance).await;
            self.count(&self.requests.connections, r)
        })
    }

    fn observed_hint(&self, instance: &str) -> Option<Observed> {
        self.inner.observed_hint(instance)
    }

    fn open_hint(&self, instance: &str) -> Option<FleetOpen> {
        self.inner.open_hint(instance)
    }

    fn ledger_text(&self) -> BoxFuture<'_, Result<String, StoreError>> {
        self.inner.ledger_text()
    }

    fn relays(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.relays()
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        self.inner.leave()
    }
}
