//! The engine's side of [`crate::dialect::TypedColumn`]: the functions that give a value as
//! its column's declared type asks, reading the types the executor looked up for the running
//! statement ([`ColumnKinds`]).
//! - `mysql_json_typed(x, i)`: a `DECIMAL` with its scale, a `FLOAT` or `DOUBLE` with the
//!   digits its text has, and a `JSON` document, each as JSON (SQLite's JSON functions embed
//!   a value of the JSON subtype as it is); any other value unchanged;
//! - `mysql_round_typed(x, d, i)`: a `DOUBLE` rounded as MariaDB rounds one, its binary
//!   value times 10^d to the nearest integer, a tie to even (1.25 to one decimal is 1.2);
//!   anything else as `mysql_round`;
//! - `mysql_text_typed(x, i)`: a number as MySQL writes its column's type in text, for a text
//!   function (`DECIMAL` with its scale, `FLOAT` with 6 significant digits, `DOUBLE` with
//!   its shortest digits), a binary string's text as its bytes (`LIKE` folds nothing there),
//!   the text of a column in a `_bin` collation marked with a subtype (`LIKE` compares its
//!   characters); any other value unchanged.

use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use rusqlite::functions::{FunctionFlags, SubType};
use rusqlite::types::{Value, ValueRef};

use crate::column_shape::{Shape, decimal_text, float_column_text};

/// What a declared type asks of a value here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredKind {
    /// `DECIMAL(p, s)`: `s` decimals.
    Decimal(usize),
    /// `DOUBLE`, `REAL`, `FLOAT(p)` of more than 24 bits.
    Double,
    /// `FLOAT`, a 4-byte float; `FLOAT(m,d)`: `d` decimals.
    Float(Option<u8>),
    /// `JSON`.
    Json,
    /// A binary string (`BINARY`, `VARBINARY`, a `BLOB`): `LIKE` compares its bytes.
    Binary,
    /// Text in a `_bin` collation: `LIKE` compares its characters, nothing folded.
    TextBin,
    /// Anything else, or a column not found.
    Other,
}

impl DeclaredKind {
    /// The kind of declared type `decl`.
    #[must_use]
    pub fn of(decl: &str) -> Self {
        if let Shape::Float(decimals) = Shape::of(decl) {
            return Self::Float(decimals);
        }
        let lower = decl.trim().to_ascii_lowercase();
        if matches!(
            lower.split(['(', ' ']).next().unwrap_or_default(),
            "double" | "float" | "real"
        ) {
            return Self::Double;
        }
        if matches!(
            lower.split(['(', ' ']).next().unwrap_or_default(),
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob"
        ) {
            return Self::Binary;
        }
        match Shape::of(decl) {
            Shape::Decimal(scale) => Self::Decimal(scale),
            Shape::Json => Self::Json,
            _ => Self::Other,
        }
    }
}

/// The declared types of the columns the running statement's typed arguments name, by index.
#[derive(Debug, Default)]
pub struct ColumnKinds(Mutex<Vec<DeclaredKind>>);

impl ColumnKinds {
    /// Sets the running statement's.
    pub fn set(&self, kinds: Vec<DeclaredKind>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = kinds;
    }

    /// The kind of column `i` (a number from the statement's text), `Other` when none;
    /// [`crate::dialect::DOUBLE_INDEX`] is a double's.
    fn get(&self, i: i64) -> DeclaredKind {
        if i == crate::dialect::DOUBLE_INDEX {
            return DeclaredKind::Double;
        }
        usize::try_from(i).ok().map_or(DeclaredKind::Other, |i| {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(i)
                .copied()
                .unwrap_or(DeclaredKind::Other)
        })
    }
}

/// SQLite's JSON subtype (`'J'`).
const JSON_SUBTYPE: SubType = Some(74);

