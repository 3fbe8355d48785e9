//! MySQL functions SQLite lacks (or has with other semantics), registered on every SQLite
//! connection under their MySQL names, so everyday SQL runs unchanged: dates and times
//! (`DATE_FORMAT`, `DATEDIFF`, `TIMESTAMPDIFF`, `WEEKDAY`, `UTC_TIMESTAMP`, ...), hashes, the
//! session's facts; the string functions are [`crate::mysql_text_functions`]'s. The dialect rewrites
//! what has a SQLite equivalent (`NOW()` → `CURRENT_TIMESTAMP`, `CONCAT` → `||`, ...) and
//! leaves the rest, listed in `dialect::expr::ENGINE_FUNCTIONS`, to be registered here; a
//! test checks the two lists agree. What depends on the session (its connection id, its user,
//! its variables, `@@x` and `@x` inside any statement) is read from the [`crate::engine::SessionFacts`] the
//! session gives the executor before each statement.
//!
//! Times are UTC, as SQLite's `CURRENT_TIMESTAMP` (a column default) is: the shim's
//! `time_zone` is `+00:00`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sha1::Digest as _;

use chrono::{Datelike as _, NaiveDate, NaiveDateTime, Timelike as _, Utc};
use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};

use crate::dialect::{SYSTEM_VARIABLE_FN, USER_VARIABLE_FN};
use crate::engine::SessionFacts;
use crate::sqlite_value::to_sqlite;

/// MySQL's text form of a DATETIME.
const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// What one executor's functions read about its connection.
#[derive(Debug, Default)]
pub struct ConnectionFacts {
    /// The session running the statement.
    pub session: Mutex<Arc<SessionFacts>>,
    /// The id the last INSERT gave an `AUTO_INCREMENT` column.
    pub last_insert_id: AtomicI64,
    /// Rows the last INSERT, UPDATE or DELETE changed (`ROW_COUNT()`).
    pub row_count: AtomicI64,
    /// Rows the last SELECT returned (`FOUND_ROWS()`).
    pub found_rows: AtomicI64,
    /// `KILL QUERY` asked the running statement to stop: `SLEEP` ends early. Cleared when a
    /// statement starts.
    pub interrupted: AtomicBool,
    /// What the functions warn of while the statement runs.
    pub warnings: Arc<crate::engine::FunctionWarnings>,
    /// The running statement writes rows (`INSERT`, `REPLACE`, `UPDATE`, `CREATE TABLE ...
    /// AS SELECT`): there a `CAST` of text that is not a number fails with 1292 instead of
    /// warning, as MariaDB's strict mode (the shim's, whatever a session sets) makes it.
    pub strict_write: AtomicBool,
    /// The running statement's time, read by `NOW()` and `CURRENT_TIMESTAMP(p)` (also in the
    /// triggers it fires) at its first call: one time for the whole statement, as MySQL's.
    /// Cleared when a statement starts.
    pub statement_time: Mutex<Option<chrono::DateTime<Utc>>>,
}

impl ConnectionFacts {
    /// The running statement's time ([`Self::statement_time`]).
    fn now(&self) -> chrono::DateTime<Utc> {
        *self
            .statement_time
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert_with(Utc::now)
    }
}

/// How often a `SLEEP` looks whether its statement was killed.
const SLEEP_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// MySQL's `SLEEP(seconds)`: 0 after that long (a fraction, NULL or a negative number as
/// MariaDB reads them), 1 when `KILL QUERY` ended it sooner (the engine's `sleep` then fails
/// its statement with 1317, as SQLite's interrupt would: SQLite may not look at its interrupt
/// again before the row is out; MySQL ends a lone `SLEEP` without an error).
///
/// A read may run on one of the async runtime's own threads (`session::read_inline`, and
/// statements without a database): there the wait first hands that thread's other tasks to
/// the others (`block_in_place`), so no other connection waits behind it. (A read under a
/// step budget never sleeps: the executor runs it again on a blocking thread.)
pub fn sleep(seconds: Option<f64>, interrupted: &AtomicBool) -> i64 {
    let wait = || wait_unless_killed(seconds, interrupted);
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => wait(),
        _ => tokio::task::block_in_place(wait),
    }
}

