//! The fleet's store on etcd (v3 API, `etcd-client`).
//!
//! The relay holds one lease for its life; its lock, connection and liveness records are
//! attached to it, so they vanish `lease_ttl` after the relay dies or loses etcd. A keeper task
//! renews the lease every third of its TTL; when a renewal fails the relay counts as cut off
//! (`available` is false) until a new lease is granted, and its records are published again.
//! A second task keeps the relay's [`Feed`] with one watch on the whole prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    Identity, PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp, WatchOptions,
};
use tokio::sync::watch;

use super::feed::{Change, Feed};
use super::record::{FleetOpen, Keys, LockPurpose, LockRecord, OpenRecord, StateRecord};
use super::{FleetConnections, FleetStore, Observed, StoreError};
use crate::config::EtcdSettings;
use crate::future::BoxFuture;
use crate::lifecycle::Phase;

/// A relay's membership of an etcd fleet.
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    relay_id: String,
    /// Bound on each request, so a stalled etcd is "unavailable", not a hang.
    request_timeout: Duration,
    /// The live lease; `None` while the relay is cut off.
    lease: watch::Receiver<Option<i64>>,
    epoch: Arc<AtomicU64>,
    /// Set by `leave`: the keeper stops instead of taking a new lease.
    leaving: Arc<AtomicBool>,
    /// The fleet's changes, from this relay's one watch.
    feed: Arc<Feed>,
    /// Bounds the requests this relay has in flight.
    in_flight: tokio::sync::Semaphore,
}

/// Requests one relay keeps in flight at most: enough to pipeline on a few HTTP/2
/// connections, few enough that a burst (every instance publishing at start) queues here
/// instead of timing out in etcd.
const MAX_IN_FLIGHT: usize = 128;

/// Bound on the feed's first read of every instance and connection record (a bulk read,
/// longer than one request).
const FEED_READ_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("relay_id", &self.relay_id)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Runs one request within `limit`.
async fn bounded<T>(
    limit: Duration,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unavailable(e)),
        Err(_) => Err(unavailable(format!("no answer within {limit:?}"))),
    }
}

/// Whether a request certainly never reached etcd (the connection to the member it was sent to
/// was refused): only then is retrying it safe for a compare-and-swap, whose outcome must never
/// be guessed. The client spreads requests over the endpoints, so a retry goes to another.
fn never_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            // 14: UNAVAILABLE, with the transport's own connect failure as its message.
            i32::from(status.code()) == 14 && status.message().contains("connect error")
        }
        _ => false,
    }
}

