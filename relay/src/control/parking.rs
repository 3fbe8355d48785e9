//! Parking (docs/parking.md): an instance whose open connections are all between commands is
//! idle, and pausing it freezes the compute with every session intact instead of cutting them.
//!
//! A held connection's command watch (`perceptron::watch`) reports each look at its
//! conversation ([`SessionLook`], [`ConnectionGuard::report`]), which keeps two facts of its
//! instance current: how many open connections are between commands (a
//! connection nobody follows never is, so it holds the instance running exactly as before),
//! and the idle clock, which a command restarts when it is sent and again when its response
//! is complete. `COM_PING` does neither: a pool's keepalive is not use.
//!
//! The instance's lock is taken only when the connection changes between idle and busy, or a
//! command that counts is sent: never per packet of a result set.
//!
//! While the compute is frozen, a connection's `COM_PING` is answered by the relay (an OK with
//! the session's status flags): a pool's keepalive does not thaw a parked compute. Anything
//! else thaws it.

use std::sync::Arc;

use super::{ConnectionGuard, Inner, Instance, State};

/// What a connection's command watch saw at one look, for its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLook {
    /// The connection is between commands.
    pub idle: bool,
    /// A command that counts as use was sent since the last look.
    pub sent: bool,
    /// The response to a command that counted ended: the connection is idle after use.
    pub ended: bool,
    /// The session could be carried to a new compute now (`resumable_sessions`).
    pub resumable: bool,
    /// Why it could not, when the instance keeps sessions across a stop and this one is
    /// between commands: it then keeps the compute frozen rather than stopped.
    pub holding: Option<NotResumable>,
    /// The client said goodbye (`COM_QUIT`): it needs no compute.
    pub quitting: bool,
}

/// Why a session between commands could not be carried to a new compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotResumable {
    /// It has no resumption ticket (a direct-route or switch-mode connection, or a compute
    /// without a ticket key).
    NoTicket,
    /// A command pinned it to its compute (the reason names it).
    Pinned(&'static str),
    /// A transaction is open.
    Transaction,
    /// Its state changed and was not read back yet (it is, once the session has been
    /// between commands for three quarters of `park_after`).
    Unread,
}

impl NotResumable {
    /// The reason, as `relay status` and the admin API give it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoTicket => {
                "no resumption ticket (a direct-route or switch-mode connection, or a compute \
                 without a ticket key)"
            }
            Self::Pinned(why) => why,
            Self::Transaction => "open transaction",
            Self::Unread => "session state not read yet",
        }
    }
}

impl ConnectionGuard {
    /// Brings the instance's facts up to date with `look`. The instance's lock is taken only
    /// when something it counts changed.
    pub fn report(&mut self, look: SessionLook) {
        let SessionLook {
            idle,
            sent,
            ended,
            resumable,
            holding,
            quitting,
        } = look;
        if idle == self.idle
            && !sent
            && !ended
            && resumable == self.resumable
            && holding == self.holding
        {
            return;
        }
        let instance = Arc::clone(&self.instance);
        let mut inner = instance.lock();
        if sent || ended {
            inner.idle_since = tokio::time::Instant::now();
        }
        if holding != self.holding {
            self.holding = holding;
            match holding {
                Some(why) => {
                    inner.held_frozen.insert(self.id, (self.client(), why));
                }
                None => {
                    inner.held_frozen.remove(&self.id);
                }
            }
        }
        if resumable != self.resumable {
            self.resumable = resumable;
            if resumable {
                inner.resumable_conns += 1;
            } else {
                inner.resumable_conns = inner.resumable_conns.saturating_sub(1);
            }
        }
        if idle != self.idle {
            self.idle = idle;
            if idle {
                inner.idle_conns += 1;
            } else {
                inner.idle_conns = inner.idle_conns.saturating_sub(1);
                // A command for a parked session: thaw the compute (single-flight, as every
                // wake). One sent while the freeze is under way is seen by `pause`, which
                // thaws right after it. A client saying goodbye needs no compute.
                if matches!(inner.state, State::Frozen(_)) && !quitting {
                    drop(inner);
                    thaw_for_command(&instance);
                }
            }
        }
    }

