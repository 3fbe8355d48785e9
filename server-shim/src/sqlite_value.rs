//! How a [`Cell`] is bound to SQLite: the one conversion the executor and the MySQL functions
//! registered on its connections share.

use rusqlite::types::Value;

use crate::engine::Cell;

/// A cell as the SQLite value it is bound as.
pub fn to_sqlite(cell: &Cell) -> Value {
    match cell {
        Cell::Null => Value::Null,
        Cell::Int(v) => Value::Integer(*v),
        Cell::UInt(v) => {
            i64::try_from(*v).map_or_else(|_| Value::Text(v.to_string()), Value::Integer)
        }
        Cell::Float(v) | Cell::Float32(v, _) => Value::Real(*v),
        Cell::Decimal(v) | Cell::Text(v) | Cell::Json(v) => Value::Text(v.clone()),
        Cell::Bytes(v) => match std::str::from_utf8(v) {
            Ok(s) => Value::Text(s.to_owned()),
            Err(_) => Value::Blob(v.clone()),
        },
        Cell::Date(_) | Cell::DateTime(_) | Cell::Time(_) => {
            cell.to_text().map_or(Value::Null, Value::Text)
        }
        Cell::Bit(v) => Value::Integer(
            v.iter()
                .fold(0_i64, |n, byte| n.wrapping_shl(8) | i64::from(*byte)),
        ),
    }
}
