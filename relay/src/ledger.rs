//! The usage ledger (architecture.md §4, §6): an append-only event stream of instance state changes,
//! one line per event, written before the change is acted on and flushed to disk as the change
//! of rate needs (`Flush`: a fall before it returns, a rise behind the wake), and the billing
//! computed from it.
//!
//! Format, one event per line: `<unix ms> <instance> <state> <rate>`, e.g.
//! `1764450000123 demo running 1500`, where `rate` is what the time from this event to the
//! instance's next one is billed, in thousandths of a CCU per second: the compute's capacity
//! while it starts or runs (a capacity change is one more `running` line), the frozen rate
//! while it is frozen, 0 otherwise. Lines written before capacities existed have no rate; they
//! bill 1 CCU while resuming or running. Settled per hour: each hour's billed seconds are the
//! milliseconds of resuming or running time inside it, its CCU-seconds the rate-weighted
//! milliseconds, both rounded up (to whole seconds, to thousandths).
//!
//! Storage has lines of its own, `<unix ms> <instance> storage <local bytes> <stored bytes>`:
//! what the instance's data takes on the local disk (allocated blocks) and in the object store
//! (the offloaded copy it depends on), from then until its next storage line; settled per
//! hour as byte-hours of each tier ([`storage_hours`]). A relay that predates them skips them
//! as garbled lines and bills the rest alike. A crash can tear the last line;
//! [`parse`] skips a torn or garbled line (and says so) and keeps every earlier record, and
//! [`Ledger::open`] starts a fresh line after a torn one so later records stay readable.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::lifecycle::Phase;

/// One recorded state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// The instance.
    pub instance: String,
    /// The state entered.
    pub state: Phase,
    /// Thousandths of a CCU billed per second from here on.
    pub rate_milli: u64,
}

impl Event {
    /// The event's ledger line, newline included: the one place the format in this module's
    /// documentation is written (a relay's file and a fleet's store hold the same lines).
    #[must_use]
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {}\n",
            self.at_ms,
            self.instance,
            self.state.as_str(),
            self.rate_milli
        )
    }

    /// Parses one ledger line without its newline (lines written before capacities, with no
    /// rate, included); `None` for a torn or garbled one.
    #[must_use]
    pub fn from_line(line: &str) -> Option<Self> {
        let mut parts = line.split(' ');
        let at_ms = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_owned();
        let state = Phase::from_name(parts.next()?)?;
        let rate_milli = match parts.next() {
            Some(rate) => rate.parse().ok()?,
            // Before capacities: one CCU while billable.
            None if state.billable() => 1_000,
            None => 0,
        };
        parts.next().is_none().then_some(Self {
            at_ms,
            instance,
            state,
            rate_milli,
        })
    }
}

/// Where an instance's data is and how much of it, from `at_ms` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageEvent {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// The instance.
    pub instance: String,
    /// Bytes allocated on the relay host's disk for the data directory (a sparse, lazily
    /// restored file counts only what has been filled in).
    pub local_bytes: u64,
    /// Bytes of the offloaded copy the instance depends on (its manifest's files): while
    /// offloaded, and while a lazily restored database still reads from it.
    pub stored_bytes: u64,
}

/// The word in a storage line where an event line has its state.
const STORAGE: &str = "storage";

impl StorageEvent {
    /// The record's ledger line, newline included.
    #[must_use]
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {STORAGE} {} {}\n",
            self.at_ms, self.instance, self.local_bytes, self.stored_bytes
        )
    }

    /// Parses one storage line without its newline; `None` for any other line.
    #[must_use]
    pub fn from_line(line: &str) -> Option<Self> {
        let mut parts = line.split(' ');
        let at_ms = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_owned();
        if parts.next()? != STORAGE {
            return None;
        }
        let local_bytes = parts.next()?.parse().ok()?;
        let stored_bytes = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Self {
            at_ms,
            instance,
            local_bytes,
            stored_bytes,
        })
    }
}

/// The ledger file, shared by every instance of a relay.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: Mutex<Appender<File>>,
}

