//! Wake-cost budgets: how many failed logins and how many wakes a source
//! address, and a user of an instance, may cause per window before the relay stops listening.
//! A wake costs the instance's owner money and a failed login is what a password-guessing bot
//! produces, so both are bounded before anything is spent.
//!
//! Each subject (a source address on one instance, counted per IPv4 address and IPv6 /64 as in
//! [`crate::limits`]; the same address on every instance, a ceiling at [`SOURCE_CEILING_FACTOR`]
//! times each limit; or a user name of one instance) has its counters in a fixed window that
//! starts at its first event. A source is kept per instance so that one tenant's failures, or
//! a guesser's, behind a shared address (a NAT, a proxy) do not block that address for the
//! other tenants of the relay. A counter that reaches its limit blocks the subject for
//! `block_for`:
//! - a **failed-login** block refuses the subject's logins: a source is refused at accept, on
//!   both routes, with ERR 1129 in place of the greeting (what MySQL sends a host past
//!   `max_connect_errors`); a user is refused after its login is read, with ERR 1226;
//! - a **wake** block refuses only logins that would wake the instance (the same codes); a
//!   running instance is still reachable. Besides all wakes, a source's **failed wakes** (wakes
//!   whose login the compute refused) have a small budget of their own: a password guesser that
//!   waits for each pause would otherwise buy a wake per guess.
//!
//! **Charged at admission.** A failed-login budget counted only at the verdict can be outrun:
//! logins held during a wake, or sent all at once, are admitted before any verdict lands (300
//! concurrent guesses got 297 verdicts against a budget of 20). So an admitted login is counted
//! as *pending* against its source and its user until its verdict ([`LoginCharge`]): a login
//! whose subject already has as many logins pending as its budget has failures left **waits**
//! for one of those verdicts ([`Budgets::admit_login`]) — a refusal spends the budget, an
//! accepted login frees its place — so at most the budget's number of guesses ever reach a
//! compute, while a pool opening more connections than that at once is only delayed by one
//! login's round trip.
//!
//! **One source cannot lock a user out.** A user's failed-login block needs failures from at
//! least two sources (unless the per-source budget is off): a single source is stopped by its
//! own budget, and a burst from it must not refuse the real user everywhere. Nor does a user's
//! block refuse a source that logged in as that user within `block_for` (the real user's own
//! address; [`GOOD_SOURCES`] of them are remembered per user): a few addresses guessing the
//! password lock out the addresses the account is not used from.
//!
//! Nothing here does I/O; only [`Budgets::admit_login`] reads the clock, to wait. The table is
//! bounded ([`MAX_SUBJECTS`]); a full one drops its least charged subjects that hold nothing
//! (no block, no login in flight), so probes that fill it do not hide a guesser; when every
//! subject holds a block or a login, new ones are not tracked (fail open, counted) rather than
//! refused, so filling it cannot lock everyone out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use authplugin::packet::ErrPacket;
use authplugin::packet::err::codes;

use crate::config::BudgetSettings;

/// Most subjects tracked at once (~200 bytes each, and their names).
pub const MAX_SUBJECTS: usize = 65_536;
/// Longest user name kept as a key; longer ones are cut (MySQL's own limit is 80 characters).
pub const MAX_USER_KEY_BYTES: usize = 320;
/// Longest instance name kept as a key; longer ones are cut. An endpoint charges a name that
/// is no instance under the name the client sent, which may be as long as a login.
pub const MAX_INSTANCE_KEY_BYTES: usize = 64;

/// `instance` cut to [`MAX_INSTANCE_KEY_BYTES`] (at a character's boundary).
fn instance_key(instance: &str) -> String {
    let mut end = instance.len().min(MAX_INSTANCE_KEY_BYTES);
    while !instance.is_char_boundary(end) {
        end -= 1;
    }
    instance.get(..end).unwrap_or_default().to_owned()
}
/// Least time between two full scans for expired subjects when the table is full.
const PRUNE_BACKOFF: Duration = Duration::from_secs(1);
/// A source's relay-wide ceiling, as a multiple of each per-instance source limit: an address
/// may spend its budget on a few instances, not on every instance of the relay.
pub const SOURCE_CEILING_FACTOR: u32 = 5;
/// Sources a user remembers having logged in from (the most recent).
pub const GOOD_SOURCES: usize = 4;

/// Who a budget is kept for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    /// A source address (IPv4, or an IPv6 /64), on one instance, or on every instance
    /// (`None`: the relay-wide ceiling).
    Source {
        /// The address.
        ip: IpAddr,
        /// The instance, or every instance.
        instance: Option<String>,
    },
    /// A user name of one instance.
    User {
        /// The instance.
        instance: String,
        /// The user name as the client sent it (cut at [`MAX_USER_KEY_BYTES`]).
        user: Vec<u8>,
    },
}

impl Subject {
    /// The subject for a client address on `instance`.
    #[must_use]
    pub fn source(ip: IpAddr, instance: &str) -> Self {
        Self::Source {
            ip: crate::limits::source_key(ip),
            instance: Some(instance_key(instance)),
        }
    }

    /// The subject for a client address on every instance: the ceiling.
    #[must_use]
    pub fn source_anywhere(ip: IpAddr) -> Self {
        Self::Source {
            ip: crate::limits::source_key(ip),
            instance: None,
        }
    }

    /// A source limit for this subject: `per_instance` itself, or the ceiling's multiple of it
    /// for a source on every instance (0 stays off).
    const fn source_limit(&self, per_instance: u32) -> u32 {
        match self {
            Self::Source { instance: None, .. } => {
                per_instance.saturating_mul(SOURCE_CEILING_FACTOR)
            }
            _ => per_instance,
        }
    }

    /// The subject for a user of `instance`.
    #[must_use]
    pub fn user(instance: &str, user: &[u8]) -> Self {
        Self::User {
            instance: instance_key(instance),
            user: user.get(..MAX_USER_KEY_BYTES).unwrap_or(user).to_vec(),
        }
    }

    /// `source` or `user`.
    #[must_use]
    pub const fn scope(&self) -> Scope {
        match self {
            Self::Source { .. } => Scope::Source,
            Self::User { .. } => Scope::User,
        }
    }
}

/// The kind of a [`Subject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// A source address.
    Source,
    /// A user of an instance.
    User,
}