    /// Takes the connection's compute leg for the relay's own use (reading the session's
    /// state): it counts as busy from here, without counting as use, so no pause freezes the
    /// compute under the read; the next look ([`Self::report`]) counts it between commands
    /// again. `false`, and nothing changes, when the compute is not running: a read never
    /// thaws it.
    pub fn step_aside(&mut self) -> bool {
        let instance = Arc::clone(&self.instance);
        let mut inner = instance.lock();
        if !matches!(inner.state, State::Running(_)) {
            return false;
        }
        if self.idle {
            self.idle = false;
            inner.idle_conns = inner.idle_conns.saturating_sub(1);
        }
        true
    }

    /// `force_reattach_every` of the instance.
    #[must_use]
    pub fn force_reattach_every(&self) -> Option<std::num::NonZeroU32> {
        self.instance.config.force_reattach_every
    }

    /// How long a resumable session is between commands after a change before its state is
    /// read: three quarters of `park_after`, so that it is read before the instance may park
    /// and not after every pause a busy application makes.
    #[must_use]
    pub fn state_read_after(&self) -> std::time::Duration {
        (self.instance.config.park_after * 3 / 4).clamp(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_secs(5),
        )
    }

    /// Whether the compute is frozen now (the relay answers pings for it).
    #[must_use]
    pub fn compute_frozen(&self) -> bool {
        matches!(self.instance.lock().state, State::Frozen(_))
    }

    /// Whether the compute is being stopped under the instance's resumable sessions.
    #[must_use]
    pub fn detaching(&self) -> bool {
        self.instance.detaching()
    }

    /// Whether this connection is counted among the instance's resumable sessions.
    #[must_use]
    pub const fn counted_resumable(&self) -> bool {
        self.resumable
    }

    /// Whether the instance keeps sessions across a stop (`resumable_sessions`).
    #[must_use]
    pub fn keeps_sessions_resumable(&self) -> bool {
        self.instance.config.resumable_sessions
    }

    /// Counts an answer the relay gave for the compute (`kind`: `ping`, `keepalive_query`).
    pub fn answered_for_compute(&self, kind: &'static str) {
        self.instance
            .metrics
            .parked_answer(&self.instance.config.name, kind);
    }

    /// Whether `text` is one of the instance's `keepalive_queries`.
    #[must_use]
    pub fn is_keepalive_query(&self, text: &[u8]) -> bool {
        self.instance
            .config
            .keepalive_queries
            .iter()
            .any(|q| q.as_bytes() == text)
    }

    /// The instance's name.
    #[must_use]
    pub fn instance_name(&self) -> &str {
        &self.instance.config.name
    }

    /// The client's address (empty before it is known).
    #[must_use]
    pub fn client(&self) -> String {
        self.client.map(|c| c.to_string()).unwrap_or_default()
    }
}

pub(super) fn thaw_for_command(instance: &Arc<Instance>) {
    tracing::info!(instance = %instance.config.name, "a parked connection sent a command; thawing the compute");
    let instance = Arc::clone(instance);
    tokio::spawn(async move {
        if let Err(e) = instance.ensure_running().await {
            tracing::warn!(instance = %instance.config.name, error = %e, "thaw for a parked connection failed");
        }
    });
}

impl Instance {
    /// Whether pausing may park the open connections: the instance parks (`park`), every
    /// connection is between commands (the kernel route's too, [`super::routed_parking`]),
    /// none is carried by the kernel splice (a spliced session's commands are not seen: it
    /// counts as between commands only once taken back, which it is when quiet), this compute
    /// could be frozen when last tried, and the relay decides alone (in a fleet another
    /// relay's connections are not followed from here, so a fleet never parks).
    pub(super) fn parkable(&self, inner: &Inner) -> bool {
        inner.pre_login == 0 && self.parkable_but_for_pre_login(inner)
    }