fn wait_unless_killed(seconds: Option<f64>, interrupted: &AtomicBool) -> i64 {
    let seconds = seconds.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(0.0);
    let Some(deadline) = std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|d| std::time::Instant::now().checked_add(d))
    else {
        return 0;
    };
    loop {
        if interrupted.load(Ordering::Relaxed) {
            return 1;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return 0;
        }
        std::thread::sleep(left.min(SLEEP_SLICE));
    }
}

/// Registers the functions on `conn`, the connection of database `database` (empty for
/// none). `facts` are the executor's, updated after each statement.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(
    conn: &Connection,
    database: &str,
    facts: &Arc<ConnectionFacts>,
) -> rusqlite::Result<()> {
    // Time functions read the clock: not deterministic, so SQLite never caches their results.
    let volatile = FunctionFlags::SQLITE_UTF8;
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    for name in ["now", "localtime", "localtimestamp"] {
        let facts = Arc::clone(facts);
        conn.create_scalar_function(name, 0, volatile, move |_| {
            Ok(facts.now().format(DATETIME_FORMAT).to_string())
        })?;
    }
    // SYSDATE() is the time it runs, as MySQL's.
    conn.create_scalar_function("sysdate", 0, volatile, |_| {
        Ok(Utc::now().format(DATETIME_FORMAT).to_string())
    })?;
    let now_facts = Arc::clone(facts);
    conn.create_scalar_function(crate::dialect::NOW_FN, 1, volatile, move |ctx| {
        let precision: i64 = ctx.get(0)?;
        let now = now_facts.now().format("%Y-%m-%d %H:%M:%S%.6f").to_string();
        // "…:SS.ffffff" cut to the precision (1 to 6 decimals).
        let keep = now.len() - 6 + usize::try_from(precision.clamp(1, 6)).unwrap_or(6);
        Ok(now.get(..keep).unwrap_or(&now).to_owned())
    })?;
    conn.create_scalar_function("utc_timestamp", 0, volatile, |_| {
        Ok(Utc::now().format(DATETIME_FORMAT).to_string())
    })?;
    conn.create_scalar_function("utc_date", 0, volatile, |_| {
        Ok(Utc::now().format("%Y-%m-%d").to_string())
    })?;
    // `TIME(x)`, and `CAST(x AS TIME(p))` as `(x, p)`: MySQL's signed durations
    // (`crate::mysql_time`).
    for n_args in [1, 2] {
        conn.create_scalar_function(crate::dialect::TIME_FN, n_args, pure, |ctx| {
            let text = match ctx.get_raw(0) {
                rusqlite::types::ValueRef::Null => return Ok(None),
                rusqlite::types::ValueRef::Integer(i) => i.to_string(),
                rusqlite::types::ValueRef::Real(f) => crate::engine::double_text(f),
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                    String::from_utf8_lossy(t).into_owned()
                }
            };
            let decimals = if ctx.len() > 1 {
                Some(u8::try_from(ctx.get::<i64>(1)?.clamp(0, 6)).unwrap_or(0))
            } else {
                None
            };
            Ok(crate::mysql_time::MysqlTime::parse(&text)
                .map(|t| decimals.map_or(t, |d| t.with_decimals(d)).to_string()))
        })?;
    }
    conn.create_scalar_function("datediff", 2, pure, |ctx| {
        Ok(datetime_arg(ctx, 0)
            .zip(datetime_arg(ctx, 1))
            .map(|(a, b)| (a.date() - b.date()).num_days()))
    })?;
    conn.create_scalar_function(crate::dialect::TIMESTAMPDIFF_FN, 3, pure, |ctx| {
        let unit: String = ctx.get(0)?;
        Ok(datetime_arg(ctx, 1)
            .zip(datetime_arg(ctx, 2))
            .and_then(|(a, b)| timestampdiff(&unit, a, b)))
    })?;
    let refused = |why: &str| rusqlite::Error::UserFunctionError(why.to_owned().into());
    let cast_facts = Arc::clone(facts);
    let signed = move |v: ValueRef<'_>| {
        let n = as_signed(v).map_err(|r| refused(r.message()))?;
        if let ValueRef::Text(b) | ValueRef::Blob(b) = v
            && let Some(level) = integer_text_level(b)
        {
            let message = format!(
                "Truncated incorrect INTEGER value: '{}'",
                String::from_utf8_lossy(b)
            );
            if level == "Warning" && cast_facts.strict_write.load(Ordering::Relaxed) {
                return Err(refused(&message));
            }
            cast_facts.warnings.push(level, 1292, message);
        }
        Ok(n)
    };
    let unsigned = signed.clone();
    conn.create_scalar_function(crate::dialect::CAST_SIGNED_FN, 1, pure, move |ctx| {
        signed(ctx.get_raw(0))
    })?;
    conn.create_scalar_function(crate::dialect::CAST_UNSIGNED_FN, 1, pure, move |ctx| {
        match unsigned(ctx.get_raw(0))? {
            Some(n) if n < 0 => Err(refused(
                "CAST of a negative number AS UNSIGNED (MySQL's wraps it past 2^63, which \
                 this engine cannot hold)",
            )),
            n => Ok(n),
        }
    })?;
    conn.create_scalar_function("weekday", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| t.weekday().num_days_from_monday()))
    })?;
    conn.create_scalar_function("dayofweek", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| t.weekday().number_from_sunday()))
    })?;
    conn.create_scalar_function("dayname", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| t.format("%A").to_string()))
    })?;
    conn.create_scalar_function("monthname", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| t.format("%B").to_string()))
    })?;
    conn.create_scalar_function("last_day", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).and_then(|t| {
            let first_of_next = if t.month() == 12 {
                NaiveDate::from_ymd_opt(t.year() + 1, 1, 1)
            } else {
                NaiveDate::from_ymd_opt(t.year(), t.month() + 1, 1)
            }?;
            first_of_next
                .pred_opt()
                .map(|d| d.format("%Y-%m-%d").to_string())
        }))
    })?;
    for name in ["curdate", "current_date"] {
        conn.create_scalar_function(name, 0, volatile, |_| {
            Ok(Utc::now().format("%Y-%m-%d").to_string())
        })?;
    }
    for name in ["curtime", "current_time"] {
        conn.create_scalar_function(name, 0, volatile, |_| {
            Ok(Utc::now().format("%H:%M:%S").to_string())
        })?;
    }
    conn.create_scalar_function(
        "unix_timestamp",
        0,
        volatile,
        |_| Ok(Utc::now().timestamp()),
    )?;
    conn.create_scalar_function("unix_timestamp", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| t.and_utc().timestamp()))
    })?;
    conn.create_scalar_function("date_format", 2, pure, |ctx| {
        let Some(t) = datetime_arg(ctx, 0) else {
            return Ok(None);
        };
        let format: Option<String> = ctx.get(1)?;
        Ok(format.map(|f| date_format(t, &f)))
    })?;
    conn.create_scalar_function("concat", -1, pure, |ctx| concat(ctx))?;
    conn.create_scalar_function("now", 1, volatile, |_| {
        Ok(Utc::now().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
    })?;
    conn.create_scalar_function("from_unixtime", 1, pure, |ctx| {
        let secs: Option<i64> = ctx.get(0)?;
        Ok(secs
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            .map(|t| t.naive_utc().format(DATETIME_FORMAT).to_string()))
    })?;
    for (name, read) in [("last_insert_id", 0), ("row_count", 1), ("found_rows", 2)] {
        let facts = Arc::clone(facts);
        conn.create_scalar_function(name, 0, volatile, move |_| {
            Ok(match read {
                0 => facts.last_insert_id.load(Ordering::Relaxed),
                1 => facts.row_count.load(Ordering::Relaxed),
                _ => facts.found_rows.load(Ordering::Relaxed),
            })
        })?;
    }
    let session = |facts: &Arc<ConnectionFacts>| {
        let facts = Arc::clone(facts);
        move || Arc::clone(&facts.session.lock().unwrap_or_else(PoisonError::into_inner))
    };
    let read = session(facts);
    conn.create_scalar_function("connection_id", 0, volatile, move |_| {
        Ok(i64::from(read().connection_id))
    })?;
    for (name, any_host) in [
        ("user", false),
        ("session_user", false),
        ("system_user", false),
        ("current_user", true),
    ] {
        let read = session(facts);
        conn.create_scalar_function(name, 0, volatile, move |_| {
            Ok(read().user.as_ref().map(|(user, host)| {
                format!("{user}@{}", if any_host { "%" } else { host.as_str() })
            }))
        })?;
    }
    // `@@x` and `@x` inside a statement: the dialect turns them into these calls.
    let read = session(facts);
    conn.create_scalar_function(SYSTEM_VARIABLE_FN, 1, volatile, move |ctx| {
        let name: String = ctx.get(0)?;
        let facts = read();
        let vars = crate::variables::SessionVars {
            autocommit: facts.autocommit,
            set: &facts.variables,
        };
        crate::variables::lookup(&name, vars)
            .map(|cell| to_sqlite(&cell))
            .ok_or_else(|| {
                rusqlite::Error::UserFunctionError(
                    format!("Unknown system variable '{name}'").into(),
                )
            })
    })?;
    let read = session(facts);
    conn.create_scalar_function(USER_VARIABLE_FN, 1, volatile, move |ctx| {
        let name: String = ctx.get(0)?;
        Ok(read()
            .user_variables
            .get(&name.to_ascii_lowercase())
            .map_or(Value::Null, to_sqlite))
    })?;
    // Time is UTC here and no time zone tables exist: a conversion between two names of UTC
    // keeps the time; any other gives NULL, as MySQL's does without its zone tables (Django
    // probes exactly that).
    conn.create_scalar_function("convert_tz", 3, pure, |ctx| {
        let utc = |i| -> rusqlite::Result<bool> {
            let zone: Option<String> = ctx.get(i)?;
            Ok(zone.is_some_and(|z| {
                ["utc", "+00:00", "+0:00", "system", "gmt"]
                    .contains(&z.to_ascii_lowercase().as_str())
            }))
        };
        Ok(if utc(1)? && utc(2)? {
            datetime_arg(ctx, 0).map(|t| t.format(DATETIME_FORMAT).to_string())
        } else {
            None
        })
    })?;
    // `t + INTERVAL n UNIT`, DATE_ADD, DATE_SUB: the dialect calls this.
    conn.create_scalar_function(crate::dialect::DATE_ADD_FN, 3, pure, |ctx| {
        let unit: String = ctx.get(2)?;
        let n = match ctx.get_raw(1) {
            ValueRef::Integer(i) => Some(i as f64),
            ValueRef::Real(r) => Some(r),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            _ => None,
        };
        let date_only = matches!(ctx.get_raw(0), ValueRef::Text(t) if t.len() == 10);
        Ok(match (datetime_arg(ctx, 0), n) {
            (Some(t), Some(n)) => date_add(t, n, &unit).map(|t| {
                let whole_days =
                    ["day", "week", "month", "quarter", "year"].contains(&unit.as_str());
                if date_only && whole_days {
                    t.format("%Y-%m-%d").to_string()
                } else if t.nanosecond() != 0 {
                    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
                } else {
                    t.format(DATETIME_FORMAT).to_string()
                }
            }),
            _ => None,
        })
    })?;
    for name in ["database", "schema"] {
        let database = (!database.is_empty()).then(|| database.to_owned());
        conn.create_scalar_function(name, 0, pure, move |_| Ok(database.clone()))?;
    }
    conn.create_scalar_function("version", 0, pure, |_| Ok(crate::variables::SERVER_VERSION))?;
    conn.create_scalar_function("rand", 0, volatile, |_| {
        Ok(rand::Rng::r#gen::<f64>(&mut rand::thread_rng()))
    })?;
    conn.create_scalar_function("uuid", 0, volatile, |_| {
        let b: [u8; 16] = rand::Rng::r#gen(&mut rand::thread_rng());
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let part = |r: std::ops::Range<usize>| hex.get(r).unwrap_or_default().to_owned();
        Ok(format!(
            "{}-{}-4{}-{}-{}",
            part(0..8),
            part(8..12),
            part(13..16),
            part(16..20),
            part(20..32)
        ))
    })?;
    conn.create_scalar_function("md5", 1, pure, |ctx| {
        Ok(text_arg(ctx, 0).map(|t| hex(&md5::compute(t.as_bytes()).0)))
    })?;
    conn.create_scalar_function("sha1", 1, pure, |ctx| {
        Ok(text_arg(ctx, 0).map(|t| hex(&sha1::Sha1::digest(t.as_bytes()))))
    })?;
    conn.create_scalar_function("sha2", 2, pure, |ctx| {
        let bits: Option<i64> = ctx.get(1)?;
        Ok(text_arg(ctx, 0).and_then(|t| match bits {
            Some(0 | 256) => Some(hex(&sha2::Sha256::digest(t.as_bytes()))),
            Some(224) => Some(hex(&sha2::Sha224::digest(t.as_bytes()))),
            Some(384) => Some(hex(&sha2::Sha384::digest(t.as_bytes()))),
            Some(512) => Some(hex(&sha2::Sha512::digest(t.as_bytes()))),
            _ => None,
        }))
    })?;
    conn.create_scalar_function("left", 2, pure, |ctx| {
        let n: Option<i64> = ctx.get(1)?;
        Ok(text_arg(ctx, 0).zip(n).map(|(t, n)| {
            t.chars()
                .take(usize::try_from(n).unwrap_or(0))
                .collect::<String>()
        }))
    })?;
    conn.create_scalar_function("right", 2, pure, |ctx| {
        let n: Option<i64> = ctx.get(1)?;
        Ok(text_arg(ctx, 0).zip(n).map(|(t, n)| {
            let n = usize::try_from(n).unwrap_or(0);
            let skip = t.chars().count().saturating_sub(n);
            t.chars().skip(skip).collect::<String>()
        }))
    })?;
    type DatePart = fn(&NaiveDateTime) -> u32;
    let parts: [(&str, DatePart); 6] = [
        ("year", |t| u32::try_from(t.year()).unwrap_or(0)),
        ("month", |t| t.month()),
        ("day", |t| t.day()),
        ("hour", |t| t.hour()),
        ("minute", |t| t.minute()),
        ("second", |t| t.second()),
    ];
    for (name, part) in parts {
        // A time of day alone ('10:11:12') has an hour, a minute and a second too.
        let time_too = matches!(name, "hour" | "minute" | "second");
        conn.create_scalar_function(name, 1, pure, move |ctx| {
            let t = datetime_arg(ctx, 0).or_else(|| {
                let text: String = ctx.get(0).ok()?;
                time_too
                    .then(|| chrono::NaiveTime::parse_from_str(&text, "%H:%M:%S%.f").ok())
                    .flatten()
                    .map(|t| NaiveDate::default().and_time(t))
            });
            Ok(t.map(|t| part(&t)))
        })?;
    }
    conn.create_scalar_function("regexp", 2, pure, |ctx| {
        let (Some(pattern), Some(text)) = (text_arg(ctx, 0), text_arg(ctx, 1)) else {
            return Ok(None);
        };
        // MySQL's REGEXP is case-insensitive under the default collation.
        let re = regex_lite::RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
        Ok(Some(re.is_match(&text)))
    })?;
    crate::mysql_text_functions::register(conn, &facts.warnings)?;
    crate::mysql_numeric_functions::register(conn)?;
    crate::mysql_date_parsing::register(conn)?;
    crate::mysql_json::register(conn)
}

/// Argument `i` as text (numbers in their text form), `None` for NULL.
fn text_arg(ctx: &Context<'_>, i: usize) -> Option<String> {
    match ctx.get_raw(i) {
        ValueRef::Null => None,
        ValueRef::Integer(v) => Some(v.to_string()),
        ValueRef::Real(v) => Some(v.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `CONCAT(a, b, ...)`: NULL if any argument is NULL.
fn concat(ctx: &Context<'_>) -> rusqlite::Result<Value> {
    let mut out = Vec::new();
    for i in 0..ctx.len() {
        match ctx.get_raw(i) {
            ValueRef::Null => return Ok(Value::Null),
            ValueRef::Integer(v) => out.extend_from_slice(v.to_string().as_bytes()),
            ValueRef::Real(v) => out.extend_from_slice(v.to_string().as_bytes()),
            ValueRef::Text(t) | ValueRef::Blob(t) => out.extend_from_slice(t),
        }
    }
    Ok(String::from_utf8(out).map_or_else(|e| Value::Blob(e.into_bytes()), Value::Text))
}

/// Argument `i` as a date and time: MySQL's `YYYY-MM-DD[ HH:MM:SS[.frac]]` text.
fn datetime_arg(ctx: &Context<'_>, i: usize) -> Option<NaiveDateTime> {
    let text: String = ctx.get(i).ok()?;
    NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S%.f")
        .ok()
        .or_else(|| {
            NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
}

/// Why a `CAST` to an integer is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CastRefusal {
    /// Beyond BIGINT's range.
    BeyondBigint,
    /// Exactly halfway between two integers.
    Halfway,
}

impl CastRefusal {
    const fn message(self) -> &'static str {
        match self {
            Self::BeyondBigint => "CAST of a number beyond BIGINT",
            Self::Halfway => {
                "CAST of a number halfway between two integers (MySQL rounds a DECIMAL and a \
                 DOUBLE differently)"
            }
        }
    }
}

/// MySQL's `CAST(v AS SIGNED)`: a number rounded half away from zero, a text's leading
/// integer (`'12abc'` is 12, `'1.5'` is 1), NULL as NULL. Refused where MySQL's answer cannot
/// be told: a number beyond BIGINT (MySQL wraps or saturates by type), and a real exactly
/// halfway (a DECIMAL rounds away from zero, a DOUBLE to even; here both are reals).
fn as_signed(v: ValueRef<'_>) -> Result<Option<i64>, CastRefusal> {
    const BEYOND: CastRefusal = CastRefusal::BeyondBigint;
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(i) => Ok(Some(i)),
        ValueRef::Real(r) => {
            if (r - r.trunc()).abs() == 0.5 {
                return Err(CastRefusal::Halfway);
            }
            let rounded = r.round();
            // Inside i64's range `as` is exact.
            if rounded.is_finite()
                && (-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&rounded)
            {
                Ok(Some(rounded as i64))
            } else {
                Err(BEYOND)
            }
        }
        ValueRef::Text(b) | ValueRef::Blob(b) => {
            let text = String::from_utf8_lossy(b);
            let t = text.trim_start();
            let (negative, digits) = match t.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, t.strip_prefix('+').unwrap_or(t)),
            };
            let digits: String = digits.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                return Ok(Some(0));
            }
            let magnitude: i128 = digits.parse().map_err(|_| BEYOND)?;
            let n = if negative { -magnitude } else { magnitude };
            i64::try_from(n).map(Some).map_err(|_| BEYOND)
        }
    }
}