/// What the ledger appends to: a file (a fake disk in tests).
trait Sink: Write {
    fn len(&mut self) -> io::Result<u64>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    fn sync_data(&mut self) -> io::Result<()>;
    /// Starts a sync of what was written so far without waiting for it (see [`Flush`]).
    fn sync_behind(&mut self) -> io::Result<()>;
}

impl Sink for File {
    fn len(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        Self::set_len(self, len)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        Self::sync_data(self)
    }
    fn sync_behind(&mut self) -> io::Result<()> {
        // On the runtime's blocking pool (a thread already there after the first use), on
        // a duplicate of the descriptor: the ledger's lock is not held while the disk works.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Self::sync_data(self);
        };
        let file = self.try_clone()?;
        runtime.spawn_blocking(move || {
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "cannot sync the usage ledger");
            }
        });
        Ok(())
    }
}

/// The open file and the records it refused.
#[derive(Debug)]
struct Appender<F> {
    file: F,
    /// Lines the file system refused (full disk, I/O error), oldest first, with the times of
    /// their state changes: written ahead of the next record, so a disk that fills up for a
    /// while delays records instead of losing them (a lost `paused` would bill the paused
    /// time). Bounded by [`MAX_UNWRITTEN`].
    unwritten: VecDeque<String>,
    /// The rate of each instance's last line, which decides each new line's [`Flush`].
    rates: HashMap<String, u64>,
}

/// When a line that was written reaches the disk. Every line is written (to the page cache,
/// where a crash of the relay cannot lose it) before the change it records is acted on;
/// what differs is whether the change also waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    /// The same rate as the instance's last line (`running` after `resuming`, `paused` after
    /// `pausing`) changes no bill: not synced; it reaches the disk with the next synced line
    /// or the kernel's writeback. Lost, it costs nothing: the time is billed alike.
    Never,
    /// A higher rate (a wake, a thaw, a scale-up): synced in the background, so the wake
    /// does not wait for the disk (0.2 ms of a 1 ms thaw, measured). Only a crash of the
    /// whole machine within that flush can lose it, and that crash stops the compute too:
    /// the milliseconds it ran go unbilled, never the reverse.
    Behind,
    /// A lower rate (a pause, a freeze, a scale-down), an instance's first line, and any
    /// batch carrying a line the file system refused earlier: synced before it returns, so
    /// no customer is billed for time the relay already stopped charging for.
    Now,
}

impl Flush {
    /// How a line at `rate` is flushed after a line at `last` (`None`: the instance's first).
    fn for_rates(last: Option<u64>, rate: u64) -> Self {
        match last {
            Some(last) if last == rate => Self::Never,
            Some(last) if last < rate => Self::Behind,
            _ => Self::Now,
        }
    }
}

/// The most refused records kept for a later write (each a few dozen bytes; a wake and a
/// pause make four). Past it the oldest is dropped, loudly.
pub const MAX_UNWRITTEN: usize = 4096;

impl<F: Sink> Appender<F> {
    /// Writes the refused records and `line` (if any) in one append, and flushes it as
    /// `flush` says, or at once when the batch carries a record refused earlier (or there
    /// is no `line`). A write
    /// the file system refuses half-way (ENOSPC after the last free block) is cut back off,
    /// so no torn line is left for the next record to be glued to (which would make that
    /// committed record unreadable); everything not written stays queued, in order.
    fn append(&mut self, line: Option<String>, flush: Flush) -> io::Result<()> {
        let flush = if line.is_none() || !self.unwritten.is_empty() {
            Flush::Now
        } else {
            flush
        };
        if let Some(line) = line {
            if self.unwritten.len() >= MAX_UNWRITTEN {
                if let Some(dropped) = self.unwritten.pop_front() {
                    tracing::error!(record = %dropped.trim_end(), "usage ledger: too many records refused by the file system; dropping the oldest");
                }
            }
            self.unwritten.push_back(line);
        }
        if self.unwritten.is_empty() {
            return Ok(());
        }
        let batch: String = self.unwritten.iter().map(String::as_str).collect();
        let before = self.file.len()?;
        let written = self
            .file
            .write_all(batch.as_bytes())
            .and_then(|()| match flush {
                Flush::Never => Ok(()),
                Flush::Behind => self.file.sync_behind(),
                Flush::Now => self.file.sync_data(),
            });
        match written {
            Ok(()) => {
                self.unwritten.clear();
                Ok(())
            }
            Err(e) => {
                // Shrinking needs no free space. If even that fails, the next open of the
                // ledger isolates the torn line (see `Ledger::open`).
                let _ = self.file.set_len(before);
                Err(e)
            }
        }
    }
}