impl Scope {
    /// `source` or `user` (admin API, metrics).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::User => "user",
        }
    }
}

/// Which budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Logins the compute refused (ERR 1045).
    FailedLogins,
    /// Wakes.
    Wakes,
    /// Wakes whose login the compute refused (a source only).
    FailedWakes,
}

impl Budget {
    /// The name used in the admin API, metrics and ERR 1226 (`failed_logins`, `wakes`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FailedLogins => "failed_logins",
            Self::Wakes => "wakes",
            Self::FailedWakes => "failed_wakes",
        }
    }
}

/// A login refused because a budget is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Whose budget.
    pub scope: Scope,
    /// Which budget.
    pub budget: Budget,
    /// The count that reached the limit.
    pub count: u32,
    /// How long the block still lasts.
    pub retry_after: Duration,
    /// Not a block: the subject's logins in flight already match what its budget has left,
    /// and none of their verdicts came in time.
    pub in_flight: bool,
}

impl Refusal {
    /// Metric label (`relay_budget_refusals_total{reason}`).
    #[must_use]
    pub const fn label(&self) -> &'static str {
        if self.in_flight {
            return match self.scope {
                Scope::Source => "source_logins_in_flight",
                Scope::User => "user_logins_in_flight",
            };
        }
        match (self.scope, self.budget) {
            (Scope::Source, Budget::FailedWakes) => "source_failed_wakes",
            (Scope::User, Budget::FailedWakes) => "user_failed_wakes",
            (Scope::Source, Budget::FailedLogins) => "source_failed_logins",
            (Scope::Source, Budget::Wakes) => "source_wakes",
            (Scope::User, Budget::FailedLogins) => "user_failed_logins",
            (Scope::User, Budget::Wakes) => "user_wakes",
        }
    }

    /// The ERR the client sees. A source gets `ER_HOST_IS_BLOCKED` (1129, HY000): the code
    /// MySQL sends a host it has blocked, which operators know to clear rather than retry. A
    /// user gets `ER_USER_LIMIT_REACHED` (1226, 42000) in MySQL's own wording for an account
    /// past a resource limit (`MAX_CONNECTIONS_PER_HOUR`); its SQLSTATE class 42 tells pools
    /// not to retry at once.
    #[must_use]
    pub fn client_error(&self, host: &str, user: &[u8]) -> ErrPacket {
        let secs = self.retry_after.as_secs().max(1);
        if self.in_flight {
            // Not blocked: busy. MySQL's own code for a server out of connection slots, which
            // clients and pools treat as "retry later".
            let (code, state) = codes::ER_CON_COUNT_ERROR;
            let whose = match self.scope {
                Scope::Source => format!("host '{host}'"),
                Scope::User => format!("user '{}'", printable(user)),
            };
            return ErrPacket::new(
                code,
                state,
                &format!(
                    "Too many logins in flight for {whose}: {} await their verdict, as many \
                     as its failed-login budget has left; retry in a moment",
                    self.count
                ),
            );
        }
        match self.scope {
            Scope::Source => {
                let (code, state) = codes::ER_HOST_IS_BLOCKED;
                let why = match self.budget {
                    Budget::FailedLogins => "many failed logins",
                    Budget::Wakes => "too many wakes of paused instances",
                    Budget::FailedWakes => "wakes of paused instances for failed logins",
                };
                ErrPacket::new(
                    code,
                    state,
                    &format!(
                        "Host '{host}' is blocked because of {why}; retry in {secs} s or unblock \
                         with 'relay blocks clear'"
                    ),
                )
            }
            Scope::User => {
                let (code, state) = codes::ER_USER_LIMIT_REACHED;
                let user = printable(user);
                ErrPacket::new(
                    code,
                    state,
                    &format!(
                        "User '{user}' has exceeded the '{}' resource (current value: {})",
                        self.budget.as_str(),
                        self.count
                    ),
                )
            }
        }
    }

    /// The ERR as sent in place of a greeting (sequence id 0, no SQLSTATE: none is agreed
    /// before the greeting, as for [`crate::limits::too_many_connections`]), framed.
    #[must_use]
    pub fn pre_greeting(&self, host: &str) -> Vec<u8> {
        let mut err = self.client_error(host, b"");
        err.sql_state = None;
        let mut out = Vec::with_capacity(96);
        authplugin::packet::write_packet(&mut out, 0, &err.to_bytes());
        out
    }
}

/// The user name is the client's own; printable ASCII only, so an ERR never carries control
/// bytes.
fn printable(user: &[u8]) -> String {
    user.iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// One current block, for the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Who is blocked.
    pub subject: Subject,
    /// Which budget ran out.
    pub budget: Budget,
    /// The count that reached the limit.
    pub count: u32,
    /// How long the block still lasts.
    pub remaining: Duration,
}

/// What `clear` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClearFilter {
    /// Every subject.
    All,
    /// One source address (its IPv4 address or IPv6 /64), on every instance.
    Source(IpAddr),
    /// A user name, of one instance or of every instance.
    User {
        /// The instance, or every instance.
        instance: Option<String>,
        /// The user name.
        user: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy)]
struct Block {
    budget: Budget,
    count: u32,
    until: Instant,
}

/// Which sources a user's failures came from: enough to tell one from several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureSources {
    None,
    One(IpAddr),
    Several,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    window_start: Instant,
    failed_logins: u32,
    wakes: u32,
    failed_wakes: u32,
    block: Option<Block>,
    /// Admitted logins without a verdict yet ([`LoginCharge`]); kept across windows.
    pending: u32,
    /// For a user: where its failed logins came from in this window.
    failure_sources: FailureSources,
    /// For a user: the sources it logged in from lately, and when; kept across windows.
    good_sources: [Option<(IpAddr, Instant)>; GOOD_SOURCES],
}

impl Entry {
    const fn new(now: Instant) -> Self {
        Self {
            window_start: now,
            failed_logins: 0,
            wakes: 0,
            failed_wakes: 0,
            block: None,
            pending: 0,
            failure_sources: FailureSources::None,
            good_sources: [None; GOOD_SOURCES],
        }
    }