/// How MariaDB tells of `text` read as an integer: nothing for spaces, a sign and digits; a
/// `Note` when only spaces follow them (`'7 '`); a `Warning` when anything else does, or there
/// are no digits (`'abc'`, `'1e3'`, `''`).
fn integer_text_level(text: &[u8]) -> Option<&'static str> {
    let t = text.trim_ascii_start();
    let unsigned = t
        .strip_prefix(b"-")
        .or_else(|| t.strip_prefix(b"+"))
        .unwrap_or(t);
    let digits = unsigned.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = unsigned.get(digits..).unwrap_or_default();
    if digits == 0 || !rest.iter().all(u8::is_ascii_whitespace) {
        Some("Warning")
    } else if rest.is_empty() {
        None
    } else {
        Some("Note")
    }
}

/// MySQL's `TIMESTAMPDIFF(unit, a, b)`: whole `unit`s from `a` to `b`, truncated toward zero;
/// a month counts only once its day and time of day are reached.
fn timestampdiff(unit: &str, a: NaiveDateTime, b: NaiveDateTime) -> Option<i64> {
    let months = || {
        let whole =
            i64::from(b.year() - a.year()) * 12 + i64::from(b.month()) - i64::from(a.month());
        let within = |t: &NaiveDateTime| (t.day(), t.time());
        if whole > 0 && within(&b) < within(&a) {
            whole - 1
        } else if whole < 0 && within(&b) > within(&a) {
            whole + 1
        } else {
            whole
        }
    };
    let micros = (b - a).num_microseconds()?;
    Some(match unit {
        "microsecond" => micros,
        "second" => micros / 1_000_000,
        "minute" => micros / 60_000_000,
        "hour" => micros / 3_600_000_000,
        "day" => micros / 86_400_000_000,
        "week" => micros / 604_800_000_000,
        "month" => months(),
        "quarter" => months() / 3,
        "year" => months() / 12,
        _ => return None,
    })
}

