//! MariaDB's JSON functions SQLite lacks, or has with other answers, under names of their
//! own where SQLite has a namesake:
//! - `JSON_EXTRACT` (`mysql_json_extract`): the value as MariaDB writes it, a string with its
//!   quotes, `", "` between elements and `": "` after a key, strings and numbers as written;
//!   where the dialect finds it compared, in arithmetic or anywhere else it is read as a
//!   value, the value typed ([`compared_as`]);
//! - `JSON_OBJECT` and `JSON_ARRAY` (`mysql_json_text` around SQLite's): MariaDB's spacing;
//! - `JSON_ARRAYAGG` (`mysql_json_arrayagg_text` around SQLite's `json_group_array`): `,`
//!   between its elements, each written with MariaDB's spacing;
//! - `JSON_TYPE` (`mysql_json_type`): MySQL's upper-case names;
//! - `JSON_LENGTH`, `JSON_UNQUOTE`;
//! - `JSON_CONTAINS` ([`contains`]), which SQLite lacks.
//!
//! A path is `$` followed by `.key`, `."key"`, `[n]`, `[last]` and `[last-n]` steps; wildcards
//! (`*`, `**`) and ranges (`[1 to 3]`) are refused with an error. A document that is not
//! JSON, or a path that is not one, gives NULL, as MariaDB gives (with a warning).

use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};

/// Deepest nesting parsed; deeper documents are treated as not JSON (MariaDB's limit is 32).
const MAX_DEPTH: usize = 32;
/// Most paths one `JSON_EXTRACT` takes.
const MAX_PATHS: i32 = 8;

/// A JSON value and its parts, each scalar as its source text.
#[derive(Debug, PartialEq)]
enum Node<'a> {
    /// Each member's key (its escapes undone, to compare), the key as written, its value.
    Object(Vec<(String, &'a str, Node<'a>)>),
    Array(Vec<Node<'a>>),
    Scalar(&'a str),
}

/// One step of a path.
#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    /// `[n]`.
    Index(usize),
    /// `[last]` (0), `[last - n]` (n).
    FromLast(usize),
}

/// Why a path cannot be followed.
#[derive(Debug, PartialEq)]
enum PathError {
    /// Not a path: NULL, as MariaDB answers.
    Invalid,
    /// A wildcard: refused.
    Wildcard,
}