impl<F: Sink> Appender<F> {
    /// Appends one event's line, flushed as the change of the instance's rate needs.
    fn append_event(&mut self, instance: &str, rate_milli: u64, line: String) -> io::Result<()> {
        let flush = Flush::for_rates(self.rates.get(instance).copied(), rate_milli);
        self.append(Some(line), flush)?;
        self.rates.insert(instance.to_owned(), rate_milli);
        Ok(())
    }
}

impl Ledger {
    /// Opens (creating) `state_dir/usage.ledger` for appending. If the last line was torn by a
    /// crash, a newline is written first so the torn bytes stay on a line of their own.
    ///
    /// # Errors
    /// The file system's error.
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        let path = state_dir.join("usage.ledger");
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let len = file.metadata()?.len();
        if len > 0 {
            file.seek(SeekFrom::Start(len - 1))?;
            let mut last = [0u8; 1];
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                file.sync_data()?;
            }
        }
        Ok(Self {
            path,
            file: Mutex::new(Appender {
                file,
                unwritten: VecDeque::new(),
                rates: HashMap::new(),
            }),
        })
    }

    /// The ledger's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends an event billed at `rate_milli` from now on (after any the file system refused
    /// earlier), synced to disk before it returns when it changes the instance's rate.
    ///
    /// # Errors
    /// The file system's error; the caller logs it (billing must not stop the service). The
    /// event is then kept, and written ahead of the next one that gets through.
    pub fn record(&self, instance: &str, state: Phase, rate_milli: u64) -> io::Result<Event> {
        let event = Event {
            at_ms: crate::clock::now_ms(),
            instance: instance.to_owned(),
            state,
            rate_milli,
        };
        let line = event.to_line();
        let mut appender = self
            .file
            .lock()
            .map_err(|_| io::Error::other("ledger lock poisoned"))?;
        appender.append_event(instance, rate_milli, line)?;
        Ok(event)
    }

    /// Appends where `instance`'s data is and how much of it; synced before it returns
    /// (storage lines are rare: one per offload, restore and pause).
    ///
    /// # Errors
    /// The file system's error, as for [`Self::record`].
    pub fn record_storage(
        &self,
        instance: &str,
        local_bytes: u64,
        stored_bytes: u64,
    ) -> io::Result<StorageEvent> {
        let event = StorageEvent {
            at_ms: crate::clock::now_ms(),
            instance: instance.to_owned(),
            local_bytes,
            stored_bytes,
        };
        let mut appender = self
            .file
            .lock()
            .map_err(|_| io::Error::other("ledger lock poisoned"))?;
        appender.append(Some(event.to_line()), Flush::Now)?;
        Ok(event)
    }

    /// Reads every intact storage record.
    ///
    /// # Errors
    /// The file system's error.
    pub fn read_storage(&self) -> io::Result<Vec<StorageEvent>> {
        Ok(parse_storage(&std::fs::read_to_string(&self.path)?))
    }

    /// Reads every intact event, first writing any the file system refused before (so a
    /// report made once space is back is complete).
    ///
    /// # Errors
    /// The file system's error.
    pub fn read(&self) -> io::Result<(Vec<Event>, usize)> {
        if let Ok(mut appender) = self.file.lock() {
            if let Err(e) = appender.append(None, Flush::Now) {
                tracing::warn!(error = %e, unwritten = appender.unwritten.len(), "usage ledger: records still cannot be written");
            }
        }
        Ok(parse(&std::fs::read_to_string(&self.path)?))
    }
}

/// Parses ledger text: the intact events in order, and how many lines were skipped as torn
/// or garbled.
#[must_use]
pub fn parse(text: &str) -> (Vec<Event>, usize) {
    let mut events = Vec::new();
    let mut skipped = 0;
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            // No newline: the write was torn by a crash.
            skipped += 1;
            continue;
        };
        if line.is_empty() {
            continue;
        }
        match Event::from_line(line) {
            Some(e) => events.push(e),
            None if StorageEvent::from_line(line).is_some() => {}
            None => skipped += 1,
        }
    }
    (events, skipped)
}