    /// [`Self::parkable`] but for direct connections whose clients have not spoken yet (a
    /// frozen compute would leave them greeted and unanswered: the pause waits for them).
    pub(super) fn parkable_but_for_pre_login(&self, inner: &Inner) -> bool {
        let pumped = inner.active.total().saturating_sub(inner.pre_login);
        self.config.park
            && (pumped > 0 || inner.kernel_open > 0)
            && pumped == inner.idle_conns
            && *self.spliced.borrow() == 0
            && inner.kernel_busy == 0
            && !inner.cannot_park
            && self.fleet.get().is_none()
    }
}

impl Instance {
    /// How often a spliced session looks whether it can be taken back for parking: a few
    /// times per `park_after`, as the instance looks whether it may park; `None` where it
    /// does not park.
    #[must_use]
    pub fn take_back_pace(&self) -> Option<std::time::Duration> {
        let config = &self.config;
        config.park.then(|| {
            (config.park_after / 4).clamp(
                std::time::Duration::from_millis(50),
                std::time::Duration::from_secs(1),
            )
        })
    }
}

/// A session the kernel splice may carry: counted among the instance's spliced sessions
/// while the kernel carries it ([`Self::set_in_kernel`]).
#[derive(Debug)]
pub struct SplicedSession {
    instance: Arc<Instance>,
    in_kernel: std::sync::atomic::AtomicBool,
}

impl Drop for SplicedSession {
    fn drop(&mut self) {
        self.set_in_kernel(false);
    }
}

impl SplicedSession {
    /// The kernel carries the session from now (`true`), or the relay does.
    pub fn set_in_kernel(&self, yes: bool) {
        if self
            .in_kernel
            .swap(yes, std::sync::atomic::Ordering::AcqRel)
            == yes
        {
            return;
        }
        let instance = &self.instance;
        instance.spliced.send_modify(|n| {
            *n = if yes { *n + 1 } else { n.saturating_sub(1) };
            instance
                .metrics
                .set_spliced_sessions(&instance.config.name, *n);
        });
    }

    /// Notified when a pause asks every spliced session to look at once whether it can be
    /// taken back ([`Instance::take_back_spliced`]).
    pub fn look_now(&self) -> &tokio::sync::Notify {
        &self.instance.look_now
    }
}

/// How long a pause waits for its spliced sessions to be taken back: each looks for up to
/// 200 ms (`splice::sockhash::carry`), a few `sock_diag` lookups and the verdict's grace each.
const TAKE_BACK_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl Instance {
    /// A session the kernel splice carries from now, counted until the returned value
    /// drops or says otherwise.
    pub fn spliced_session(self: &Arc<Self>) -> SplicedSession {
        let session = SplicedSession {
            instance: Arc::clone(self),
            in_kernel: false.into(),
        };
        session.set_in_kernel(true);
        session
    }

    /// Before a pause: asks the spliced sessions to be taken back if they are between
    /// commands, and waits (at most [`TAKE_BACK_WAIT`]) until none is left spliced. Those
    /// still spliced then are busy, and the pause is refused for them as for any.
    pub(super) async fn take_back_spliced(&self) {
        if *self.spliced.borrow() == 0 {
            return;
        }
        let mut left = self.spliced.subscribe();
        self.look_now.notify_waiters();
        let _ = tokio::time::timeout(TAKE_BACK_WAIT, left.wait_for(|n| *n == 0)).await;
    }
}

/// A command that arrived while the compute was being frozen for parking: thaw it now.
pub(super) fn thaw_if_commanded(instance: &Arc<Instance>) {
    let commanded = {
        let inner = instance.lock();
        matches!(inner.state, State::Frozen(_)) && inner.idle_conns < inner.active.total()
    };
    if commanded {
        thaw_for_command(instance);
    }
}