/// Registers the functions on `conn`.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    for n_args in 2..=MAX_PATHS + 1 {
        conn.create_scalar_function("mysql_json_extract", n_args, pure, |ctx| {
            Ok(extracted(ctx)?.map(|(written, _)| written))
        })?;
    }
    for (name, mode) in [
        (crate::dialect::JSON_SQL_VALUE_FN, Compared::Typed),
        (crate::dialect::JSON_VALUE_FN, Compared::WithString),
        (crate::dialect::JSON_NUMBER_FN, Compared::WithNumber),
    ] {
        for n_args in 2..=MAX_PATHS + 1 {
            conn.create_scalar_function(name, n_args, pure, move |ctx| {
                Ok(extracted(ctx)?.map_or(Value::Null, |(written, paths)| {
                    compared_as(&written, paths, mode)
                }))
            })?;
        }
    }
    for n_args in 2..=MAX_PATHS + 1 {
        conn.create_scalar_function(
            crate::dialect::JSON_NEGATED_NUMBER_FN,
            n_args,
            pure,
            |ctx| {
                let Some((written, paths)) = extracted(ctx)? else {
                    return Ok(Value::Null);
                };
                Ok(match compared_as(&written, paths, Compared::WithNumber) {
                    // A negative zero (a string, null or array negated; the pattern takes
                    // both zeros): MariaDB 10.11's releases write it differently (10.11.14
                    // `-0`, 10.11.19 `0`).
                    Value::Real(0.0) => {
                        return Err(rusqlite::Error::UserFunctionError(
                            "negating a JSON value that is not a number (MariaDB 10.11 \
                             releases write the negative zero differently)"
                                .into(),
                        ));
                    }
                    Value::Real(f) => Value::Real(-f),
                    Value::Integer(i) => i
                        .checked_neg()
                        .map_or(Value::Real(-(i as f64)), Value::Integer),
                    other => other,
                })
            },
        )?;
    }
    conn.create_scalar_function("mysql_json_text", 1, pure, |ctx| {
        let Some(doc) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        Ok(Some(as_mariadb_writes(&doc)))
    })?;
    conn.create_scalar_function(crate::dialect::JSON_ARRAYAGG_TEXT_FN, 1, pure, |ctx| {
        let Some(doc) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        Ok(Some(match parse(&doc) {
            Some(Node::Array(items)) => {
                let mut out = String::with_capacity(doc.len() + doc.len() / 4);
                out.push('[');
                for (i, n) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(n, &mut out);
                }
                out.push(']');
                out
            }
            _ => doc,
        }))
    })?;
    conn.create_scalar_function("json_unquote", 1, pure, |ctx| {
        let Some(text) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        unquoted(&text)
            .map(Some)
            .ok_or_else(|| rusqlite::Error::UserFunctionError("Syntax error in JSON text".into()))
    })?;
    conn.create_scalar_function("mysql_json_type", 1, pure, |ctx| {
        let Some(text) = ctx.get::<Option<String>>(0)? else {
            return Ok(None);
        };
        json_type(&text)
            .map(Some)
            .ok_or_else(|| rusqlite::Error::UserFunctionError("Syntax error in JSON text".into()))
    })?;
    for n_args in [2, 3] {
        conn.create_scalar_function("json_contains", n_args, pure, |ctx| {
            let mut args = Vec::with_capacity(3);
            for i in 0..ctx.len() {
                // A number is its JSON text (a JSON column's `10` or `1.5` is held as one).
                let text = match ctx.get_raw(i) {
                    ValueRef::Null => return Ok(None),
                    ValueRef::Integer(n) => n.to_string(),
                    ValueRef::Real(f) => crate::engine::double_text(f),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        String::from_utf8_lossy(t).into_owned()
                    }
                };
                args.push(text);
            }
            let path = args.get(2).map_or("$", String::as_str);
            let (Some(target), Some(candidate)) = (
                args.first().and_then(|t| parse(t)),
                args.get(1).and_then(|c| parse(c)),
            ) else {
                return Ok(None);
            };
            let steps = match steps(path) {
                Ok(s) => s,
                Err(PathError::Invalid) => return Ok(None),
                Err(PathError::Wildcard) => {
                    return Err(rusqlite::Error::UserFunctionError(
                        "JSON path with a wildcard".into(),
                    ));
                }
            };
            // A path that leads nowhere contains nothing (MariaDB's 0; MySQL says NULL).
            Ok(Some(
                find(&target, &steps).is_some_and(|t| contains(t, &candidate)),
            ))
        })?;
    }
    for n_args in [1, 2] {
        conn.create_scalar_function("json_length", n_args, pure, |ctx| {
            let Some(doc) = ctx.get::<Option<String>>(0)? else {
                return Ok(None);
            };
            let path = if ctx.len() > 1 {
                match ctx.get::<Option<String>>(1)? {
                    Some(p) => p,
                    None => return Ok(None),
                }
            } else {
                "$".to_owned()
            };
            let Some(root) = parse(&doc) else {
                return Ok(None);
            };
            let steps = match steps(&path) {
                Ok(s) => s,
                Err(PathError::Invalid) => return Ok(None),
                Err(PathError::Wildcard) => {
                    return Err(rusqlite::Error::UserFunctionError(
                        "JSON path with a wildcard".into(),
                    ));
                }
            };
            Ok(find(&root, &steps).map(|n| match n {
                Node::Object(members) => members.len() as i64,
                Node::Array(items) => items.len() as i64,
                Node::Scalar(_) => 1,
            }))
        })?;
    }
    Ok(())
}