    /// Starts a new window (and forgets an expired block with its counts) when due; logins
    /// still pending stay counted.
    fn roll(&mut self, now: Instant, window: Duration) {
        let due = match self.block {
            Some(block) => now >= block.until,
            None => now.saturating_duration_since(self.window_start) >= window,
        };
        if due {
            *self = Self {
                pending: self.pending,
                good_sources: self.good_sources,
                ..Self::new(now)
            };
        }
    }

    fn live(&self, now: Instant, window: Duration, remember: Duration) -> bool {
        self.pending > 0
            || self.logged_in_lately(None, now, remember)
            || match self.block {
                Some(b) => now < b.until,
                None => now.saturating_duration_since(self.window_start) < window,
            }
    }

    /// Whether the user logged in from `from` (any source: `None`) within `remember` of `now`.
    fn logged_in_lately(&self, from: Option<IpAddr>, now: Instant, remember: Duration) -> bool {
        self.good_sources.iter().flatten().any(|(ip, at)| {
            from.is_none_or(|f| f == *ip) && now.saturating_duration_since(*at) < remember
        })
    }

    /// Remembers a login of the user's from `from` at `now`, in place of its oldest.
    fn logged_in_from(&mut self, from: IpAddr, now: Instant) {
        let slot = self
            .good_sources
            .iter()
            .position(|g| g.is_some_and(|(ip, _)| ip == from))
            .or_else(|| self.good_sources.iter().position(Option::is_none))
            .or_else(|| {
                (0..GOOD_SOURCES).min_by_key(|&i| {
                    self.good_sources
                        .get(i)
                        .copied()
                        .flatten()
                        .map(|(_, at)| at)
                })
            });
        if let Some(g) = slot.and_then(|i| self.good_sources.get_mut(i)) {
            *g = Some((from, now));
        }
    }

    /// The block that refuses a login needing `budget`: a failed-login block refuses every
    /// login, a wake block only those that wake.
    fn refusal(&self, scope: Scope, wake: bool, now: Instant) -> Option<Refusal> {
        let b = self.block?;
        (now < b.until && (b.budget == Budget::FailedLogins || wake)).then(|| Refusal {
            scope,
            budget: b.budget,
            count: b.count,
            retry_after: b.until.saturating_duration_since(now),
            in_flight: false,
        })
    }
}

#[derive(Debug)]
struct Table {
    entries: HashMap<Subject, Entry>,
    /// When a full table may be scanned for expired subjects again.
    next_prune: Option<Instant>,
    /// Events not counted because the table was full.
    untracked: u64,
}

/// Blocks in force per scope and budget.
pub type BlockCounts = Vec<((Scope, Budget), usize)>;

/// The relay's budgets: one per relay, shared by every instance.
#[derive(Debug)]
pub struct Budgets {
    config: BudgetSettings,
    table: Mutex<Table>,
    /// Woken whenever a pending login is settled: logins waiting for room re-check.
    settled: tokio::sync::Notify,
}

/// What [`Budgets::try_admit`] decides.
#[derive(Debug)]
pub enum Admission {
    /// Admitted: pending against its subjects until its verdict.
    Admitted(LoginCharge),
    /// Its source or user has as many logins pending as failures left: wait for a verdict.
    Wait(Refusal),
}

/// An admitted login, counted as pending against its source and its user until its verdict.
/// [`LoginCharge::refused`] turns it into a failed login; dropping it otherwise (accepted, or
/// ended without a verdict) frees its place.
#[derive(Debug)]
pub struct LoginCharge {
    budgets: Arc<Budgets>,
    ip: IpAddr,
    /// The subjects it is pending against (none whose budget is off or untracked).
    pending_on: Vec<Subject>,
    user: Subject,
    /// The login wakes the instance.
    wake: bool,
    /// When the compute refused it ([`LoginCharge::refused`]).
    refused_at: Option<Instant>,
    /// Whether the compute accepted it ([`LoginCharge::accepted`]).
    accepted: bool,
}

impl LoginCharge {
    /// The compute refused the login (ERR 1045): one failed login for its source and its
    /// user, and one failed wake for its source if it woke the instance.
    pub fn refused(mut self, now: Instant) {
        self.refused_at = Some(now);
    }

    /// The compute accepted the login: its source's failed wakes are forgotten (as MySQL
    /// forgets a host's connect errors on a good login), so a person who mistyped a password
    /// twice is not kept from waking the instance; a guesser never gets here.
    pub fn accepted(mut self) {
        self.accepted = true;
    }
}

impl Drop for LoginCharge {
    fn drop(&mut self) {
        let failure = self
            .refused_at
            .map(|at| (at, self.ip, &self.user, self.wake));
        let good = self.accepted.then_some((self.ip, &self.user));
        self.budgets.settle(&self.pending_on, failure, good);
    }
}

impl Budgets {
    /// Budgets with `config` and nothing counted yet.
    #[must_use]
    pub fn new(config: BudgetSettings) -> Self {
        Self {
            config,
            table: Mutex::new(Table {
                entries: HashMap::new(),
                next_prune: None,
                untracked: 0,
            }),
            settled: tokio::sync::Notify::new(),
        }
    }

    /// At accept: the failed-login block of the connection's source on every instance, and
    /// on `instance` when the listener is an instance's own, if any.
    #[must_use]
    pub fn source_refusal(
        &self,
        ip: IpAddr,
        instance: Option<&str>,
        now: Instant,
    ) -> Option<Refusal> {
        let table = self.lock();
        let on_instance = instance.map(|i| Subject::source(ip, i));
        [Some(Subject::source_anywhere(ip)), on_instance]
            .iter()
            .flatten()
            .find_map(|s| table.entries.get(s)?.refusal(Scope::Source, false, now))
    }

    /// After the login is read: [`Budgets::try_admit`], waiting (until `deadline` at most)
    /// while its source or user has as many logins in flight as failures left.
    ///
    /// # Errors
    /// The [`Refusal`]: the login is refused without a wake; past `deadline`, one with
    /// `in_flight` set.
    pub async fn admit_login(
        self: &Arc<Self>,
        ip: IpAddr,
        instance: &str,
        user: &[u8],
        wake: bool,
        deadline: tokio::time::Instant,
    ) -> Result<LoginCharge, Refusal> {
        loop {
            // Registered before the check, so a verdict between the two is not missed.
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match self.try_admit(ip, instance, user, wake, Instant::now())? {
                Admission::Admitted(charge) => return Ok(charge),
                Admission::Wait(busy) => {
                    if tokio::time::timeout_at(deadline, settled).await.is_err() {
                        return Err(busy);
                    }
                }
            }
        }
    }

