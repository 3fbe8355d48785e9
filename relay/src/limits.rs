//! Admission for the pre-login phase (connection limits): how many connections may
//! wait before they have logged in, per relay, per instance and per source address. A
//! connection that has not logged in costs the relay a descriptor, a task and up to one login
//! packet of buffer, and costs its owner nothing: without a cap, a few thousand silent
//! sockets exhaust the descriptors and a real login times out behind them.
//!
//! The accept loop asks [`Admission::try_admit`] before it spawns anything. A refused
//! connection is answered with ERR 1040 `Too many connections` (what MySQL itself sends past
//! `max_connections`) and closed at once: no task, no greeting, no wake. An admitted one holds a
//! [`PendingPermit`] until it leaves the pre-login phase (the perceptron's budgets have admitted
//! its login; the direct route has its login's verdict) or closes; dropping the permit frees the
//! slot on every exit path.
//!
//! **Fair share when full.** Per-source caps alone let a few sources fill a shared cap (two
//! sources × 1,024 silent connections filled an instance's 2,048, and a real login from a
//! third got 1040). So when the relay's or the instance's cap is full, a newcomer whose source
//! holds fewer pending connections there than the largest holder **evicts** that holder's
//! oldest pending connection (closed at once, counted as `evicted`) and takes its place. A
//! source with few connections always gets in; only sources with as many as the largest are
//! refused.
//!
//! Source addresses are counted per IPv4 address and per IPv6 /64 (one host usually owns a
//! whole /64), IPv4-mapped IPv6 addresses as IPv4.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;

use authplugin::packet::ErrPacket;
use authplugin::packet::err::codes;

/// The caps, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCaps {
    /// Pre-login connections of the whole relay.
    pub per_relay: usize,
    /// Pre-login connections from one source (IPv4 address or IPv6 /64).
    pub per_source: usize,
}

/// Which cap refused a connection (`relay_connections_refused_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The relay-wide cap.
    Relay,
    /// The instance's cap.
    Instance,
    /// The source address's cap.
    Source,
}

impl Refusal {
    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Relay => "relay_pending_limit",
            Self::Instance => "instance_pending_limit",
            Self::Source => "source_pending_limit",
        }
    }
}

/// One pending connection, as its source's list holds it (oldest first).
#[derive(Debug)]
struct Holder {
    id: u64,
    instance: usize,
    /// The connection's task, aborted if it is evicted (from just after its spawn:
    /// [`Attach`]). Nothing is allocated for eviction: after its login a connection keeps
    /// nothing of it.
    task: Option<AbortHandle>,
}

/// One slot's cap and its pending connections now.
#[derive(Debug, Clone, Copy)]
struct Slot {
    cap: usize,
    pending: usize,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Each open slot (an instance or an endpoint), by its id.
    slots: HashMap<usize, Slot>,
    /// The id the next slot gets (ids are not reused, so a slot closed and a new one opened
    /// never share a pending connection's count).
    next_slot: usize,
    per_source: HashMap<IpAddr, usize>,
    /// Each source's pending connections, oldest first (what eviction picks from).
    holders: HashMap<IpAddr, VecDeque<Holder>>,
    /// Pending connections evicted between their admission and their task's [`Attach`]:
    /// aborted there.
    evicted_unattached: HashSet<u64>,
    next_id: u64,
}