/// `t` plus `n` of `unit` as MySQL computes it: months (and quarters, years) keep the day,
/// clamped to the month's last (`2020-01-31 + 1 MONTH` is `2020-02-29`), a fractional count of
/// them is rounded, the others are exact. `None` past the calendar's range.
fn date_add(t: NaiveDateTime, n: f64, unit: &str) -> Option<NaiveDateTime> {
    let months = |per: f64| -> Option<NaiveDateTime> {
        let months = (n * per).round();
        if !months.is_finite() || months.abs() > f64::from(u32::MAX) {
            return None;
        }
        // Checked above: a whole number within u32 in magnitude.
        let count = chrono::Months::new(months.abs() as u32);
        if months < 0.0 {
            t.checked_sub_months(count)
        } else {
            t.checked_add_months(count)
        }
    };
    let micros_per = match unit {
        "year" => return months(12.0),
        "quarter" => return months(3.0),
        "month" => return months(1.0),
        "week" => 7.0 * 86_400e6,
        "day" => 86_400e6,
        "hour" => 3_600e6,
        "minute" => 60e6,
        "second" => 1e6,
        "microsecond" => 1.0,
        _ => return None,
    };
    let micros = (n * micros_per).round();
    if !micros.is_finite() || micros.abs() > 9.0e18 {
        return None;
    }
    // Checked above: within i64.
    t.checked_add_signed(chrono::TimeDelta::microseconds(micros as i64))
}