    /// Admits a login now, or says why not: refused if its source or its user is blocked;
    /// to wait if either has as many logins pending as its failed-login budget has left;
    /// otherwise pending against both, and, when it would wake the instance (`wake`), one wake
    /// charged to both, unless either's wake budget is spent.
    ///
    /// # Errors
    /// The [`Refusal`]: the login is refused without a wake.
    pub fn try_admit(
        self: &Arc<Self>,
        ip: IpAddr,
        instance: &str,
        user: &[u8],
        wake: bool,
        now: Instant,
    ) -> Result<Admission, Refusal> {
        let c = self.config;
        let here = Subject::source(ip, instance);
        let anywhere = Subject::source_anywhere(ip);
        let user = Subject::user(instance, user);
        let mut table = self.lock();
        // A source the user logged in from lately is not held to the user's failed-login
        // block: that is the real user's address. (Its wake budget still holds.)
        let from = crate::limits::source_key(ip);
        let trusted = table
            .entries
            .get(&user)
            .is_some_and(|e| e.logged_in_lately(Some(from), now, c.block_for));
        for subject in [&here, &anywhere, &user] {
            if let Some(entry) = table.entries.get_mut(subject) {
                entry.roll(now, c.window);
                if let Some(r) = entry.refusal(subject.scope(), wake, now)
                    && !(trusted && r.scope == Scope::User && r.budget == Budget::FailedLogins)
                {
                    return Err(r);
                }
            }
        }
        // The subjects the login is pending against until its verdict.
        let subjects: Vec<&Subject> = if trusted {
            vec![&here, &anywhere]
        } else {
            vec![&here, &anywhere, &user]
        };
        let limit_of = |subject: &Subject| match subject {
            Subject::Source { .. } => subject.source_limit(c.failed_logins_per_source),
            Subject::User { .. } => c.failed_logins_per_user,
        };
        for subject in &subjects {
            let limit = limit_of(subject);
            // A user's failures from one source alone never block it (see `fail`), so they
            // do not hold its logins back either.
            let blockable = |e: &Entry| {
                subject.scope() == Scope::Source
                    || c.failed_logins_per_source == 0
                    || e.failure_sources == FailureSources::Several
            };
            if let Some(e) = table.entries.get(*subject)
                && limit > 0
                && blockable(e)
                && e.failed_logins.saturating_add(e.pending) >= limit
            {
                return Ok(Admission::Wait(Refusal {
                    scope: subject.scope(),
                    budget: Budget::FailedLogins,
                    count: e.pending,
                    retry_after: Duration::from_secs(1),
                    in_flight: true,
                }));
            }
        }
        if wake {
            for subject in [&here, &anywhere] {
                let limit = subject.source_limit(c.wakes_per_source);
                self.count(&mut table, subject.clone(), limit, Budget::Wakes, now);
            }
            self.count(
                &mut table,
                user.clone(),
                c.wakes_per_user,
                Budget::Wakes,
                now,
            );
        }
        let mut pending_on = Vec::with_capacity(3);
        for subject in subjects {
            if limit_of(subject) == 0 {
                continue;
            }
            if !table.entries.contains_key(subject) && !self.make_room(&mut table, now) {
                table.untracked = table.untracked.saturating_add(1);
                continue;
            }
            let entry = table
                .entries
                .entry(subject.clone())
                .or_insert_with(|| Entry::new(now));
            entry.pending = entry.pending.saturating_add(1);
            pending_on.push(subject.clone());
        }
        Ok(Admission::Admitted(LoginCharge {
            budgets: Arc::clone(self),
            ip,
            pending_on,
            user,
            wake,
            refused_at: None,
            accepted: false,
        }))
    }

    /// Settles an admitted login: its pending places are freed; if the compute refused it
    /// (`failure`: when, the source, the user and whether it woke the instance), the failure is
    /// counted; if it accepted it (`good`: the source and the user), the source has its failed
    /// wakes forgotten and the user remembers it as one it logged in from. Logins waiting for
    /// room re-check.
    fn settle(
        &self,
        pending_on: &[Subject],
        failure: Option<(Instant, IpAddr, &Subject, bool)>,
        good: Option<(IpAddr, &Subject)>,
    ) {
        let mut table = self.lock();
        for subject in pending_on {
            if let Some(e) = table.entries.get_mut(subject) {
                e.pending = e.pending.saturating_sub(1);
            }
        }
        if let Some((ip, user @ Subject::User { instance, .. })) = good {
            for source in [Subject::source(ip, instance), Subject::source_anywhere(ip)] {
                if let Some(e) = table.entries.get_mut(&source) {
                    e.failed_wakes = 0;
                }
            }
            let now = Instant::now();
            if table.entries.contains_key(user) || self.make_room(&mut table, now) {
                table
                    .entries
                    .entry(user.clone())
                    .or_insert_with(|| Entry::new(now))
                    .logged_in_from(crate::limits::source_key(ip), now);
            }
        }
        if let Some((now, ip, user, wake)) = failure {
            self.fail(&mut table, ip, user.clone(), wake, now);
        }
        drop(table);
        self.settled.notify_waiters();
    }

    /// Counts a login the compute refused (ERR 1045) against its source and its user, for a
    /// login that was not admitted through [`Budgets::try_admit`] (tests).
    #[cfg(test)]
    pub fn record_failed_login(&self, ip: IpAddr, instance: &str, user: &[u8], now: Instant) {
        let mut table = self.lock();
        self.fail(&mut table, ip, Subject::user(instance, user), false, now);
    }