/// MySQL's `JSON_CONTAINS(target, candidate)`: scalars equal as JSON values (numbers by value,
/// the rest as written), an object containing each of the candidate object's members, an
/// array containing a value one of its elements contains, or each element of a candidate
/// array.
fn contains(target: &Node<'_>, candidate: &Node<'_>) -> bool {
    match (target, candidate) {
        // Each wanted element contained in the target as a whole (`[1, 2]` contains
        // `[[1, 2]]`, as MariaDB answers).
        (Node::Array(_), Node::Array(wanted)) => wanted.iter().all(|w| contains(target, w)),
        (Node::Array(items), _) => items.iter().any(|item| contains(item, candidate)),
        (Node::Object(members), Node::Object(wanted)) => wanted.iter().all(|(key, _, w)| {
            members
                .iter()
                .any(|(k, _, value)| k == key && contains(value, w))
        }),
        (Node::Scalar(a), Node::Scalar(b)) => same_scalar(a, b),
        _ => false,
    }
}

/// Whether two JSON scalars, as written, are the same value.
fn same_scalar(a: &str, b: &str) -> bool {
    let number = |s: &str| {
        s.starts_with(|c: char| c == '-' || c.is_ascii_digit())
            .then(|| s.parse::<f64>().ok())
            .flatten()
    };
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x == y,
        // Strings as written: MariaDB finds no `"\u0061"` in `"a"`.
        (None, None) => a == b,
        _ => false,
    }
}

/// `JSON_EXTRACT(doc, paths...)` of a call's arguments: what it found, as MariaDB writes it,
/// and how many paths it took; `None` for NULL (a NULL argument, nothing found).
fn extracted(ctx: &Context<'_>) -> rusqlite::Result<Option<(String, usize)>> {
    let Some(doc) = ctx.get::<Option<String>>(0)? else {
        return Ok(None);
    };
    let mut paths = Vec::with_capacity(ctx.len().saturating_sub(1));
    for i in 1..ctx.len() {
        let Some(path) = ctx.get::<Option<String>>(i)? else {
            return Ok(None);
        };
        paths.push(path);
    }
    let written = extract(&doc, &paths)
        .map_err(|_| rusqlite::Error::UserFunctionError("JSON path with a wildcard".into()))?;
    Ok(written.map(|w| (w, paths.len())))
}

/// Where a `JSON_EXTRACT`'s value is read (`crate::dialect::JSON_SQL_VALUE_FN` and its
/// siblings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compared {
    /// As SQLite's `json_extract` types it: `true` 1, `false` 0, `null` NULL.
    Typed,
    /// Compared with a string: `null`, `true` and `false` as written.
    WithString,
    /// Compared with a number, or in arithmetic: a `DOUBLE`.
    WithNumber,
}

/// The value `JSON_EXTRACT` found (`written` as MariaDB writes it, from `paths` paths) read
/// `mode`'s way: one string without its quotes, one number as a number, anything else as
/// written (`[1, 2]`), and [`Compared`] says what `null`, `true` and `false` are. With a
/// number: a number's value, a string's leading number (`"1.5x"` is 1.5), `true` 1, anything
/// else 0, all as doubles.
fn compared_as(written: &str, paths: usize, mode: Compared) -> Value {
    let number = mode == Compared::WithNumber;
    if mode == Compared::Typed && paths == 1 {
        match written {
            "true" => return Value::Integer(1),
            "false" => return Value::Integer(0),
            "null" => return Value::Null,
            _ => {}
        }
    }
    let one = (paths == 1).then_some(written);
    let string = one.filter(|w| w.starts_with('"')).and_then(unquoted);
    let value = one
        .filter(|w| w.starts_with(|c: char| c == '-' || c.is_ascii_digit()))
        .and_then(|w| {
            w.parse::<i64>()
                .map(Value::Integer)
                .or_else(|_| w.parse::<f64>().map(Value::Real))
                .ok()
        });
    match (value, string) {
        // A `DOUBLE`, as MariaDB reads a JSON value as a number (`JSON_EXTRACT(...) + 1` is one).
        (Some(Value::Integer(i)), _) if number => Value::Real(i as f64),
        (Some(v), _) => v,
        (None, Some(s)) if number => Value::Real(leading_number(&s)),
        (None, Some(s)) => Value::Text(s),
        (None, None) if number => Value::Real(if one == Some("true") { 1.0 } else { 0.0 }),
        (None, None) => Value::Text(written.to_owned()),
    }
}