impl Counts {
    /// Removes pending connection `id` of `source` from every count; false if it is no
    /// longer counted (evicted before).
    fn remove(&mut self, source: IpAddr, id: u64) -> bool {
        let Some(list) = self.holders.get_mut(&source) else {
            return false;
        };
        let Some(at) = list.iter().position(|h| h.id == id) else {
            return false;
        };
        let Some(holder) = list.remove(at) else {
            return false;
        };
        if list.is_empty() {
            self.holders.remove(&source);
        }
        self.total = self.total.saturating_sub(1);
        if let Some(slot) = self.slots.get_mut(&holder.instance) {
            slot.pending = slot.pending.saturating_sub(1);
        }
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Bounded by the connections pending now, not by every address ever seen.
                self.per_source.remove(&source);
            }
        }
        true
    }

    /// Makes room for one connection from `newcomer` where `of_instance` says (`None`: the
    /// whole relay) by evicting the oldest pending connection of the largest holder there, if
    /// it holds more than the newcomer would. Returns whether it did.
    fn evict_for(&mut self, newcomer: IpAddr, of_instance: Option<usize>) -> bool {
        let held_by = |list: &VecDeque<Holder>| {
            of_instance.map_or(list.len(), |i| {
                list.iter().filter(|h| h.instance == i).count()
            })
        };
        let mine = self.holders.get(&newcomer).map_or(0, held_by);
        let Some((victim, most)) = self
            .holders
            .iter()
            .map(|(source, list)| (*source, held_by(list)))
            .max_by_key(|(_, n)| *n)
        else {
            return false;
        };
        if most <= mine + 1 {
            return false;
        }
        let Some(oldest) = self.holders.get_mut(&victim).and_then(|list| {
            list.iter_mut()
                .find(|h| of_instance.is_none_or(|i| h.instance == i))
                .map(|h| (h.id, h.task.take()))
        }) else {
            return false;
        };
        self.remove(victim, oldest.0);
        match oldest.1 {
            Some(task) => task.abort(),
            None => {
                self.evicted_unattached.insert(oldest.0);
            }
        }
        true
    }
}

/// The relay's pre-login admission: one per relay, shared by every instance's accept loop.
/// Each instance (and each endpoint) holds a slot, opened when it starts and closed when it
/// is removed.
#[derive(Debug)]
pub struct Admission {
    caps: PendingCaps,
    counts: Mutex<Counts>,
}

impl Admission {
    /// An admission with `caps` and one slot per entry of `per_instance_caps`, with ids
    /// 0, 1, … in that order.
    #[must_use]
    pub fn new(caps: PendingCaps, per_instance_caps: Vec<usize>) -> Arc<Self> {
        let admission = Arc::new(Self {
            caps,
            counts: Mutex::new(Counts::default()),
        });
        for cap in per_instance_caps {
            admission.open_slot(cap);
        }
        admission
    }

    /// Opens a slot with its own cap (an instance added while the relay runs); returns its id.
    pub fn open_slot(&self, cap: usize) -> usize {
        let mut counts = self.lock();
        let id = counts.next_slot;
        counts.next_slot += 1;
        counts.slots.insert(id, Slot { cap, pending: 0 });
        id
    }

    /// Closes slot `id`: later connections for it are refused. Connections pending on it
    /// still free their place in the relay's and their source's counts when they end.
    pub fn close_slot(&self, id: usize) {
        self.lock().slots.remove(&id);
    }

    /// Admits one pre-login connection of instance `instance` from `source`, or says which
    /// cap is full.
    ///
    /// # Errors
    /// The [`Refusal`]: the connection is to be answered with [`too_many_connections`] and
    /// closed.
    pub fn try_admit(
        self: &Arc<Self>,
        instance: usize,
        source: IpAddr,
    ) -> Result<PendingPermit, Refusal> {
        let source = source_key(source);
        let mut counts = self.lock();
        if !counts.slots.contains_key(&instance) {
            return Err(Refusal::Instance);
        }
        if counts.per_source.get(&source).copied().unwrap_or(0) >= self.caps.per_source {
            return Err(Refusal::Source);
        }
        let mut evicted = false;
        if counts.total >= self.caps.per_relay {
            if !counts.evict_for(source, None) {
                return Err(Refusal::Relay);
            }
            evicted = true;
        }
        let Some(slot) = counts.slots.get(&instance).copied() else {
            return Err(Refusal::Instance);
        };
        if slot.pending >= slot.cap {
            if !counts.evict_for(source, Some(instance)) {
                return Err(Refusal::Instance);
            }
            evicted = true;
        }
        let id = counts.next_id;
        counts.next_id += 1;
        counts.total += 1;
        if let Some(slot) = counts.slots.get_mut(&instance) {
            slot.pending += 1;
        }
        *counts.per_source.entry(source).or_insert(0) += 1;
        counts.holders.entry(source).or_default().push_back(Holder {
            id,
            instance,
            task: None,
        });
        Ok(PendingPermit {
            admission: Arc::clone(self),
            source,
            id,
            made_room: evicted,
        })
    }