    fn fail(&self, table: &mut Table, ip: IpAddr, user: Subject, wake: bool, now: Instant) {
        let c = self.config;
        let Subject::User { instance, .. } = &user else {
            return;
        };
        for source in [Subject::source(ip, instance), Subject::source_anywhere(ip)] {
            if wake {
                let limit = source.source_limit(c.failed_wakes_per_source);
                self.count(table, source.clone(), limit, Budget::FailedWakes, now);
            }
            let limit = source.source_limit(c.failed_logins_per_source);
            self.count(table, source, limit, Budget::FailedLogins, now);
        }
        // A user's block needs failures from several sources: one source is stopped by its
        // own budget and must not lock the user out everywhere (unless that budget is off).
        let from = crate::limits::source_key(ip);
        if let Some(e) = table.entries.get_mut(&user) {
            e.roll(now, c.window);
        }
        let several = match table.entries.get(&user).map(|e| e.failure_sources) {
            Some(FailureSources::One(first)) => first != from,
            Some(FailureSources::Several) => true,
            Some(FailureSources::None) | None => false,
        };
        let may_block = several || c.failed_logins_per_source == 0;
        self.count_with(
            table,
            user.clone(),
            c.failed_logins_per_user,
            Budget::FailedLogins,
            now,
            may_block,
        );
        if let Some(e) = table.entries.get_mut(&user) {
            e.failure_sources = match e.failure_sources {
                FailureSources::None => FailureSources::One(from),
                FailureSources::One(first) if first == from => FailureSources::One(first),
                _ => FailureSources::Several,
            };
        }
    }

    /// Every block in force, sources first.
    #[must_use]
    pub fn blocks(&self, now: Instant) -> Vec<BlockInfo> {
        let table = self.lock();
        let mut out: Vec<BlockInfo> = table
            .entries
            .iter()
            .filter_map(|(subject, e)| {
                let b = e.block.filter(|b| now < b.until)?;
                Some(BlockInfo {
                    subject: subject.clone(),
                    budget: b.budget,
                    count: b.count,
                    remaining: b.until.saturating_duration_since(now),
                })
            })
            .collect();
        out.sort_by(|a, b| a.subject.cmp(&b.subject));
        out
    }

    /// Forgets the blocks and counts `filter` names; returns how many blocks were lifted.
    pub fn clear(&self, filter: &ClearFilter, now: Instant) -> usize {
        let mut table = self.lock();
        let mut lifted = 0;
        table.entries.retain(|subject, e| {
            let hit = match (filter, subject) {
                (ClearFilter::All, _) => true,
                (ClearFilter::Source(ip), Subject::Source { ip: s, .. }) => {
                    *s == crate::limits::source_key(*ip)
                }
                (
                    ClearFilter::User { instance, user },
                    Subject::User {
                        instance: i,
                        user: u,
                    },
                ) => u == user && instance.as_ref().is_none_or(|want| want == i),
                _ => false,
            };
            if hit && e.block.is_some_and(|b| now < b.until) {
                lifted += 1;
            }
            !hit
        });
        lifted
    }

    /// Blocks in force by scope and budget, and events not counted for lack of room: for
    /// the metrics.
    #[must_use]
    pub fn gauge(&self, now: Instant) -> (BlockCounts, u64) {
        let table = self.lock();
        let mut counts: BlockCounts = Vec::new();
        for scope in [Scope::Source, Scope::User] {
            for budget in [Budget::FailedLogins, Budget::Wakes, Budget::FailedWakes] {
                let n = table
                    .entries
                    .iter()
                    .filter(|(s, e)| {
                        s.scope() == scope
                            && e.block.is_some_and(|b| b.budget == budget && now < b.until)
                    })
                    .count();
                counts.push(((scope, budget), n));
            }
        }
        (counts, table.untracked)
    }

    /// Adds one to `subject`'s `budget` counter (limit 0: off) and blocks it when the count
    /// reaches `limit`.
    fn count(&self, table: &mut Table, subject: Subject, limit: u32, budget: Budget, now: Instant) {
        self.count_with(table, subject, limit, budget, now, true);
    }

    /// [`Budgets::count`], blocking at the limit only if `may_block`.
    fn count_with(
        &self,
        table: &mut Table,
        subject: Subject,
        limit: u32,
        budget: Budget,
        now: Instant,
        may_block: bool,
    ) {
        if limit == 0 {
            return;
        }
        if !table.entries.contains_key(&subject) && !self.make_room(table, now) {
            table.untracked = table.untracked.saturating_add(1);
            return;
        }
        let entry = table
            .entries
            .entry(subject)
            .or_insert_with(|| Entry::new(now));
        entry.roll(now, self.config.window);
        let n = match budget {
            Budget::FailedLogins => &mut entry.failed_logins,
            Budget::Wakes => &mut entry.wakes,
            Budget::FailedWakes => &mut entry.failed_wakes,
        };
        *n = n.saturating_add(1);
        let count = *n;
        // A failed-login block (refuses every login) replaces a wake block (refuses wakes).
        let stronger = |b: Block| budget == Budget::FailedLogins && b.budget != budget;
        if may_block && count >= limit && entry.block.is_none_or(|b| now >= b.until || stronger(b))
        {
            entry.block = Some(Block {
                budget,
                count,
                until: now + self.config.block_for,
            });
        }
    }

    /// Whether a new subject fits. A full table drops its expired subjects, then, if still
    /// full, the least charged eighth of those that hold nothing that matters (no block in
    /// force, no login in flight, no recent good login): filled with probes (names that are
    /// no instance cost nothing), it must still track a guesser, whose own subjects count
    /// more failures than each probe's. One scan makes room for many subjects; when nothing
    /// can go, none is tried again for [`PRUNE_BACKOFF`].
    fn make_room(&self, table: &mut Table, now: Instant) -> bool {
        if table.entries.len() < MAX_SUBJECTS {
            return true;
        }
        if table.next_prune.is_some_and(|t| now < t) {
            return false;
        }
        let (window, remember) = (self.config.window, self.config.block_for);
        table.entries.retain(|_, e| e.live(now, window, remember));
        if table.entries.len() >= MAX_SUBJECTS {
            let mut weak: Vec<(u32, Instant, Subject)> = table
                .entries
                .iter()
                .filter(|(_, e)| {
                    e.pending == 0
                        && e.block.is_none_or(|b| now >= b.until)
                        && !e.logged_in_lately(None, now, remember)
                })
                .map(|(s, e)| {
                    let weight = e
                        .failed_logins
                        .saturating_add(e.wakes)
                        .saturating_add(e.failed_wakes);
                    (weight, e.window_start, s.clone())
                })
                .collect();
            let evict = (MAX_SUBJECTS / 8).min(weak.len());
            if evict > 0 && evict < weak.len() {
                weak.select_nth_unstable_by_key(evict, |(w, at, _)| (*w, *at));
            }
            for (_, _, subject) in weak.into_iter().take(evict) {
                table.entries.remove(&subject);
            }
        }
        let room = table.entries.len() < MAX_SUBJECTS;
        if !room {
            table.next_prune = Some(now + PRUNE_BACKOFF);
        }
        room
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Every update is a whole assignment or an increment: a poisoned lock still guards a
        // consistent table.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: BudgetSettings = BudgetSettings {
        window: Duration::from_secs(60),
        block_for: Duration::from_secs(300),
        failed_logins_per_source: 3,
        failed_logins_per_user: 5,
        wakes_per_source: 2,
        wakes_per_user: 10,
        failed_wakes_per_source: 2,
    };