/// MySQL's `DATE_FORMAT` specifiers, mapped to chrono's; an unknown `%x` prints `x`, as
/// MySQL does.
fn date_format(t: NaiveDateTime, format: &str) -> String {
    let mut out = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            break;
        };
        let chrono_spec = match spec {
            'Y' => "%Y",
            'y' => "%y",
            'm' => "%m",
            'c' => "%-m",
            'd' => "%d",
            'e' => "%-d",
            'H' => "%H",
            'k' => "%-H",
            'h' | 'I' => "%I",
            'l' => "%-I",
            'i' => "%M",
            's' | 'S' => "%S",
            'f' => "%6f",
            'p' => "%p",
            'M' => "%B",
            'b' => "%b",
            'W' => "%A",
            'a' => "%a",
            'j' => "%j",
            'T' => "%H:%M:%S",
            'r' => "%I:%M:%S %p",
            'w' => "%w",
            '%' => "%%",
            other => {
                out.push(other);
                continue;
            }
        };
        out.push_str(&t.format(chrono_spec).to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        let facts = Arc::new(ConnectionFacts::default());
        facts.last_insert_id.store(41, Ordering::Relaxed);
        register(&c, "shop", &facts).unwrap();
        c
    }

    #[test]
    fn registers_every_function_the_dialect_leaves_to_the_engine() {
        let c = conn();
        let mut stmt = c
            .prepare("SELECT 1 FROM pragma_function_list WHERE name = ?1")
            .unwrap();
        for name in crate::dialect::ENGINE_FUNCTIONS {
            assert!(
                stmt.exists([name.to_lowercase()]).unwrap(),
                "{name} is not registered"
            );
        }
    }

    #[test]
    fn answers_string_hash_and_date_part_functions() {
        let c = conn();
        assert_eq!(
            one(&c, "SELECT LEFT('héllo', 2) || RIGHT('world', 3)"),
            Value::Text("hérld".into())
        );
        assert_eq!(
            one(&c, "SELECT SHA1('abc')"),
            Value::Text("a9993e364706816aba3e25717850c26c9cd0d89d".into())
        );
        assert_eq!(
            one(&c, "SELECT MD5('abc')"),
            Value::Text("900150983cd24fb0d6963f7d28e17f72".into())
        );
        assert_eq!(
            one(
                &c,
                "SELECT YEAR('2024-03-07 09:05:01') * 100 + MONTH('2024-03-07')"
            ),
            Value::Integer(202_403)
        );
        assert_eq!(one(&c, "SELECT 'Apple' REGEXP '^a'"), Value::Integer(1));
        assert_eq!(one(&c, "SELECT DATABASE()"), Value::Text("shop".into()));
        assert_eq!(
            one(&c, "SELECT FROM_UNIXTIME(0)"),
            Value::Text("1970-01-01 00:00:00".into())
        );
    }

    fn one(c: &Connection, sql: &str) -> Value {
        c.query_row(sql, [], |r| r.get::<_, Value>(0)).unwrap()
    }

    #[test]
    fn dates_differ_in_days_and_weekdays_count_from_monday() {
        let c = conn();
        assert_eq!(
            one(&c, "SELECT datediff('2024-03-01', '2024-02-01 23:59:59')"),
            Value::Integer(29)
        );
        assert_eq!(one(&c, "SELECT weekday('2024-03-01')"), Value::Integer(4));
        let diff = |unit: &str, a: &str, b: &str| {
            one(
                &c,
                &format!("SELECT mysql_timestampdiff('{unit}', '{a}', '{b}')"),
            )
        };
        assert_eq!(diff("day", "2024-02-01", "2024-03-01"), Value::Integer(29));
        assert_eq!(
            diff("second", "2024-02-01 00:00:00", "2024-02-01 00:01:00"),
            Value::Integer(60)
        );
        assert_eq!(diff("month", "2024-01-31", "2024-02-29"), Value::Integer(0));
        assert_eq!(diff("month", "2024-01-31", "2024-03-31"), Value::Integer(2));
        assert_eq!(
            diff("month", "2024-03-31", "2024-01-31"),
            Value::Integer(-2)
        );
        assert_eq!(diff("year", "2020-02-29", "2024-02-28"), Value::Integer(3));
        for (sql, want) in [
            ("SELECT mysql_cast_signed(1.6)", Value::Integer(2)),
            ("SELECT mysql_cast_signed(-1.6)", Value::Integer(-2)),
            ("SELECT mysql_cast_signed('12abc')", Value::Integer(12)),
            ("SELECT mysql_cast_signed(' -1.5')", Value::Integer(-1)),
            ("SELECT mysql_cast_signed('x')", Value::Integer(0)),
            ("SELECT mysql_cast_unsigned(7)", Value::Integer(7)),
        ] {
            assert_eq!(one(&c, sql), want, "{sql}");
        }
        for refused in [
            "SELECT mysql_cast_unsigned(-1)",
            "SELECT mysql_cast_signed(2.5)",
            "SELECT mysql_cast_signed(1e19)",
            "SELECT mysql_cast_signed('9223372036854775808')",
            "SELECT mysql_cast_unsigned('18446744073709551615')",
        ] {
            assert!(
                c.query_row(refused, [], |r| r.get::<_, i64>(0)).is_err(),
                "{refused}"
            );
        }
        assert_eq!(
            one(&c, "SELECT datediff('nope', '2024-02-01')"),
            Value::Null
        );
    }

    #[test]
    fn concat_is_null_when_any_argument_is() {
        let c = conn();
        assert_eq!(
            one(&c, "SELECT CONCAT('a', 1, 2.5)"),
            Value::Text("a12.5".into())
        );
        assert_eq!(one(&c, "SELECT CONCAT('a', NULL)"), Value::Null);
    }

    #[test]
    fn formats_dates_with_mysql_specifiers() {
        let c = conn();
        assert_eq!(
            one(
                &c,
                "SELECT DATE_FORMAT('2024-03-07 09:05:01', '%Y/%m/%d %H:%i:%s %W %M %e %%')"
            ),
            Value::Text("2024/03/07 09:05:01 Thursday March 7 %".into())
        );
        assert_eq!(one(&c, "SELECT DATE_FORMAT('nonsense', '%Y')"), Value::Null);
        assert_eq!(
            one(&c, "SELECT DATE_FORMAT('2024-03-07', '%d.%m.%y')"),
            Value::Text("07.03.24".into())
        );
    }

    #[test]
    fn now_and_last_insert_id_answer() {
        let c = conn();
        let Value::Text(now) = one(&c, "SELECT NOW()") else {
            panic!("text expected")
        };
        assert!(
            NaiveDateTime::parse_from_str(&now, DATETIME_FORMAT).is_ok(),
            "{now}"
        );
        assert_eq!(one(&c, "SELECT LAST_INSERT_ID()"), Value::Integer(41));
        assert!(
            matches!(one(&c, "SELECT UNIX_TIMESTAMP()"), Value::Integer(n) if n > 1_700_000_000)
        );
    }
}
