//! MySQL functions SQLite lacks (or has with other semantics), registered on every SQLite
//! connection under their MySQL names, so everyday SQL runs unchanged: `NOW()`, `CURDATE()`,
//! `CURTIME()`, `UNIX_TIMESTAMP()`, `DATE_FORMAT()`, `CONCAT()` (NULL if any argument is
//! NULL, as in MySQL; SQLite's own `concat` skips NULLs), `LAST_INSERT_ID()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{Local, NaiveDate, NaiveDateTime};
use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};

/// MySQL's text form of a DATETIME.
const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// Registers the functions on `conn`. `last_insert_id` is the executor's, updated after each
/// INSERT.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(conn: &Connection, last_insert_id: Arc<AtomicI64>) -> rusqlite::Result<()> {
    // Time functions read the clock: not deterministic, so SQLite never caches their results.
    let volatile = FunctionFlags::SQLITE_UTF8;
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    for name in ["now", "sysdate", "localtime", "localtimestamp"] {
        conn.create_scalar_function(name, 0, volatile, |_| {
            Ok(Local::now().format(DATETIME_FORMAT).to_string())
        })?;
    }
    for name in ["curdate", "current_date"] {
        conn.create_scalar_function(name, 0, volatile, |_| {
            Ok(Local::now().format("%Y-%m-%d").to_string())
        })?;
    }
    for name in ["curtime", "current_time"] {
        conn.create_scalar_function(name, 0, volatile, |_| {
            Ok(Local::now().format("%H:%M:%S").to_string())
        })?;
    }
    conn.create_scalar_function("unix_timestamp", 0, volatile, |_| {
        Ok(Local::now().timestamp())
    })?;
    conn.create_scalar_function("unix_timestamp", 1, pure, |ctx| {
        Ok(datetime_arg(ctx, 0).map(|t| {
            t.and_local_timezone(Local)
                .earliest()
                .map_or(0, |l| l.timestamp())
        }))
    })?;
    conn.create_scalar_function("date_format", 2, pure, |ctx| {
        let Some(t) = datetime_arg(ctx, 0) else {
            return Ok(None);
        };
        let format: Option<String> = ctx.get(1)?;
        Ok(format.map(|f| date_format(t, &f)))
    })?;
    conn.create_scalar_function("concat", -1, pure, |ctx| concat(ctx))?;
    conn.create_scalar_function("last_insert_id", 0, volatile, move |_| {
        Ok(last_insert_id.load(Ordering::Relaxed))
    })?;
    Ok(())
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
        register(&c, Arc::new(AtomicI64::new(41))).unwrap();
        c
    }

    fn one(c: &Connection, sql: &str) -> Value {
        c.query_row(sql, [], |r| r.get::<_, Value>(0)).unwrap()
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