    /// A login admitted now (panics if it would have to wait).
    fn admit(
        b: &Arc<Budgets>,
        ip: IpAddr,
        instance: &str,
        user: &[u8],
        wake: bool,
        now: Instant,
    ) -> Result<LoginCharge, Refusal> {
        match b.try_admit(ip, instance, user, wake, now)? {
            Admission::Admitted(charge) => Ok(charge),
            Admission::Wait(r) => panic!("would wait: {r:?}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_a_source_after_its_failed_logins_until_block_for_passes() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        for i in 0..3 {
            assert_eq!(
                b.source_refusal(src, Some("demo"), t0),
                None,
                "after {i} failures"
            );
            admit(&b, src, "demo", b"root", false, t0)
                .unwrap()
                .refused(t0);
        }
        let r = b.source_refusal(src, Some("demo"), t0).unwrap();
        assert_eq!(
            (r.scope, r.budget, r.count),
            (Scope::Source, Budget::FailedLogins, 3)
        );
        assert_eq!(r.label(), "source_failed_logins");
        // Another source and another user are not affected; the blocked source is, whatever
        // user it names, and even for logins that wake nothing.
        assert_eq!(b.source_refusal(ip("10.0.0.2"), Some("demo"), t0), None);
        admit(&b, ip("10.0.0.2"), "demo", b"root", true, t0).unwrap();
        assert_eq!(admit(&b, src, "demo", b"other", false, t0).unwrap_err(), r);
        let later = t0 + Duration::from_secs(299);
        assert!(b.source_refusal(src, Some("demo"), later).is_some());
        let after = t0 + Duration::from_secs(300);
        assert_eq!(b.source_refusal(src, Some("demo"), after), None);
        admit(&b, src, "demo", b"root", true, after).unwrap();
        // The counts went with the block.
        b.record_failed_login(src, "demo", b"root", after);
        assert_eq!(b.source_refusal(src, Some("demo"), after), None);
    }

    #[test]
    fn failures_spread_over_windows_never_block() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        for i in 0..10u64 {
            let now = t0 + Duration::from_secs(40 * i);
            b.record_failed_login(src, "demo", b"app", now);
            assert_eq!(
                b.source_refusal(src, Some("demo"), now),
                None,
                "at failure {i}"
            );
        }
    }