/// The intact storage records of ledger text, in order (torn and other lines are left to
/// [`parse`]).
#[must_use]
pub fn parse_storage(text: &str) -> Vec<StorageEvent> {
    text.split_inclusive('\n')
        .filter_map(|line| StorageEvent::from_line(line.strip_suffix('\n')?))
        .collect()
}

/// Byte-milliseconds of one instance's data in one hour, per tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageUsage {
    /// On the local disk.
    pub local_byte_ms: u128,
    /// In the object store.
    pub stored_byte_ms: u128,
}

impl StorageUsage {
    /// Byte-milliseconds as GiB-hours.
    #[must_use]
    pub fn gib_hours(byte_ms: u128) -> f64 {
        // Exact enough: a report rounds to millionths of a GiB-hour.
        byte_ms as f64 / (1024.0 * 1024.0 * 1024.0 * HOUR_MS as f64)
    }
}

/// Storage per (instance, hour start in Unix ms) over `[from_ms, to_ms)`: each record counts
/// until the instance's next one, the last until `to_ms`.
///
/// # Errors
/// [`TooManyRows`] as soon as the report would need more than `max_rows` rows.
pub fn storage_hours(
    records: &[StorageEvent],
    from_ms: u64,
    to_ms: u64,
    max_rows: usize,
) -> Result<BTreeMap<(String, u64), StorageUsage>, TooManyRows> {
    let mut rows: BTreeMap<(String, u64), StorageUsage> = BTreeMap::new();
    let mut add = |record: &StorageEvent, end: u64| -> Result<(), TooManyRows> {
        if record.local_bytes == 0 && record.stored_bytes == 0 {
            return Ok(());
        }
        let (start, end) = (record.at_ms.max(from_ms), end.min(to_ms));
        let mut t = start;
        while t < end {
            let hour = t - t % HOUR_MS;
            let upto = hour.saturating_add(HOUR_MS).min(end);
            let key = (record.instance.clone(), hour);
            if rows.len() >= max_rows && !rows.contains_key(&key) {
                return Err(TooManyRows { max_rows });
            }
            let row = rows.entry(key).or_default();
            let ms = u128::from(upto - t);
            row.local_byte_ms += ms * u128::from(record.local_bytes);
            row.stored_byte_ms += ms * u128::from(record.stored_bytes);
            t = upto;
        }
        Ok(())
    };
    let mut open: BTreeMap<&str, &StorageEvent> = BTreeMap::new();
    for r in records {
        if let Some(previous) = open.insert(r.instance.as_str(), r) {
            add(previous, r.at_ms)?;
        }
    }
    for last in open.values() {
        add(last, to_ms)?;
    }
    Ok(rows)
}

/// One hour in milliseconds: billing is settled per hour.
pub const HOUR_MS: u64 = 3_600_000;

/// The most rows (instance, hour) one billing report may hold. A report's work and size are
/// bounded by it whatever range is asked for: one instance running for five years is 43,800
/// rows, and a report is about 150 bytes of JSON per row (a few MB at the cap).
pub const MAX_BILL_ROWS: usize = 50_000;

/// A billing report that would exceed its row cap; the caller asks for a narrower range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyRows {
    /// The cap that was reached.
    pub max_rows: usize,
}

impl std::fmt::Display for TooManyRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the report would exceed {} rows (instance-hours); narrow the range with from and to",
            self.max_rows
        )
    }
}

impl std::error::Error for TooManyRows {}

/// What one instance is billed for one hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourUsage {
    /// Seconds resuming or running, rounded up.
    pub seconds: u64,
    /// CCU-seconds in thousandths (capacity × time, plus the frozen rate × frozen time),
    /// rounded up.
    pub milli_ccu_seconds: u64,
}