/// The number a string starts with, as MySQL reads one (`" 1.5x"` is 1.5, `"x"` 0).
fn leading_number(s: &str) -> f64 {
    let t = s.trim_start();
    let bytes = t.as_bytes();
    let mut end = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let digits = |from: usize| {
        bytes
            .get(from..)
            .map_or(0, |b| b.iter().take_while(|c| c.is_ascii_digit()).count())
    };
    end += digits(end);
    if bytes.get(end) == Some(&b'.') {
        end += 1 + digits(end + 1);
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(end + 1), Some(b'-' | b'+')));
        let exponent = digits(end + 1 + sign);
        if exponent > 0 {
            end += 1 + sign + exponent;
        }
    }
    t.get(..end)
        .and_then(|prefix| prefix.parse().ok())
        .unwrap_or(0.0)
}

/// MySQL's `JSON_UNQUOTE` (and a key's text): a JSON string's text with its escapes undone; anything else as it
/// is. `None` for a quoted string whose escapes are not JSON's.
fn unquoted(text: &str) -> Option<String> {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| text.len() >= 2)
    else {
        return Some(text.to_owned());
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                let unit = u32::from_str_radix(&hex, 16).ok()?;
                out.push(char::from_u32(unit)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// MySQL's name of the type of the JSON document `text`, `None` when it is no JSON.
fn json_type(text: &str) -> Option<String> {
    let t = text.trim();
    let name = match t.as_bytes().first()? {
        b'{' if t.ends_with('}') => "OBJECT",
        b'[' if t.ends_with(']') => "ARRAY",
        b'"' if t.len() >= 2 && t.ends_with('"') => "STRING",
        _ if t == "true" || t == "false" => "BOOLEAN",
        _ if t == "null" => "NULL",
        _ => {
            let number: f64 = t.parse().ok()?;
            if !number.is_finite() {
                return None;
            }
            if t.contains(['.', 'e', 'E']) {
                "DOUBLE"
            } else {
                "INTEGER"
            }
        }
    };
    Some(name.to_owned())
}

/// `JSON_EXTRACT(doc, paths...)`: one path, the value found (or NULL); several, an array of
/// those found (NULL if none).
/// # Errors
/// [`PathError::Wildcard`] for a path with a wildcard.
fn extract(doc: &str, paths: &[String]) -> Result<Option<String>, PathError> {
    let Some(root) = parse(doc) else {
        return Ok(None);
    };
    let mut found = Vec::new();
    for path in paths {
        match steps(path) {
            Ok(steps) => found.extend(find(&root, &steps)),
            Err(PathError::Invalid) => return Ok(None),
            Err(PathError::Wildcard) => return Err(PathError::Wildcard),
        }
    }
    let mut out = String::new();
    match (paths.len(), found.as_slice()) {
        (_, []) => return Ok(None),
        (1, [one]) => write(one, &mut out),
        (_, many) => {
            out.push('[');
            for (i, n) in many.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(n, &mut out);
            }
            out.push(']');
        }
    }
    Ok(Some(out))
}

fn find<'n, 'a>(root: &'n Node<'a>, steps: &[Step]) -> Option<&'n Node<'a>> {
    steps
        .iter()
        .try_fold(root, |node, step| match (node, step) {
            (Node::Object(members), Step::Key(k)) => {
                members.iter().find(|(m, _, _)| m == k).map(|(_, _, v)| v)
            }
            (Node::Array(items), Step::Index(i)) => items.get(*i),
            (Node::Array(items), Step::FromLast(n)) => {
                items.len().checked_sub(n + 1).and_then(|i| items.get(i))
            }
            // A value that is not an array is followed as one of one element, itself, as
            // MariaDB wraps it for `[0]` (not for `[last]`): `$[0]` of `1` is `1`.
            (_, Step::Index(0)) => Some(node),
            _ => None,
        })
}

/// A path's steps.
fn steps(path: &str) -> Result<Vec<Step>, PathError> {
    let rest = path.trim().strip_prefix('$').ok_or(PathError::Invalid)?;
    let mut out = Vec::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => match chars.peek() {
                Some('*') => return Err(PathError::Wildcard),
                Some('"') => {
                    chars.next();
                    let mut key = String::new();
                    loop {
                        match chars.next().ok_or(PathError::Invalid)? {
                            '"' => break,
                            '\\' => key.push(chars.next().ok_or(PathError::Invalid)?),
                            c => key.push(c),
                        }
                    }
                    out.push(Step::Key(key));
                }
                _ => {
                    let mut key = String::new();
                    while let Some(&c) = chars.peek() {
                        if c.is_alphanumeric() || c == '_' || c == '$' {
                            key.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    if key.is_empty() {
                        return Err(PathError::Invalid);
                    }
                    out.push(Step::Key(key));
                }
            },
            '[' => {
                let mut index = String::new();
                loop {
                    match chars.next().ok_or(PathError::Invalid)? {
                        ']' => break,
                        '*' => return Err(PathError::Wildcard),
                        c => index.push(c),
                    }
                }
                out.push(position(&index)?);
            }
            '*' => return Err(PathError::Wildcard),
            c if c.is_whitespace() => {}
            _ => return Err(PathError::Invalid),
        }
    }
    Ok(out)
}

/// An array step's position: `n`, `last` or `last-n` (MariaDB takes no space after the
/// `-`). A range (`1 to 3`) selects several values, as a wildcard does.
fn position(inside: &str) -> Result<Step, PathError> {
    let inside = inside.trim();
    if inside.split_whitespace().any(|w| w == "to") {
        return Err(PathError::Wildcard);
    }
    let number = |t: &str| {
        t.parse::<usize>()
            .ok()
            .filter(|_| t.starts_with(|c: char| c.is_ascii_digit()))
            .ok_or(PathError::Invalid)
    };
    match inside.strip_prefix("last").map(str::trim_start) {
        Some("") => Ok(Step::FromLast(0)),
        Some(rest) => Ok(Step::FromLast(number(
            rest.strip_prefix('-').ok_or(PathError::Invalid)?,
        )?)),
        None => Ok(Step::Index(number(inside)?)),
    }
}

/// `text` as one JSON value (surrounded by nothing but spaces), or `None`.
fn parse(text: &str) -> Option<Node<'_>> {
    let mut p = Parser { text, at: 0 };
    let node = p.value(0)?;
    p.space();
    (p.at == text.len()).then_some(node)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.space();
        (self.peek()? == b).then(|| self.at += 1)
    }

    fn value(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.space();
        match self.peek()? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                self.space();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(Node::Object(members));
                }
                loop {
                    self.space();
                    let key = self.string()?;
                    self.eat(b':')?;
                    let value = self.value(depth + 1)?;
                    members.push((unquoted(key)?, key, value));
                    self.space();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(Node::Object(members));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.space();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(Node::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.space();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Node::Array(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(Node::Scalar),
            _ => self.atom().map(Node::Scalar),
        }
    }

    /// A string token, quotes included, its escapes checked.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.at;
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return self.text.get(start..self.at);
                }
                b'\\' => {
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.text.get(self.at + 1..self.at + 5)?;
                            u16::from_str_radix(hex, 16).ok()?;
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    /// A number or `true`, `false`, `null`.
    fn atom(&mut self) -> Option<&'a str> {
        let start = self.at;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
            self.at += 1;
        }
        let token = self.text.get(start..self.at)?;
        let number = || {
            let digits = token.strip_prefix('-').unwrap_or(token);
            let (mantissa, exponent) = match digits.find(['e', 'E']) {
                Some(e) => (&digits[..e], Some(&digits[e + 1..])),
                None => (digits, None),
            };
            let (int, frac) = match mantissa.split_once('.') {
                Some((i, f)) => (i, Some(f)),
                None => (mantissa, None),
            };
            let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            all_digits(int)
                && (int == "0" || !int.starts_with('0'))
                && frac.is_none_or(all_digits)
                && exponent.is_none_or(|e| all_digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
        };
        (matches!(token, "true" | "false" | "null") || number()).then_some(token)
    }
}