impl EtcdStore {
    /// Runs `op` on a client within `request_timeout`, again while it fails without having
    /// been sent (a member that is down): the only failure after which a transaction may be
    /// sent again, since its outcome must never be guessed.
    async fn request<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.attempt(op, false).await
    }

    /// Sends one transaction (never repeated: it may have been applied) and says whether its
    /// compares held.
    async fn commit(&self, txn: Txn) -> Result<bool, StoreError> {
        let done = self
            .request(|mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        Ok(done.succeeded())
    }

    /// The same for a request that is safe to repeat (a read, or a put of the same value):
    /// any failure is retried while time is left, each try given half of what remains, so a
    /// member that died with the request in flight costs a retry on another, not an error.
    async fn idempotent<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.attempt(op, true).await
    }

    async fn attempt<T, F, Fut>(&self, mut op: F, repeatable: bool) -> Result<T, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        // Waiting for a slot counts against the request's time: an overloaded store is
        // "unavailable" either way, without a pile of requests the relay has given up on.
        let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, self.in_flight.acquire()).await
        else {
            return Err(unavailable(format!(
                "no answer within {:?} ({MAX_IN_FLIGHT} requests in flight)",
                self.request_timeout
            )));
        };
        let retry_pause = Duration::from_millis(10);
        loop {
            let now = tokio::time::Instant::now();
            let this_try = if repeatable {
                now + deadline.saturating_duration_since(now) / 2
            } else {
                deadline
            };
            let result = tokio::time::timeout_at(this_try, op(self.client.clone())).await;
            let last_chance = tokio::time::Instant::now() + retry_pause >= deadline;
            match result {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if (repeatable || never_sent(&e)) && !last_chance => {
                    tracing::debug!(error = %e, "etcd request failed; trying again");
                    tokio::time::sleep(retry_pause).await;
                }
                Ok(Err(e)) => return Err(unavailable(e)),
                Err(_) if repeatable && !last_chance => {}
                Err(_) => {
                    return Err(unavailable(format!(
                        "no answer within {:?}",
                        self.request_timeout
                    )));
                }
            }
        }
    }

    /// Connects, takes a lease and starts keeping it.
    ///
    /// # Errors
    /// [`StoreError`] when no endpoint answers within the dial timeout.
    pub async fn connect(settings: &EtcdSettings) -> Result<Arc<dyn FleetStore>, StoreError> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(settings.dial_timeout)
            .with_timeout(settings.request_timeout)
            .with_keep_alive(Duration::from_secs(2), settings.request_timeout);
        if let Some(tls) = tls_options(settings)? {
            options = options.with_tls(tls);
        }
        let client = bounded(
            settings.dial_timeout,
            Client::connect(&settings.endpoints, Some(options)),
        )
        .await?;
        let keys = Keys::new(&settings.prefix);
        let epoch = Arc::new(AtomicU64::new(0));
        let first = grant(
            &client,
            &keys,
            &settings.relay_id,
            settings.lease_ttl,
            settings.request_timeout,
        )
        .await?;
        epoch.store(1, Ordering::Release);
        let (tx, lease) = watch::channel(Some(first));
        let leaving = Arc::new(AtomicBool::new(false));
        tokio::spawn(keep_lease(
            client.clone(),
            keys.clone(),
            settings.clone(),
            tx,
            Arc::clone(&epoch),
            Arc::clone(&leaving),
        ));
        let feed = Arc::new(Feed::default());
        tokio::spawn(follow_store(
            client.clone(),
            keys.clone(),
            Arc::clone(&feed),
            Arc::clone(&leaving),
            settings.request_timeout,
        ));
        tracing::info!(relay_id = %settings.relay_id, endpoints = ?settings.endpoints, lease = first, "joined the fleet");
        Ok(Arc::new(Self {
            client,
            keys,
            relay_id: settings.relay_id.clone(),
            request_timeout: settings.request_timeout,
            lease,
            epoch,
            leaving,
            feed,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }))
    }

    fn lease(&self) -> Result<i64, StoreError> {
        (*self.lease.borrow()).ok_or_else(|| unavailable("this relay's lease is lost"))
    }

    fn leased(&self) -> Result<PutOptions, StoreError> {
        Ok(PutOptions::new().with_lease(self.lease()?))
    }
}

/// The TLS settings of `[relay.store]`, read from their files (the key as a secret: mode 0600,
/// no symlink); `None` without `ca_file`.
pub(super) fn tls_options(settings: &EtcdSettings) -> Result<Option<TlsOptions>, StoreError> {
    let Some(ca_file) = &settings.ca_file else {
        return Ok(None);
    };
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            unavailable(format!(
                "relay.store.{key}: cannot read {}: {e}",
                path.display()
            ))
        })
    };
    let mut tls =
        TlsOptions::new().ca_certificate(Certificate::from_pem(read("ca_file", ca_file)?));
    if let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) {
        let key = authplugin::key_file::read_secret_file(key)
            .map_err(|e| unavailable(format!("relay.store.key_file: {e}")))?;
        tls = tls.identity(Identity::from_pem(read("cert_file", cert)?, key.as_bytes()));
    }
    Ok(Some(tls))
}

/// Grants a lease and records the relay as live under it.
async fn grant(
    client: &Client,
    keys: &Keys,
    relay_id: &str,
    ttl: Duration,
    limit: Duration,
) -> Result<i64, StoreError> {
    let mut c = client.clone();
    let ttl_s = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let id = bounded(limit, c.lease_grant(ttl_s, None)).await?.id();
    let value = format!("{} {}", std::process::id(), crate::clock::now_ms());
    bounded(
        limit,
        c.put(
            keys.relay(relay_id),
            value,
            Some(PutOptions::new().with_lease(id)),
        ),
    )
    .await?;
    Ok(id)
}