/// Billed usage per (instance, hour start in Unix ms) over `[from_ms, to_ms)`. An instance
/// whose last event is billed is billed up to `to_ms` (it is still running), so callers
/// bound `to_ms` by the present: billing the future is both wrong and unbounded work.
///
/// # Errors
/// [`TooManyRows`] as soon as the report would need more than `max_rows` rows: the work done
/// is bounded by the number of events plus `max_rows`, whatever the range.
pub fn bill(
    events: &[Event],
    from_ms: u64,
    to_ms: u64,
    max_rows: usize,
) -> Result<BTreeMap<(String, u64), HourUsage>, TooManyRows> {
    // Per row: billable milliseconds, and rate × milliseconds (millionths of CCU-seconds).
    let mut rows: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    let mut add = |event: &Event, end: u64| -> Result<(), TooManyRows> {
        let timed = event.state.billable();
        if !timed && event.rate_milli == 0 {
            return Ok(());
        }
        let (start, end) = (event.at_ms.max(from_ms), end.min(to_ms));
        let mut t = start;
        while t < end {
            let hour = t - t % HOUR_MS;
            let upto = hour.saturating_add(HOUR_MS).min(end);
            let key = (event.instance.clone(), hour);
            if rows.len() >= max_rows && !rows.contains_key(&key) {
                return Err(TooManyRows { max_rows });
            }
            let row = rows.entry(key).or_default();
            let ms = upto - t;
            if timed {
                row.0 = row.0.saturating_add(ms);
            }
            row.1 = row.1.saturating_add(ms.saturating_mul(event.rate_milli));
            t = upto;
        }
        Ok(())
    };
    // Each event is billed until the instance's next one.
    let mut open: BTreeMap<&str, &Event> = BTreeMap::new();
    for e in events {
        if let Some(previous) = open.insert(e.instance.as_str(), e) {
            add(previous, e.at_ms)?;
        }
    }
    for last in open.values() {
        add(last, to_ms)?;
    }
    Ok(rows
        .into_iter()
        .map(|(k, (ms, rate_ms))| {
            let usage = HourUsage {
                seconds: ms.div_ceil(1000),
                milli_ccu_seconds: rate_ms.div_ceil(1000),
            };
            (k, usage)
        })
        .filter(|(_, u)| u.seconds > 0 || u.milli_ccu_seconds > 0)
        .collect())
}