/// The JSON document `doc` as MariaDB writes it; `doc` itself when it is not JSON.
fn as_mariadb_writes(doc: &str) -> String {
    parse(doc).map_or_else(
        || doc.to_owned(),
        |node| {
            let mut out = String::with_capacity(doc.len() + doc.len() / 4);
            write(&node, &mut out);
            out
        },
    )
}

/// `node` as MariaDB writes JSON.
fn write(node: &Node<'_>, out: &mut String) {
    match node {
        Node::Scalar(s) => out.push_str(s),
        Node::Array(items) => {
            out.push('[');
            for (i, n) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(n, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            out.push('{');
            for (i, (_, k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(k);
                out.push_str(": ");
                write(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(doc: &str, path: &str) -> Option<String> {
        extract(doc, &[path.to_owned()]).unwrap()
    }

    /// MariaDB 10.11's answers (`SELECT JSON_CONTAINS(target, candidate)`).
    #[test]
    fn contains_as_mariadb_answers() {
        for (target, candidate, mariadb) in [
            ("[1, 2]", "1", true),
            ("[1,[2,3]]", "[3]", true),
            (r#"{"a":1,"b":{"c":2}}"#, r#"{"b":{}}"#, true),
            ("1", "1.0", true),
            (r#""a""#, r#""A""#, false),
            (r#""a""#, r#""\u0061""#, false),
            ("[1,2]", "[]", true),
            (r#"{"a":[1,2]}"#, r#"{"a":1}"#, true),
            (r#"[{"a":1,"b":2}]"#, r#"{"a":1}"#, true),
            ("[1,2]", "[1,1]", true),
            ("1", "[1]", false),
            ("{}", "{}", true),
            (r#"["1"]"#, "1", false),
            ("true", "1", false),
            ("[1,2]", "[[1,2]]", true),
            ("[1,2]", "[[1,3]]", false),
            (r#"{"a":1}"#, r#"{"a":2}"#, false),
        ] {
            let (Some(t), Some(c)) = (parse(target), parse(candidate)) else {
                panic!("{target} or {candidate} is JSON");
            };
            assert_eq!(
                contains(&t, &c),
                mariadb,
                "JSON_CONTAINS({target}, {candidate})"
            );
        }
    }

    #[test]
    fn json_types_have_mysqls_names() {
        assert_eq!(json_type("[1]").as_deref(), Some("ARRAY"));
        assert_eq!(json_type(" {} ").as_deref(), Some("OBJECT"));
        assert_eq!(json_type("1.5").as_deref(), Some("DOUBLE"));
        assert_eq!(json_type("7").as_deref(), Some("INTEGER"));
        assert_eq!(json_type("\"x\"").as_deref(), Some("STRING"));
        assert_eq!(json_type("nope"), None);
    }

    #[test]
    fn unquotes_as_mysql_does() {
        assert_eq!(unquoted("\"a\\\"b\"").as_deref(), Some("a\"b"));
        assert_eq!(unquoted("\"\\u00e9\"").as_deref(), Some("é"));
        assert_eq!(unquoted("[1]").as_deref(), Some("[1]"));
        assert_eq!(unquoted("\"\\q\""), None);
    }

    #[test]
    fn extracts_as_mariadb_writes_it() {
        assert_eq!(
            one(r#"{"a":{"b":1,  "c":[1,2]}}"#, "$.a").as_deref(),
            Some(r#"{"b": 1, "c": [1, 2]}"#)
        );
        assert_eq!(one(r#"{"a": "x"}"#, "$.a").as_deref(), Some(r#""x""#));
        assert_eq!(one("[1, 2,3]", "$[1]").as_deref(), Some("2"));
        assert_eq!(one(r#"{"a":1}"#, "$.b"), None);
        assert_eq!(one(r#"{"a" :  1e3 }"#, "$.a").as_deref(), Some("1e3"));
        assert_eq!(one(" [ ] ", "$").as_deref(), Some("[]"));
        assert_eq!(one(r#"{"a":1}"#, r#"$."a""#).as_deref(), Some("1"));
        assert_eq!(one(r#"{"a":1,"a":2}"#, "$.a").as_deref(), Some("1"));
        assert_eq!(one("{x}", "$.a"), None);
        assert_eq!(one("[1,[2,3]]", "$[1][0]").as_deref(), Some("2"));
        assert_eq!(
            one(r#"{"a": "\u00e9"}"#, "$.a").as_deref(),
            Some(r#""\u00e9""#)
        );
        assert_eq!(one(r#"{"a":1}"#, "a"), None);
        assert_eq!(
            extract(r#"{"a":1,"b":2}"#, &["$.a".into(), "$.b".into()])
                .unwrap()
                .as_deref(),
            Some("[1, 2]")
        );
        assert_eq!(extract("[1]", &["$[*]".into()]), Err(PathError::Wildcard));
        assert_eq!(one("01", "$"), None);
        assert_eq!(one("[1,]", "$"), None);
        assert_eq!(one(&"[".repeat(40), "$"), None);
    }

    /// What a found value compares as (MariaDB 10.11: `JSON_EXTRACT(j, '$.a') = 5`, `= 'x'`).
    #[test]
    fn compares_as_mariadb_reads_a_json_value() {
        let string = |w: &str| compared_as(w, 1, Compared::WithString);
        let number = |w: &str| compared_as(w, 1, Compared::WithNumber);
        let typed = |w: &str| compared_as(w, 1, Compared::Typed);
        assert_eq!(typed("true"), Value::Integer(1));
        assert_eq!(typed("null"), Value::Null);
        assert_eq!(typed(r#""12.5""#), Value::Text("12.5".into()));
        assert_eq!(typed("7"), Value::Integer(7));
        assert_eq!(string(r#""x""#), Value::Text("x".into()));
        assert_eq!(string("5"), Value::Integer(5));
        assert_eq!(string("1.50"), Value::Real(1.5));
        assert_eq!(string("null"), Value::Text("null".into()));
        assert_eq!(string("[1, 2]"), Value::Text("[1, 2]".into()));
        assert_eq!(
            compared_as("[1, 1]", 2, Compared::WithString),
            Value::Text("[1, 1]".into())
        );
        assert_eq!(number("5"), Value::Real(5.0));
        assert_eq!(number(r#""5""#), Value::Real(5.0));
        assert_eq!(number(r#"" 1.5x""#), Value::Real(1.5));
        assert_eq!(number(r#""-2e1z""#), Value::Real(-20.0));
        assert_eq!(number(r#""x""#), Value::Real(0.0));
        assert_eq!(number("true"), Value::Real(1.0));
        assert_eq!(number("null"), Value::Real(0.0));
        assert_eq!(number("[1]"), Value::Real(0.0));
    }

    /// MariaDB 10.11's answers to `JSON_EXTRACT(doc, path)` with `last` and with an index
    /// on a value that is not an array.
    #[test]
    fn follows_last_and_wraps_a_value_for_index_zero_as_mariadb_does() {
        for (doc, path, mariadb) in [
            ("[1,2,3]", "$[last]", Some("3")),
            ("[1,2,3]", "$[last-1]", Some("2")),
            ("[1,2,3]", "$[last -1]", Some("2")),
            ("[1,2,3]", "$[last - 1]", None),
            ("[1,2,3]", "$[last-3]", None),
            ("[1,2,3]", "$[ 1 ]", Some("2")),
            ("[1,2,3]", "$[+1]", None),
            ("1", "$[0]", Some("1")),
            ("1", "$[1]", None),
            ("1", "$[last]", None),
            (r#""x""#, "$[0][0]", Some(r#""x""#)),
            (r#"{"a":1}"#, "$[0].a", Some("1")),
        ] {
            assert_eq!(one(doc, path).as_deref(), mariadb, "{doc} {path}");
        }
        assert_eq!(
            extract("[1,2]", &["$[0 to 1]".into()]),
            Err(PathError::Wildcard)
        );
    }
}