    #[test]
    fn a_user_past_its_failed_logins_gets_err_1226_from_any_source() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        for i in 0..5u8 {
            b.record_failed_login(IpAddr::from([10, 0, 1, i]), "demo", b"root", t0);
        }
        let r = admit(&b, ip("10.9.9.9"), "demo", b"root", false, t0).unwrap_err();
        assert_eq!(r.label(), "user_failed_logins");
        let err = r.client_error("10.9.9.9", b"root\n\x1b");
        assert_eq!(err.error_code, 1226);
        assert_eq!(err.sql_state, Some(*b"42000"));
        assert_eq!(
            err.error_message,
            b"User 'root??' has exceeded the 'failed_logins' resource (current value: 5)"
        );
        // Same name on another instance: another account.
        admit(&b, ip("10.9.9.9"), "other", b"root", true, t0).unwrap();
    }

    #[test]
    fn wake_budget_refuses_only_logins_that_would_wake() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        admit(&b, src, "demo", b"app", true, t0).unwrap();
        admit(&b, src, "demo", b"app", true, t0).unwrap();
        let r = admit(&b, src, "demo", b"app", true, t0).unwrap_err();
        assert_eq!(r.label(), "source_wakes");
        let err = r.client_error("10.0.0.1", b"app");
        assert_eq!(err.error_code, 1129);
        assert_eq!(err.sql_state, Some(*b"HY000"));
        // A running instance stays reachable, and accept does not refuse the source.
        admit(&b, src, "demo", b"app", false, t0).unwrap();
        assert_eq!(b.source_refusal(src, Some("demo"), t0), None);
    }

    #[test]
    fn a_refused_wake_charges_nobody() {
        let b = Arc::new(Budgets::new(BudgetSettings {
            wakes_per_user: 1,
            ..CONFIG
        }));
        let t0 = Instant::now();
        admit(&b, ip("10.0.0.1"), "demo", b"app", true, t0).unwrap();
        // The user is spent: the second source's wake is refused and not counted against it.
        for _ in 0..3 {
            let r = admit(&b, ip("10.0.0.2"), "demo", b"app", true, t0).unwrap_err();
            assert_eq!(r.label(), "user_wakes");
        }
        // Had the refusals been charged to the source, it would be spent by now.
        admit(&b, ip("10.0.0.2"), "demo", b"other", true, t0).unwrap();
        admit(&b, ip("10.0.0.2"), "demo", b"third", true, t0).unwrap();
        let r = admit(&b, ip("10.0.0.2"), "demo", b"fourth", true, t0).unwrap_err();
        assert_eq!(r.label(), "source_wakes");
    }

    #[test]
    fn zero_turns_a_budget_off() {
        let b = Arc::new(Budgets::new(BudgetSettings {
            failed_logins_per_source: 0,
            failed_logins_per_user: 0,
            wakes_per_source: 0,
            wakes_per_user: 0,
            ..CONFIG
        }));
        let t0 = Instant::now();
        for _ in 0..1000 {
            admit(&b, ip("10.0.0.1"), "demo", b"root", true, t0).unwrap();
            b.record_failed_login(ip("10.0.0.1"), "demo", b"root", t0);
        }
        assert!(b.blocks(t0).is_empty());
        assert!(b.lock().entries.is_empty());
    }

    #[test]
    fn lists_and_clears_blocks_by_source_user_or_all() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        // Each user's failures come from two sources (one alone never blocks a user); the
        // first of each pair spends its own budget.
        for (first, second, user) in [
            ("10.0.0.1", "10.0.0.2", &b"root"[..]),
            ("2001:db8::1", "2001:db8:1::1", b"admin"),
        ] {
            for i in 0..5 {
                let from = if i < 3 { first } else { second };
                b.record_failed_login(ip(from), "demo", user, t0);
            }
        }
        let blocks = b.blocks(t0);
        assert_eq!(blocks.len(), 4, "{blocks:?}");
        assert_eq!(blocks[0].subject, Subject::source(ip("10.0.0.1"), "demo"));
        assert_eq!(blocks[1].subject, Subject::source(ip("2001:db8::"), "demo"));
        assert_eq!(blocks[0].remaining, Duration::from_secs(300));
        assert_eq!(b.gauge(t0).0[0], ((Scope::Source, Budget::FailedLogins), 2));
        assert_eq!(b.clear(&ClearFilter::Source(ip("2001:db8::7")), t0), 1);
        assert_eq!(
            b.clear(
                &ClearFilter::User {
                    instance: None,
                    user: b"root".to_vec()
                },
                t0
            ),
            1
        );
        assert!(
            b.source_refusal(ip("2001:db8::1"), Some("demo"), t0)
                .is_none()
        );
        assert_eq!(b.blocks(t0).len(), 2);
        assert_eq!(b.clear(&ClearFilter::All, t0), 2);
        assert!(b.blocks(t0).is_empty());
    }

    #[test]
    fn a_table_full_of_probes_still_tracks_a_guesser() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        {
            // Filled by probes of names that are no instance: one failure each.
            let mut table = b.lock();
            for i in 0..MAX_SUBJECTS {
                let user = i.to_le_bytes().to_vec();
                let mut e = Entry::new(t0);
                e.failed_logins = 1;
                table.entries.insert(Subject::user("ghost", &user), e);
            }
        }
        for _ in 0..3 {
            b.record_failed_login(ip("10.0.0.1"), "x", b"new", t0);
        }
        assert!(b.source_refusal(ip("10.0.0.1"), Some("x"), t0).is_some());
        assert_eq!(b.gauge(t0).1, 0, "nothing went untracked");
        assert!(b.lock().entries.len() <= MAX_SUBJECTS);
    }

    #[test]
    fn a_table_full_of_blocks_fails_open_and_counts_what_it_missed() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        {
            let mut table = b.lock();
            for i in 0..MAX_SUBJECTS {
                let user = i.to_le_bytes().to_vec();
                let mut e = Entry::new(t0);
                e.block = Some(Block {
                    budget: Budget::FailedLogins,
                    count: 5,
                    until: t0 + Duration::from_secs(300),
                });
                table.entries.insert(Subject::user("demo", &user), e);
            }
        }
        for _ in 0..10 {
            b.record_failed_login(ip("10.0.0.1"), "x", b"new", t0);
        }
        assert_eq!(b.source_refusal(ip("10.0.0.1"), Some("x"), t0), None);
        // Each failure missed its source on the instance, on every instance, and its user.
        assert_eq!(b.gauge(t0).1, 30);
        // Once the blocks have passed, they make room.
        let later = t0 + Duration::from_secs(301);
        for _ in 0..3 {
            b.record_failed_login(ip("10.0.0.1"), "x", b"new", later);
        }
        assert!(b.source_refusal(ip("10.0.0.1"), Some("x"), later).is_some());
    }

    #[test]
    fn a_source_is_blocked_per_instance_under_a_relay_wide_ceiling() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let nat = ip("10.0.0.1");
        // Three failures on tenant a's instance: the address is blocked there only.
        for _ in 0..3 {
            admit(&b, nat, "a", b"app", false, t0).unwrap().refused(t0);
        }
        assert!(b.source_refusal(nat, Some("a"), t0).is_some());
        assert_eq!(
            admit(&b, nat, "a", b"other", false, t0)
                .unwrap_err()
                .label(),
            "source_failed_logins"
        );
        assert_eq!(b.source_refusal(nat, Some("b"), t0), None);
        assert_eq!(b.source_refusal(nat, None, t0), None);
        admit(&b, nat, "b", b"app", false, t0).unwrap().accepted();
        // Spread over instances, the ceiling (5 × 3) blocks it on every instance.
        for instance in ["b", "c", "d", "e"] {
            for _ in 0..3 {
                admit(&b, nat, instance, b"app", false, t0)
                    .unwrap()
                    .refused(t0);
            }
        }
        let r = b.source_refusal(nat, None, t0).unwrap();
        assert_eq!(r.count, 15);
        assert!(b.source_refusal(nat, Some("f"), t0).is_some());
        assert!(admit(&b, nat, "f", b"app", false, t0).is_err());
        assert_eq!(b.clear(&ClearFilter::Source(nat), t0), 6);
        assert!(b.blocks(t0).is_empty());
    }

    #[test]
    fn a_users_block_spares_the_sources_it_logged_in_from_lately() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let home = ip("192.0.2.10");
        admit(&b, home, "demo", b"app", false, t0)
            .unwrap()
            .accepted();
        // Five guessers, one failure each: the user is blocked (5, from several sources).
        for i in 1..=5u8 {
            let guesser = IpAddr::from([203, 0, 113, i]);
            admit(&b, guesser, "demo", b"app", false, t0)
                .unwrap()
                .refused(t0);
        }
        let stranger = ip("198.51.100.1");
        let r = admit(&b, stranger, "demo", b"app", false, t0).unwrap_err();
        assert_eq!(r.label(), "user_failed_logins");
        // The user's own address still logs in, and is still held to its own budgets.
        admit(&b, home, "demo", b"app", false, t0)
            .unwrap()
            .accepted();
        // Not for ever: blocked again once block_for has passed since its last login, it is
        // a stranger too.
        let later = t0 + Duration::from_secs(301);
        for i in 1..=5u8 {
            let guesser = IpAddr::from([203, 0, 113, 10 + i]);
            admit(&b, guesser, "demo", b"app", false, later)
                .unwrap()
                .refused(later);
        }
        assert!(admit(&b, home, "demo", b"app", false, later).is_err());
    }

    #[test]
    fn a_burst_gets_no_more_guesses_than_the_budget() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        let mut admitted = Vec::new();
        let mut waiting = 0;
        for _ in 0..300 {
            match b.try_admit(src, "demo", b"root", false, t0).unwrap() {
                Admission::Admitted(c) => admitted.push(c),
                Admission::Wait(r) => {
                    assert_eq!((r.label(), r.count), ("source_logins_in_flight", 3));
                    let err = r.client_error("10.0.0.1", b"root");
                    assert_eq!((err.error_code, &err.sql_state), (1040, &Some(*b"08004")));
                    waiting += 1;
                }
            }
        }
        // Before any verdict, only as many logins as the budget has failures left go on.
        assert_eq!((admitted.len(), waiting), (3, 297));
        for c in admitted {
            c.refused(t0);
        }
        // Their verdicts spent the budget: every waiting login is now refused, no guess more.
        let r = b.try_admit(src, "demo", b"root", false, t0).unwrap_err();
        assert_eq!(r.label(), "source_failed_logins");
        // The burst came from one source: the user is not locked out elsewhere.
        admit(&b, ip("10.0.0.2"), "demo", b"root", false, t0).unwrap();
    }

    #[test]
    fn a_pool_larger_than_the_budget_is_only_delayed() {
        let b = Arc::new(Budgets::new(CONFIG));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        let first: Vec<_> = (0..3)
            .map(|_| admit(&b, src, "demo", b"app", false, t0).unwrap())
            .collect();
        assert!(matches!(
            b.try_admit(src, "demo", b"app", false, t0).unwrap(),
            Admission::Wait(_)
        ));
        // One accepted login frees a place.
        drop(first);
        for _ in 0..3 {
            admit(&b, src, "demo", b"app", false, t0).unwrap();
        }
    }

    #[tokio::test]
    async fn a_waiting_login_goes_on_when_a_verdict_frees_its_place() {
        let b = Arc::new(Budgets::new(CONFIG));
        let src = ip("10.0.0.1");
        let now = Instant::now();
        let held: Vec<_> = (0..3)
            .map(|_| admit(&b, src, "demo", b"app", false, now).unwrap())
            .collect();
        let far = tokio::time::Instant::now() + Duration::from_secs(30);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.admit_login(src, "demo", b"app", false, far).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        let mut held = held.into_iter();
        held.next().unwrap().refused(now);
        // One failure left and two in flight: the waiter still waits.
        tokio::task::yield_now().await;
        drop(held.next());
        // An accepted login frees a place: the waiter is admitted.
        let _third = waiter.await.unwrap().unwrap();
        // One failure and two in flight again: past its deadline a waiting login is refused
        // as busy.
        let soon = tokio::time::Instant::now() + Duration::from_millis(20);
        let r = b
            .admit_login(src, "demo", b"app", false, soon)
            .await
            .unwrap_err();
        assert!(r.in_flight, "{r:?}");
    }

    #[test]
    fn failed_wakes_have_a_small_budget_of_their_own() {
        let b = Arc::new(Budgets::new(BudgetSettings {
            failed_logins_per_source: 100,
            wakes_per_source: 100,
            ..CONFIG
        }));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        for _ in 0..2 {
            admit(&b, src, "demo", b"app", true, t0)
                .unwrap()
                .refused(t0);
        }
        let r = admit(&b, src, "demo", b"app", true, t0).unwrap_err();
        assert_eq!(r.label(), "source_failed_wakes");
        assert_eq!(r.client_error("10.0.0.1", b"app").error_code, 1129);
        // A running instance stays reachable from it; a failure there is no failed wake.
        admit(&b, src, "demo", b"app", false, t0)
            .unwrap()
            .refused(t0);
        assert_eq!(b.source_refusal(src, Some("demo"), t0), None);
    }

    #[test]
    fn a_good_login_forgives_its_sources_failed_wakes() {
        let b = Arc::new(Budgets::new(BudgetSettings {
            failed_logins_per_source: 100,
            wakes_per_source: 100,
            ..CONFIG
        }));
        let t0 = Instant::now();
        let src = ip("10.0.0.1");
        // A mistyped password, then the right one, three times over (the budget is 2): never
        // blocked.
        for _ in 0..3 {
            admit(&b, src, "demo", b"app", true, t0)
                .unwrap()
                .refused(t0);
            admit(&b, src, "demo", b"app", true, t0).unwrap().accepted();
        }
        assert!(b.blocks(t0).is_empty());
    }

    #[test]
    fn one_source_cannot_lock_a_user_out_but_several_can() {
        let b = Arc::new(Budgets::new(BudgetSettings {
            failed_logins_per_source: 10,
            ..CONFIG
        }));
        let t0 = Instant::now();
        for _ in 0..6 {
            admit(&b, ip("10.0.0.1"), "demo", b"root", false, t0)
                .unwrap()
                .refused(t0);
        }
        // Past the user's 5, from one source: the user is still reachable from another.
        admit(&b, ip("10.0.0.2"), "demo", b"root", false, t0)
            .unwrap()
            .refused(t0);
        // That failure came from a second source: now the user is blocked everywhere.
        let r = admit(&b, ip("10.0.0.3"), "demo", b"root", false, t0).unwrap_err();
        assert_eq!(r.label(), "user_failed_logins");
    }

    #[test]
    fn pre_greeting_err_has_sequence_zero_and_no_sqlstate() {
        let r = Refusal {
            scope: Scope::Source,
            budget: Budget::FailedLogins,
            count: 3,
            retry_after: Duration::from_millis(1500),
            in_flight: false,
        };
        let bytes = r.pre_greeting("10.0.0.1");
        let (head, payload) = bytes.split_at(4);
        assert_eq!(head[3], 0);
        let err = ErrPacket::decode(payload).unwrap();
        assert_eq!(err.error_code, 1129);
        assert_eq!(err.sql_state, None);
        assert_eq!(
            String::from_utf8(err.error_message).unwrap(),
            "Host '10.0.0.1' is blocked because of many failed logins; retry in 1 s or unblock \
             with 'relay blocks clear'"
        );
    }
}