/// Registers the functions on `conn`, reading `kinds`.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(conn: &Connection, kinds: &Arc<ColumnKinds>) -> rusqlite::Result<()> {
    // Direct only: never in a schema (a generated column, an index, a view), where what they
    // read would be some other statement's.
    let flags = FunctionFlags::SQLITE_UTF8
        | FunctionFlags::SQLITE_DETERMINISTIC
        | FunctionFlags::SQLITE_DIRECTONLY
        | FunctionFlags::SQLITE_RESULT_SUBTYPE;
    let json_kinds = Arc::clone(kinds);
    conn.create_scalar_function(crate::dialect::JSON_TYPED_FN, 2, flags, move |ctx| {
        let value: Value = ctx.get(0)?;
        let kind = json_kinds.get(ctx.get(1)?);
        Ok(match (kind, value) {
            (DeclaredKind::Decimal(scale), Value::Real(f)) => {
                (Value::Text(decimal_text(f, scale)), JSON_SUBTYPE)
            }
            #[expect(
                clippy::cast_precision_loss,
                reason = "a DECIMAL SQLite holds as a double"
            )]
            (DeclaredKind::Decimal(scale), Value::Integer(i)) if scale > 0 => {
                (Value::Text(decimal_text(i as f64, scale)), JSON_SUBTYPE)
            }
            (DeclaredKind::Json, Value::Text(doc)) => (Value::Text(doc), JSON_SUBTYPE),
            (DeclaredKind::Float(decimals), Value::Real(f)) => {
                (Value::Text(float_column_text(f, decimals)), JSON_SUBTYPE)
            }
            // Its shortest digits, as in text (`1e20`, `3`; SQLite writes `1.0e+20`, `3.0`).
            (DeclaredKind::Double, Value::Real(f)) if f.is_finite() => {
                (Value::Text(crate::engine::double_text(f)), JSON_SUBTYPE)
            }
            (_, other) => (other, None),
        })
    })?;
    let text_kinds = Arc::clone(kinds);
    conn.create_scalar_function(crate::dialect::TEXT_TYPED_FN, 2, flags, move |ctx| {
        let kind = text_kinds.get(ctx.get(1)?);
        let value: Value = ctx.get(0)?;
        #[expect(
            clippy::cast_precision_loss,
            reason = "a number SQLite holds as a double"
        )]
        let number = match (value, kind) {
            // Its bytes, which a text function reads as they are (`LIKE`: no folding).
            (Value::Text(t), DeclaredKind::Binary) => {
                return Ok((Value::Blob(t.into_bytes()), None));
            }
            // Marked for `LIKE`, which has no other way to know the column's collation.
            (Value::Text(t), DeclaredKind::TextBin) => {
                return Ok((Value::Text(t), crate::utf8mb4_bin::SUBTYPE));
            }
            (
                value,
                DeclaredKind::Json
                | DeclaredKind::Other
                | DeclaredKind::Binary
                | DeclaredKind::TextBin,
            ) => {
                return Ok((value, None));
            }
            (Value::Real(f), _) => f,
            (Value::Integer(i), _) => i as f64,
            (value, _) => return Ok((value, None)),
        };
        let text = match kind {
            DeclaredKind::Decimal(scale) => decimal_text(number, scale),
            DeclaredKind::Float(decimals) => float_column_text(number, decimals),
            _ => crate::engine::double_text(number),
        };
        Ok((Value::Text(text), None))
    })?;
    let round_kinds = Arc::clone(kinds);
    conn.create_scalar_function(crate::dialect::ROUND_TYPED_FN, 3, flags, move |ctx| {
        let kind = round_kinds.get(ctx.get(2)?);
        let (ValueRef::Real(x), DeclaredKind::Double | DeclaredKind::Float(_)) =
            (ctx.get_raw(0), kind)
        else {
            return Ok(crate::mysql_numeric_functions::round_value(
                ctx.get_raw(0),
                Some(ctx.get_raw(1)),
            ));
        };
        let Some(digits) = ctx.get::<Option<i64>>(1)? else {
            return Ok(None);
        };
        Ok(Some(Value::Real(
            crate::mysql_numeric_functions::round_double(x, digits),
        )))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::DeclaredKind;
    use crate::mysql_numeric_functions::round_double;

    /// MariaDB 10.11's answers for a `DOUBLE` column (`SELECT ROUND(f, d)`).
    #[test]
    fn rounds_a_double_as_mariadb_does() {
        for (x, digits, mariadb) in [
            (1.25, 1, 1.2),
            (2.675, 1, 2.7),
            (2.675, 2, 2.68),
            (1.245, 2, 1.25),
            (0.545, 2, 0.55),
            (2.305, 2, 2.31),
            (2.5, 0, 2.0),
            (3.5, 0, 4.0),
            (-2.5, 0, -2.0),
            (15.0, -1, 20.0),
            (25.0, -1, 20.0),
            (1.005, 2, 1.0),
            (1.25, 2, 1.25),
        ] {
            assert_eq!(round_double(x, digits), mariadb, "ROUND({x}, {digits})");
        }
    }

    #[test]
    fn reads_declared_types() {
        assert_eq!(DeclaredKind::of("DECIMAL(10,2)"), DeclaredKind::Decimal(2));
        assert_eq!(DeclaredKind::of("double"), DeclaredKind::Double);
        assert_eq!(DeclaredKind::of("FLOAT"), DeclaredKind::Float(None));
        assert_eq!(DeclaredKind::of("FLOAT(30)"), DeclaredKind::Double);
        assert_eq!(DeclaredKind::of("json"), DeclaredKind::Json);
        assert_eq!(DeclaredKind::of("int"), DeclaredKind::Other);
    }
}