    /// Pre-login connections of `instance` now.
    #[must_use]
    pub fn pending(&self, instance: usize) -> usize {
        self.lock().slots.get(&instance).map_or(0, |s| s.pending)
    }

    fn release(&self, source: IpAddr, id: u64) {
        let mut counts = self.lock();
        counts.remove(source, id);
        // Evicted before its task was named, and gone since (or never named): nothing left
        // to abort, and the set stays bounded by the connections in between.
        counts.evicted_unattached.remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts stay consistent under a panic elsewhere: every update is one statement.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One admitted pre-login connection; dropping it frees the slot.
#[derive(Debug)]
pub struct PendingPermit {
    admission: Arc<Admission>,
    source: IpAddr,
    id: u64,
    made_room: bool,
}

impl PendingPermit {
    /// What names this connection's task to the admission once it is spawned, so that a
    /// newcomer from a smaller source that takes its place (the slot is already freed)
    /// closes it at once by aborting the task.
    pub fn attacher(&self) -> Attach {
        Attach {
            admission: Arc::clone(&self.admission),
            source: self.source,
            id: self.id,
        }
    }

    /// Whether admitting it evicted another pending connection.
    #[must_use]
    pub const fn made_room(&self) -> bool {
        self.made_room
    }
}

impl Drop for PendingPermit {
    fn drop(&mut self) {
        self.admission.release(self.source, self.id);
    }
}

/// A pending connection's place in the admission, to name its task once spawned
/// ([`PendingPermit::attacher`]).
#[derive(Debug)]
#[must_use = "a connection whose task is not attached cannot be evicted"]
pub struct Attach {
    admission: Arc<Admission>,
    source: IpAddr,
    id: u64,
}

impl Attach {
    /// Names the connection's task: aborted if the connection is evicted while pending, or
    /// at once if it was evicted before this. A connection no longer pending (its login
    /// admitted, or closed) is left alone.
    pub fn attach(self, task: AbortHandle) {
        let mut counts = self.admission.lock();
        if counts.evicted_unattached.remove(&self.id) {
            task.abort();
            return;
        }
        let holder = counts
            .holders
            .get_mut(&self.source)
            .and_then(|list| list.iter_mut().find(|h| h.id == self.id));
        if let Some(holder) = holder {
            holder.task = Some(task);
        }
    }
}

/// What a source address is counted as: IPv4 addresses as they are (IPv4-mapped IPv6 ones
/// too), IPv6 addresses by their /64.
#[must_use]
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

/// The ERR a refused connection gets instead of a greeting, framed and ready to write: code
/// 1040, sequence id 0 and no SQLSTATE, as MySQL and MariaDB send an ERR in place of their
/// greeting (before the greeting no `CLIENT_PROTOCOL_41` is agreed, and clients would show a
/// `#08004` marker as part of the message; they map 1040 to SQLSTATE 08004 themselves).
#[must_use]
pub fn too_many_connections() -> Vec<u8> {
    let (code, _sql_state) = codes::ER_CON_COUNT_ERROR;
    let err = ErrPacket {
        error_code: code,
        sql_state: None,
        error_message: b"Too many connections".to_vec(),
    };
    let mut out = Vec::with_capacity(32);
    authplugin::packet::write_packet(&mut out, 0, &err.to_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(per_relay: usize, per_source: usize, instances: &[usize]) -> Arc<Admission> {
        Admission::new(
            PendingCaps {
                per_relay,
                per_source,
            },
            instances.to_vec(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn refuses_past_each_cap_and_frees_slots_on_drop() {
        let a = admission(4, 2, &[2, 10]);
        let one = a.try_admit(0, ip("10.0.0.1")).unwrap();
        let two = a.try_admit(1, ip("10.0.0.1")).unwrap();
        assert_eq!(a.try_admit(1, ip("10.0.0.1")).unwrap_err(), Refusal::Source);
        drop(two);
        let three = a.try_admit(0, ip("10.0.0.2")).unwrap();
        // Full, and nobody holds more of it than the newcomer would: refused.
        assert_eq!(
            a.try_admit(0, ip("10.0.0.3")).unwrap_err(),
            Refusal::Instance
        );
        assert_eq!(a.pending(0), 2);
        let four = a.try_admit(1, ip("10.0.0.3")).unwrap();
        let five = a.try_admit(1, ip("10.0.0.4")).unwrap();
        assert_eq!(a.try_admit(1, ip("10.0.0.5")).unwrap_err(), Refusal::Relay);
        drop(one);
        assert_eq!(a.pending(0), 1);
        let again = a.try_admit(0, ip("10.0.0.1")).unwrap();
        assert!(!again.made_room());
        drop((three, four, five, again));
        assert_eq!(a.pending(0), 0);
        assert_eq!(a.pending(1), 0);
        let counts = a.lock();
        assert_eq!(counts.total, 0);
        assert!(counts.per_source.is_empty());
        assert!(counts.holders.is_empty());
    }

    /// A pending connection with a task named to the admission, as the accept loops make
    /// them (the task waits forever unless aborted).
    fn with_task(permit: PendingPermit) -> (PendingPermit, tokio::task::JoinHandle<()>) {
        let task = tokio::spawn(std::future::pending::<()>());
        permit.attacher().attach(task.abort_handle());
        (permit, task)
    }

    /// Two sources fill an instance's cap; a third source still gets in, by evicting the
    /// oldest pending connection of the largest holder, whose task is aborted.
    #[tokio::test]
    async fn a_full_cap_evicts_the_largest_holders_oldest_for_a_smaller_source() {
        let a = admission(100, 4, &[7, 100]);
        let (mut first, mut tasks): (Vec<_>, Vec<_>) = (0..4)
            .map(|_| with_task(a.try_admit(0, ip("10.0.0.1")).unwrap()))
            .unzip();
        let (second, second_tasks): (Vec<_>, Vec<_>) = (0..3)
            .map(|_| with_task(a.try_admit(0, ip("10.0.0.2")).unwrap()))
            .unzip();
        tasks.extend(second_tasks);
        let newcomer = a.try_admit(0, ip("10.0.0.3")).unwrap();
        assert!(newcomer.made_room());
        // The oldest of the largest holder ends, aborted; no other.
        let oldest = tasks.remove(0);
        assert!(oldest.await.unwrap_err().is_cancelled());
        tokio::task::yield_now().await;
        assert!(tasks.iter().all(|t| !t.is_finished()));
        assert_eq!(a.pending(0), 7);
        // The evicted permit's drop frees nothing twice.
        drop(first.remove(0));
        assert_eq!(a.pending(0), 7);
        drop(second);
        assert_eq!(a.pending(0), 4);
        // Room again: taken without eviction, until full at 3 + 1 + 3.
        let third: Vec<_> = (0..3)
            .map(|_| a.try_admit(0, ip("10.0.0.3")).unwrap())
            .collect();
        assert!(third.iter().all(|p| !p.made_room()));
        // Full: a newcomer evicts while it holds fewer than the largest holder less one.
        let _two_more: Vec<_> = (0..2)
            .map(|_| a.try_admit(0, ip("10.0.0.4")).unwrap())
            .collect();
        assert_eq!(a.pending(0), 7);
        assert_eq!(
            a.try_admit(0, ip("10.0.0.4")).unwrap_err(),
            Refusal::Instance
        );
        // The whole relay's cap is shared the same way.
        let r = admission(6, 6, &[100]);
        let _big: Vec<_> = (0..6)
            .map(|_| r.try_admit(0, ip("10.1.0.1")).unwrap())
            .collect();
        let small = r.try_admit(0, ip("10.1.0.2")).unwrap();
        assert!(small.made_room());
        assert_eq!(r.pending(0), 6);
    }

    /// A connection evicted before its task is named is aborted when it is; one whose
    /// login was admitted first is left alone, and nothing of either is kept.
    #[tokio::test]
    async fn eviction_before_the_task_is_named_aborts_it_when_it_is() {
        let a = admission(100, 2, &[2]);
        let early = a.try_admit(0, ip("10.0.0.1")).unwrap();
        let _other = a.try_admit(0, ip("10.0.0.1")).unwrap();
        let attach = early.attacher();
        assert!(a.try_admit(0, ip("10.0.0.2")).unwrap().made_room());
        let task = tokio::spawn(std::future::pending::<()>());
        attach.attach(task.abort_handle());
        assert!(task.await.unwrap_err().is_cancelled());
        drop(early);
        assert!(a.lock().evicted_unattached.is_empty());
        // Admitted (its permit dropped) before its task is named: not aborted.
        let b = admission(100, 10, &[5]);
        let admitted = b.try_admit(0, ip("10.0.0.3")).unwrap();
        let attach = admitted.attacher();
        drop(admitted);
        let task = tokio::spawn(std::future::pending::<()>());
        attach.attach(task.abort_handle());
        tokio::task::yield_now().await;
        assert!(!task.is_finished());
        task.abort();
    }

    #[test]
    fn counts_ipv6_per_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(source_key(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(source_key(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        let a = admission(10, 1, &[10]);
        let _held = a.try_admit(0, ip("2001:db8::1")).unwrap();
        assert_eq!(
            a.try_admit(0, ip("2001:db8::2")).unwrap_err(),
            Refusal::Source
        );
        let _other = a.try_admit(0, ip("2001:db8:0:1::1")).unwrap();
    }

    #[test]
    fn unknown_instance_is_refused_not_panicking() {
        let a = admission(10, 10, &[1]);
        assert_eq!(
            a.try_admit(7, ip("10.0.0.1")).unwrap_err(),
            Refusal::Instance
        );
    }

    #[test]
    fn a_closed_slot_refuses_and_its_pending_connections_still_free_the_relay() {
        let a = admission(2, 10, &[]);
        let first = a.open_slot(5);
        let held = a.try_admit(first, ip("10.0.0.1")).unwrap();
        let _other = a.try_admit(first, ip("10.0.0.2")).unwrap();
        a.close_slot(first);
        assert_eq!(
            a.try_admit(first, ip("10.0.0.3")).unwrap_err(),
            Refusal::Instance
        );
        assert_eq!(a.pending(first), 0);
        // A slot opened after gets a new id: the closed one's connections are not its own.
        let second = a.open_slot(5);
        assert_ne!(second, first);
        assert_eq!(
            a.try_admit(second, ip("10.0.0.3")).unwrap_err(),
            Refusal::Relay
        );
        drop(held);
        let _in = a.try_admit(second, ip("10.0.0.3")).unwrap();
        assert_eq!(a.pending(second), 1);
    }

    #[test]
    fn too_many_connections_is_err_1040_at_sequence_zero() {
        let bytes = too_many_connections();
        let (len, rest) = bytes.split_at(4);
        assert_eq!(usize::from(len[0]), rest.len());
        assert_eq!(len[3], 0, "sequence id 0: sent instead of a greeting");
        let err = ErrPacket::decode(rest).unwrap();
        assert_eq!(err.error_code, 1040);
        assert_eq!(err.sql_state, None);
        assert_eq!(err.error_message, b"Too many connections");
    }
}