/// Keeps `feed` following every change under the fleet's prefix, with one watch for the whole
/// relay however many instances it serves: every instance's state and lock and every
/// connection record as of one revision, then the watch from the next; the same again after a
/// break (etcd down, compaction). Runs until the relay leaves the fleet.
async fn follow_store(
    client: Client,
    keys: Keys,
    feed: Arc<Feed>,
    leaving: Arc<AtomicBool>,
    limit: Duration,
) {
    while !leaving.load(Ordering::Acquire) {
        let why = follow_once(&client, &keys, &feed, limit.max(FEED_READ_TIMEOUT)).await;
        feed.stop();
        tracing::debug!(reason = %why, "the fleet's change feed stopped; restarting it");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Follows the store until the watch breaks; why it did.
async fn follow_once(client: &Client, keys: &Keys, feed: &Feed, limit: Duration) -> String {
    let mut c = client.clone();
    let instances = match bounded(
        limit,
        c.get(keys.all_instances(), Some(GetOptions::new().with_prefix())),
    )
    .await
    {
        Ok(got) => got,
        Err(e) => return e.to_string(),
    };
    let revision = instances.header().map_or(0, |h| h.revision());
    // The connection records as of the same revision, so the watch misses nothing between.
    let options = GetOptions::new().with_prefix().with_revision(revision);
    let connections = match bounded(limit, c.get(keys.all_connections(), Some(options))).await {
        Ok(got) => got,
        Err(e) => return e.to_string(),
    };
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision.saturating_add(1));
    let mut stream = match bounded(limit, c.watch(keys.root(), Some(options))).await {
        Ok(stream) => stream,
        Err(e) => return e.to_string(),
    };
    feed.start(
        revision,
        instances
            .kvs()
            .iter()
            .chain(connections.kvs())
            .filter_map(|kv| Change::of(keys, kv.key(), kv.value(), false, kv.mod_revision())),
    );
    loop {
        match stream.message().await {
            Ok(Some(r)) if r.canceled() => {
                return format!("watch canceled (compacted at {})", r.compact_revision());
            }
            Ok(Some(r)) => feed.apply(r.events().iter().filter_map(|e| {
                let kv = e.kv()?;
                let deleted = e.event_type() == EventType::Delete;
                Change::of(keys, kv.key(), kv.value(), deleted, kv.mod_revision())
            })),
            Ok(None) => return "watch closed".into(),
            Err(e) => return e.to_string(),
        }
    }
}

/// Renews the lease every third of its TTL. A renewal that fails (a member going away breaks
/// the keep-alive stream) is retried on the same lease, through the other members, until the
/// lease would have expired; only then is the relay cut off (`None`), and it takes a new lease
/// as soon as etcd answers again.
async fn keep_lease(
    client: Client,
    keys: Keys,
    settings: EtcdSettings,
    lease: watch::Sender<Option<i64>>,
    epoch: Arc<AtomicU64>,
    leaving: Arc<AtomicBool>,
) {
    let every = settings.lease_ttl / 3;
    let mut renewed = tokio::time::Instant::now();
    loop {
        if leaving.load(Ordering::Acquire) || lease.is_closed() {
            return;
        }
        let Some(id) = *lease.borrow() else {
            match grant(
                &client,
                &keys,
                &settings.relay_id,
                settings.lease_ttl,
                settings.request_timeout,
            )
            .await
            {
                Ok(id) => {
                    epoch.fetch_add(1, Ordering::AcqRel);
                    renewed = tokio::time::Instant::now();
                    tracing::info!(lease = id, "state store reachable again; new lease");
                    let _ = lease.send(Some(id));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
            continue;
        };
        let why = renew_until_failure(&client, id, every, &mut renewed).await;
        if leaving.load(Ordering::Acquire) {
            return;
        }
        match why {
            Renewal::Failed(why) if renewed.elapsed() < settings.lease_ttl => {
                tracing::debug!(lease = id, reason = %why, "lease renewal failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Renewal::Failed(why) => {
                tracing::warn!(lease = id, reason = %why, "lost the state store lease; new wakes and pauses wait until it is back");
                let _ = lease.send(None);
            }
            Renewal::Expired => {
                tracing::warn!(
                    lease = id,
                    "the state store expired this relay's lease; new wakes and pauses wait for a new one"
                );
                let _ = lease.send(None);
            }
        }
    }
}

/// Why renewing a lease stopped.
enum Renewal {
    /// etcd says the lease is gone.
    Expired,
    /// A request failed or stalled; the lease may still be live.
    Failed(String),
}

/// Renews lease `id` every `every`, each renewal answered within `every`, recording each
/// success in `renewed`, until a renewal fails.
async fn renew_until_failure(
    client: &Client,
    id: i64,
    every: Duration,
    renewed: &mut tokio::time::Instant,
) -> Renewal {
    let mut c = client.clone();
    let (mut keeper, mut stream) = match tokio::time::timeout(every, c.lease_keep_alive(id)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Renewal::Failed(e.to_string()),
        Err(_) => return Renewal::Failed(format!("no answer within {every:?}")),
    };
    loop {
        let renewal = async {
            keeper.keep_alive().await?;
            stream.message().await
        };
        match tokio::time::timeout(every, renewal).await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => *renewed = tokio::time::Instant::now(),
            Ok(Ok(Some(_))) => return Renewal::Expired,
            Ok(Ok(None)) => return Renewal::Failed("keep-alive stream closed".into()),
            Ok(Err(e)) => return Renewal::Failed(e.to_string()),
            Err(_) => return Renewal::Failed(format!("no answer within {every:?}")),
        }
        tokio::time::sleep(every).await;
    }
}

impl FleetStore for EtcdStore {
    fn relay_id(&self) -> &str {
        &self.relay_id
    }

    fn available(&self) -> bool {
        self.lease.borrow().is_some()
    }

    fn lease_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn observe<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<Observed, StoreError>> {
        Box::pin(async move {
            self.lease()?;
            let prefix = self.keys.instance(instance);
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
                })
                .await?;
            let mut seen = Observed {
                revision: got.header().map_or(0, |h| h.revision()),
                ..Observed::default()
            };
            let (state_key, lock_key) = (self.keys.state(instance), self.keys.lock(instance));
            for kv in got.kvs() {
                if kv.key() == state_key.as_bytes() {
                    seen.state = StateRecord::parse(kv.value());
                    seen.state_revision = kv.mod_revision();
                    if seen.state.is_none() {
                        tracing::warn!(instance, key = %state_key, "unreadable fleet state; treated as paused");
                    }
                } else if kv.key() == lock_key.as_bytes() {
                    // An unreadable lock still locks: someone wrote it.
                    seen.lock = Some(LockRecord::parse(kv.value()).unwrap_or(LockRecord {
                        relay: "?".into(),
                        purpose: LockPurpose::Resuming,
                    }));
                }
            }
            Ok(seen)
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
            let leased = self.leased()?;
            let phase = match purpose {
                LockPurpose::Resuming => Phase::Resuming,
                LockPurpose::Pausing => Phase::Pausing,
            };
            let record = StateRecord {
                phase,
                relay: self.relay_id.clone(),
                since_ms: crate::clock::now_ms(),
                rate_milli,
            };
            let lock = LockRecord {
                relay: self.relay_id.clone(),
                purpose,
            };
            let mut when = vec![
                Compare::create_revision(self.keys.lock(instance), CompareOp::Equal, 0),
                Compare::mod_revision(
                    self.keys.state(instance),
                    CompareOp::Equal,
                    seen.state_revision,
                ),
            ];
            if let Some(revision) = connections_unchanged_since {
                when.push(
                    Compare::mod_revision(
                        self.keys.connections(instance),
                        CompareOp::Less,
                        revision.saturating_add(1),
                    )
                    .with_prefix(),
                );
            }
            let txn = Txn::new().when(when).and_then(vec![
                TxnOp::put(self.keys.lock(instance), lock.format(), Some(leased)),
                TxnOp::put(self.keys.state(instance), record.format(), None),
                TxnOp::put(
                    self.keys
                        .ledger_entry(instance, record.since_ms, &self.relay_id),
                    record.ledger_line(instance),
                    None,
                ),
            ]);
            self.commit(txn).await
        })
    }

    fn finish<'a>(
        &'a self,
        instance: &'a str,
        phase: Phase,
        rate_milli: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let lease = self.lease()?;
            let record = StateRecord {
                phase,
                relay: self.relay_id.clone(),
                since_ms: crate::clock::now_ms(),
                rate_milli,
            };
            let txn = Txn::new()
                .when(vec![Compare::lease(
                    self.keys.lock(instance),
                    CompareOp::Equal,
                    lease,
                )])
                .and_then(vec![
                    TxnOp::put(self.keys.state(instance), record.format(), None),
                    TxnOp::put(
                        self.keys
                            .ledger_entry(instance, record.since_ms, &self.relay_id),
                        record.ledger_line(instance),
                        None,
                    ),
                    TxnOp::delete(self.keys.lock(instance), None),
                ]);
            self.commit(txn).await
        })
    }

    fn wait_change<'a>(
        &'a self,
        instance: &'a str,
        after_revision: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let lost = || {
                self.lease
                    .borrow()
                    .is_none()
                    .then(|| unavailable("this relay's lease is lost"))
            };
            self.feed
                .wait_change(instance, after_revision, lost, self.lease.clone())
                .await
        })
    }

    fn observed_hint(&self, instance: &str) -> Option<Observed> {
        self.lease
            .borrow()
            .is_some()
            .then(|| self.feed.observed(instance))
            .flatten()
    }

    fn open_hint(&self, instance: &str) -> Option<FleetOpen> {
        self.lease
            .borrow()
            .is_some()
            .then(|| self.feed.open(instance))
            .flatten()
    }

    fn publish_open<'a>(
        &'a self,
        instance: &'a str,
        record: OpenRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let leased = self.leased()?;
            let key = self.keys.connections_of(instance, &self.relay_id);
            let value = record.format();
            self.idempotent(|mut c| {
                let (key, value, leased) = (key.clone(), value.clone(), leased.clone());
                async move { c.put(key, value, Some(leased)).await }
            })
            .await?;
            Ok(())
        })
    }

    fn connections<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<FleetConnections, StoreError>> {
        Box::pin(async move {
            self.lease()?;
            let prefix = self.keys.connections(instance);
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
                })
                .await?;
            let by_relay = got
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let relay = kv.key().strip_prefix(prefix.as_bytes())?;
                    Some((
                        String::from_utf8_lossy(relay).into_owned(),
                        OpenRecord::parse(kv.value())?,
                    ))
                })
                .collect();
            Ok(FleetConnections {
                total: FleetOpen::sum(got.kvs().iter().map(etcd_client::KeyValue::value)),
                by_relay,
                revision: got.header().map_or(0, |h| h.revision()),
            })
        })
    }

    fn ledger_text(&self) -> BoxFuture<'_, Result<String, StoreError>> {
        Box::pin(async move {
            let prefix = self.keys.ledger();
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
                })
                .await?;
            let (text, refused) = ledger_from_values(got.kvs().iter().map(|kv| kv.value()));
            if refused > 0 {
                tracing::warn!(
                    refused,
                    "ledger values in the fleet's store that are not one ledger line each were left out of the bill"
                );
            }
            Ok(text)
        })
    }

    fn definitions_stamp(&self) -> BoxFuture<'_, Result<(u64, i64), StoreError>> {
        Box::pin(async move {
            let prefix = self.keys.definitions();
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    let options = GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_sort(SortTarget::Mod, SortOrder::Descend)
                        .with_limit(1);
                    async move { c.get(prefix, Some(options)).await }
                })
                .await?;
            let newest = got
                .kvs()
                .first()
                .map_or(0, etcd_client::KeyValue::mod_revision);
            Ok((u64::try_from(got.count()).unwrap_or(0), newest))
        })
    }

    fn definitions(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let prefix = self.keys.definitions();
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
                })
                .await?;
            let mut definitions = Vec::with_capacity(got.kvs().len());
            for kv in got.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                let name = key
                    .strip_prefix(prefix.as_str())
                    .and_then(|k| k.strip_suffix(".toml"));
                match (name, std::str::from_utf8(kv.value())) {
                    (Some(name), Ok(text)) => definitions.push((name.to_owned(), text.to_owned())),
                    _ => {
                        tracing::warn!(key = %key, "a key under the store's definitions that is no instance definition (<name>.toml, UTF-8 text); left out");
                    }
                }
            }
            Ok(definitions)
        })
    }

    fn define<'a>(
        &'a self,
        name: &'a str,
        text: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let key = self.keys.definition(name);
            let previous = match text {
                Some(text) => {
                    self.idempotent(|mut c| {
                        let (key, text) = (key.clone(), text.to_owned());
                        async move {
                            let put = c
                                .put(key, text, Some(PutOptions::new().with_prev_key()))
                                .await?;
                            Ok(put.prev_key().map(|kv| kv.value().to_vec()))
                        }
                    })
                    .await?
                }
                None => {
                    self.idempotent(|mut c| {
                        let key = key.clone();
                        async move {
                            let deleted = c
                                .delete(key, Some(DeleteOptions::new().with_prev_key()))
                                .await?;
                            Ok(deleted.prev_kvs().first().map(|kv| kv.value().to_vec()))
                        }
                    })
                    .await?
                }
            };
            Ok(previous.map(|v| String::from_utf8_lossy(&v).into_owned()))
        })
    }

    fn relays(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let prefix = self.keys.relays();
            let got = self
                .idempotent(|mut c| {
                    let prefix = prefix.clone();
                    let options = GetOptions::new().with_prefix().with_keys_only();
                    async move { c.get(prefix, Some(options)).await }
                })
                .await?;
            Ok(got
                .kvs()
                .iter()
                .filter_map(|kv| kv.key().strip_prefix(prefix.as_bytes()))
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect())
        })
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.leaving.store(true, Ordering::Release);
            if let Ok(id) = self.lease() {
                match self
                    .request(|mut c| async move { c.lease_revoke(id).await })
                    .await
                {
                    Ok(_) => tracing::info!(lease = id, "left the fleet (lease revoked)"),
                    Err(e) => {
                        tracing::warn!(lease = id, error = %e, "could not revoke the lease; its records expire with it")
                    }
                }
            }
        })
    }
}