/// When the ledger's first event was recorded: no report has anything to bill before it.
#[must_use]
pub fn first_event_ms(events: &[Event]) -> Option<u64> {
    events.iter().map(|e| e.at_ms).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at_ms: u64, state: Phase) -> Event {
        Event {
            at_ms,
            instance: "demo".into(),
            state,
            rate_milli: if state.billable() { 1_000 } else { 0 },
        }
    }

    fn at_rate(at_ms: u64, state: Phase, rate_milli: u64) -> Event {
        Event {
            rate_milli,
            ..ev(at_ms, state)
        }
    }

    fn seconds(b: &BTreeMap<(String, u64), HourUsage>, hour: u64) -> Option<u64> {
        b.get(&("demo".to_owned(), hour)).map(|u| u.seconds)
    }

    /// Storage lines round-trip, are not garbled lines to the event parser, and settle
    /// per hour per tier: 2 GiB local for half an hour, then offloaded (a few bytes local,
    /// 2 GiB stored) across the hour boundary until the report's end.
    #[test]
    fn storage_lines_settle_byte_hours_per_tier() {
        let gib = 1u64 << 30;
        let h = HOUR_MS;
        let record = |at_ms, local_bytes, stored_bytes| StorageEvent {
            at_ms,
            instance: "demo".into(),
            local_bytes,
            stored_bytes,
        };
        let records = [record(h / 2, 2 * gib, 0), record(h, 4096, 2 * gib)];
        let text: String = records
            .iter()
            .map(StorageEvent::to_line)
            .collect::<String>()
            + &ev(h, Phase::Paused).to_line();
        assert_eq!(parse_storage(&text), records);
        let (events, skipped) = parse(&text);
        assert_eq!((events.len(), skipped), (1, 0));
        assert_eq!(StorageEvent::from_line("1 demo paused 0"), None);
        assert_eq!(StorageEvent::from_line("1 demo storage 5"), None);
        assert_eq!(StorageEvent::from_line("1 demo storage 5 6 7"), None);

        let rows = storage_hours(&records, 0, 2 * h + h / 4, MAX_BILL_ROWS).unwrap();
        let row = |hour: u64| rows[&("demo".to_owned(), hour)];
        assert_eq!(StorageUsage::gib_hours(row(0).local_byte_ms), 1.0);
        assert_eq!(row(0).stored_byte_ms, 0);
        assert_eq!(StorageUsage::gib_hours(row(h).stored_byte_ms), 2.0);
        assert_eq!(row(h).local_byte_ms, 4096 * u128::from(h));
        assert_eq!(StorageUsage::gib_hours(row(2 * h).stored_byte_ms), 0.5);
        assert_eq!(rows.len(), 3);
        // Nothing before the first record; the row cap holds.
        assert!(
            storage_hours(&records, 0, h / 2, MAX_BILL_ROWS)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            storage_hours(&records, 0, 3 * h, 2),
            Err(TooManyRows { max_rows: 2 })
        );
    }

    /// A hand-computed ledger: 0.5 CCU while resuming, scaled 0.5 → 2 → 1, frozen at
    /// 0.1 CCU, stopped; across an hour boundary.
    #[test]
    fn bills_capacity_seconds_and_the_frozen_rate_per_hour() {
        use Phase::*;
        let h = HOUR_MS;
        let events = [
            at_rate(h - 10_000, Resuming, 500),  // 0.5 CCU × 0.5 s
            at_rate(h - 9_500, Running, 500),    // 0.5 CCU × 9.5 s (to the hour)
            at_rate(h, Running, 2_000),          // 2 CCU × 20 s
            at_rate(h + 20_000, Running, 1_000), // 1 CCU × 30 s
            at_rate(h + 50_000, Pausing, 0),     // 1 s, not billed
            at_rate(h + 51_000, Frozen, 100),    // 0.1 CCU × 100 s, not running time
            at_rate(h + 151_000, Pausing, 0),
            at_rate(h + 152_000, Paused, 0),
        ];
        let b = bill(&events, 0, 3 * h, MAX_BILL_ROWS).unwrap();
        let first = b[&("demo".to_owned(), 0)];
        assert_eq!(first.seconds, 10);
        // 0.25 + 4.75 CCU-seconds.
        assert_eq!(first.milli_ccu_seconds, 5_000);
        let second = b[&("demo".to_owned(), h)];
        assert_eq!(second.seconds, 50);
        // 40 + 30 + 10 CCU-seconds.
        assert_eq!(second.milli_ccu_seconds, 80_000);
        assert_eq!(b.len(), 2);
        // The same ledger read back from its text, old lines (no rate) billing one CCU.
        let (parsed, skipped) = parse(
            "1000 demo running\n3000 demo paused\n4000 demo running 250\n5000 demo paused 0\n",
        );
        assert_eq!(skipped, 0);
        let b = bill(&parsed, 0, h, MAX_BILL_ROWS).unwrap();
        assert_eq!(
            b[&("demo".to_owned(), 0)],
            HourUsage {
                seconds: 3,
                milli_ccu_seconds: 2_250
            }
        );
    }

    #[test]
    fn bills_resuming_and_running_only() {
        use Phase::*;
        let events = [
            ev(1_000, Resuming),
            ev(1_500, Running),
            ev(11_000, Pausing),
            ev(12_000, Paused),
            ev(20_000, Resuming),
            ev(20_100, Failed),
        ];
        let b = bill(&events, 0, 100_000, MAX_BILL_ROWS).unwrap();
        // 10 s (1.0 → 11.0) plus 0.1 s rounded up to a whole second.
        assert_eq!(seconds(&b, 0), Some(11));
    }

    #[test]
    fn settles_per_hour_and_bills_open_interval_up_to_now() {
        use Phase::*;
        let h = HOUR_MS;
        let events = [ev(h - 2_000, Running)];
        let b = bill(&events, 0, h + 3_000, MAX_BILL_ROWS).unwrap();
        assert_eq!(seconds(&b, 0), Some(2));
        assert_eq!(seconds(&b, h), Some(3));
    }

    #[test]
    fn stops_at_the_row_cap_instead_of_billing_without_bound() {
        // An instance still running, billed up to the largest instant there is: before the
        // cap this looped (and allocated a row) once per hour until u64::MAX.
        let events = [ev(0, Phase::Running)];
        assert_eq!(
            bill(&events, 0, u64::MAX, 1_000),
            Err(TooManyRows { max_rows: 1_000 })
        );
        // Exactly at the cap is fine.
        let b = bill(&events, 0, 1_000 * HOUR_MS, 1_000).unwrap();
        assert_eq!(b.len(), 1_000);
        assert!(b.values().all(|u| u.seconds == 3_600));
    }

    #[test]
    fn bills_near_the_end_of_time_without_overflow() {
        let end = u64::MAX;
        let start = end - 2 * HOUR_MS;
        let events = [ev(start, Phase::Running)];
        let b = bill(&events, start, end, 10).unwrap();
        // Two hours, each row rounded up to whole seconds.
        let total: u64 = b.values().map(|u| u.seconds).sum();
        assert!((7_200..=7_203).contains(&total), "{total}");
        assert_eq!(first_event_ms(&events), Some(start));
        assert_eq!(first_event_ms(&[]), None);
    }

    /// Lines as relays have written them (today's, and from before capacities): they still
    /// parse, and an event is written back byte for byte as it was read.
    #[test]
    fn reads_and_writes_ledger_lines_in_the_format_on_disk() {
        let today = "1764450000123 demo running 1500\n";
        let event = Event::from_line(today.trim_end_matches('\n')).unwrap();
        assert_eq!(
            event,
            Event {
                at_ms: 1_764_450_000_123,
                instance: "demo".into(),
                state: Phase::Running,
                rate_milli: 1_500,
            }
        );
        assert_eq!(event.to_line(), today);
        for line in [
            "1764450000200 demo pausing 0\n",
            "1764450000300 shop-2 frozen 100\n",
        ] {
            let (events, skipped) = parse(line);
            assert_eq!((events.len(), skipped), (1, 0), "{line}");
            assert_eq!(events[0].to_line(), line);
        }
        let (old, skipped) = parse("1000 demo resuming\n2000 demo paused\n");
        assert_eq!(skipped, 0);
        assert_eq!(
            old.iter().map(Event::to_line).collect::<String>(),
            "1000 demo resuming 1000\n2000 demo paused 0\n",
            "an old line bills one CCU while billable"
        );
    }

    #[test]
    fn skips_torn_and_garbled_lines_keeping_earlier_records() {
        let text = "1 demo running\n2 demo paused\ngarbage\n3 demo runn";
        let (events, skipped) = parse(text);
        assert_eq!(events.len(), 2);
        assert_eq!(skipped, 2);
    }

    /// A disk with room for `room` more bytes: a write past it is cut short, as a full file
    /// system cuts the write that needs one block too many.
    #[derive(Debug, Default)]
    struct Disk {
        bytes: Vec<u8>,
        room: usize,
        syncs: usize,
        behind: usize,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room);
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
            }
            self.bytes.extend_from_slice(&buf[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink for Disk {
        fn len(&mut self) -> io::Result<u64> {
            Ok(self.bytes.len() as u64)
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            let len = usize::try_from(len).unwrap();
            self.room += self.bytes.len() - len;
            self.bytes.truncate(len);
            Ok(())
        }
        fn sync_data(&mut self) -> io::Result<()> {
            self.syncs += 1;
            Ok(())
        }
        fn sync_behind(&mut self) -> io::Result<()> {
            self.behind += 1;
            Ok(())
        }
    }

    /// Before: a record cut short by a full disk stayed in the file, the next record was
    /// appended to its torn bytes and both became one unreadable line (a lost `pausing`
    /// billed the paused time), and the refused records were lost for good.
    #[test]
    fn a_full_disk_delays_records_without_tearing_or_losing_them() {
        let mut a = Appender {
            file: Disk {
                bytes: b"1 demo paused\n".to_vec(),
                room: 10,
                ..Disk::default()
            },
            unwritten: VecDeque::new(),
            rates: HashMap::new(),
        };
        assert!(
            a.append(Some("2000 demo resuming\n".into()), Flush::Now)
                .is_err()
        );
        assert!(
            a.append(Some("3000 demo running\n".into()), Flush::Now)
                .is_err()
        );
        assert_eq!(a.file.bytes, b"1 demo paused\n", "nothing torn left");
        assert_eq!(a.unwritten.len(), 2);
        a.file.room = 1000;
        a.append(Some("4000 demo pausing\n".into()), Flush::Now)
            .unwrap();
        let text = String::from_utf8(a.file.bytes.clone()).unwrap();
        let (events, skipped) = parse(&text);
        assert_eq!(skipped, 0);
        let states: Vec<_> = events.iter().map(|e| (e.at_ms, e.state)).collect();
        assert_eq!(
            states,
            [
                (1, Phase::Paused),
                (2000, Phase::Resuming),
                (3000, Phase::Running),
                (4000, Phase::Pausing)
            ]
        );
        assert!(a.unwritten.is_empty());
        // Nothing pending: a flush writes nothing.
        a.append(None, Flush::Now).unwrap();
        assert_eq!(a.file.bytes.len(), text.len());
    }

    #[test]
    fn keeps_at_most_max_unwritten_refused_records() {
        let mut a = Appender {
            file: Disk::default(),
            unwritten: VecDeque::new(),
            rates: HashMap::new(),
        };
        for i in 0..MAX_UNWRITTEN + 5 {
            assert!(
                a.append(Some(format!("{i} demo running\n")), Flush::Now)
                    .is_err()
            );
        }
        assert_eq!(a.unwritten.len(), MAX_UNWRITTEN);
        assert_eq!(
            a.unwritten.front().map(String::as_str),
            Some("5 demo running\n")
        );
    }

    /// `running` after `resuming` bills the same rate: its line needs no flush. A rise of the
    /// rate (a wake) is flushed behind the wake, a fall (a pause) before it returns.
    #[test]
    fn each_line_is_flushed_as_its_change_of_rate_needs() {
        let mut a = Appender {
            file: Disk {
                room: 1000,
                ..Disk::default()
            },
            unwritten: VecDeque::new(),
            rates: HashMap::new(),
        };
        let line = |a: &mut Appender<Disk>, instance: &str, rate: u64, text: &str| {
            a.append_event(instance, rate, format!("{text}\n")).unwrap();
            assert!(
                a.file.bytes.ends_with(format!("{text}\n").as_bytes()),
                "written at once"
            );
            (a.file.syncs, a.file.behind)
        };
        // An instance's first line is synced, whatever its rate.
        assert_eq!(line(&mut a, "demo", 0, "1 demo paused 0"), (1, 0));
        // The wake: behind; `running` at the same rate: not at all.
        assert_eq!(line(&mut a, "demo", 1000, "2 demo resuming 1000"), (1, 1));
        assert_eq!(line(&mut a, "demo", 1000, "3 demo running 1000"), (1, 1));
        // Another instance's first line; a scale-up (behind), a scale-down (now).
        assert_eq!(line(&mut a, "other", 1000, "4 other resuming 1000"), (2, 1));
        assert_eq!(line(&mut a, "demo", 1500, "5 demo running 1500"), (2, 2));
        assert_eq!(line(&mut a, "demo", 500, "6 demo running 500"), (3, 2));
        // The pause: `pausing` bills as running; `frozen` at a lower rate is synced.
        assert_eq!(line(&mut a, "demo", 500, "7 demo pausing 500"), (3, 2));
        assert_eq!(line(&mut a, "demo", 100, "8 demo frozen 100"), (4, 2));
        // A batch that carries a refused record is always synced at once.
        a.file.room = 0;
        assert!(
            a.append_event("demo", 1000, "9 demo resuming 1000\n".into())
                .is_err()
        );
        a.file.room = 1000;
        assert_eq!(line(&mut a, "demo", 1000, "10 demo running 1000"), (5, 2));
    }

    #[test]
    fn reopening_after_a_torn_write_isolates_it() {
        let dir = std::env::temp_dir().join(format!("ledger-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("usage.ledger"), "1 demo running\n2 demo pau").unwrap();
        let l = Ledger::open(&dir).unwrap();
        l.record("demo", Phase::Paused, 0).unwrap();
        let (events, skipped) = l.read().unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].state, Phase::Paused);
    }
}