/// The fleet's ledger from its values, oldest first, and how many values were refused: each
/// must be exactly one well-formed ledger line (what a relay writes), so a value written by
/// anyone else with several lines cannot become several billing events.
fn ledger_from_values<'a>(values: impl Iterator<Item = &'a [u8]>) -> (String, usize) {
    let mut refused = 0;
    let mut events: Vec<crate::ledger::Event> = values
        .filter_map(|value| {
            let event = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.strip_suffix('\n'))
                .filter(|line| !line.contains('\n'))
                .and_then(crate::ledger::Event::from_line);
            if event.is_none() {
                refused += 1;
            }
            event
        })
        .collect();
    events.sort_by_key(|e| e.at_ms);
    (
        events.iter().map(crate::ledger::Event::to_line).collect(),
        refused,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_ledger_values_that_are_not_one_line_each() {
        let values: [&[u8]; 5] = [
            b"2000 demo running 1000\n",
            b"1000 demo resuming 1000\n",
            b"3000 demo paused 0\n4000 demo running 9000000\n",
            b"garbage\n",
            b"5000 demo paused 0",
        ];
        let (text, refused) = ledger_from_values(values.into_iter());
        assert_eq!(text, "1000 demo resuming 1000\n2000 demo running 1000\n");
        assert_eq!(refused, 3);
    }
}
