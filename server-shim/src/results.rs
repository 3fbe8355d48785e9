//! Writing statement results with opensrv's writers: result sets (text and binary
//! protocol), OK packets and ERR packets.
//!
//! A column's MySQL type is chosen from its values: a column whose non-NULL values are all of
//! one kind gets that kind's type (`LONGLONG`, `DOUBLE`, `DATE`, ...); a mixed column is sent
//! as `VAR_STRING` text. An integer column whose declared type gives its width (`TINYINT`,
//! `INT`, ...) is sent as that width (`TINY`, `LONG`, ...) when every value fits, else as
//! `LONGLONG`. The binary protocol (prepared statements) encodes every value in its column's
//! type, so the two always agree.

use std::io;

use opensrv_mysql::{
    Column, ColumnFlags, ColumnType, OkResponse, QueryResultWriter, StatusFlags, ToMysqlValue,
};
use tokio::io::AsyncWrite;

use crate::engine::{Cell, IntWidth};
use crate::sql_error::SqlError;

/// A statement's reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A result set.
    Rows {
        /// Column names.
        columns: Vec<String>,
        /// Rows.
        rows: Vec<Vec<Cell>>,
        /// Each column's integer width, where its declared type says (empty: none known).
        int_widths: Vec<Option<IntWidth>>,
        /// Each column's table, as the statement calls it (empty: none known): clients key a
        /// row's columns of the same name by it (PyMySQL's `DictCursor`: `b.value`).
        tables: Vec<String>,
    },
    /// An OK packet.
    Ok {
        /// Rows changed.
        affected_rows: u64,
        /// The id an INSERT gave an `AUTO_INCREMENT` column (0 if none).
        last_insert_id: u64,
        /// How many notes the statement left (`SHOW WARNINGS`).
        warnings: u16,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    UInt,
    Float,
    Float32,
    Decimal,
    Date,
    DateTime,
    Bytes,
    Json,
    Time,
    Bit,
    Text,
}

fn kind_of(cell: &Cell) -> Option<Kind> {
    Some(match cell {
        Cell::Null => return None,
        Cell::Int(_) => Kind::Int,
        Cell::UInt(_) => Kind::UInt,
        Cell::Float(_) => Kind::Float,
        Cell::Float32(..) => Kind::Float32,
        Cell::Decimal(_) => Kind::Decimal,
        Cell::Date(_) => Kind::Date,
        Cell::DateTime(_) => Kind::DateTime,
        Cell::Bytes(_) => Kind::Bytes,
        Cell::Json(_) => Kind::Json,
        Cell::Time(_) => Kind::Time,
        Cell::Bit(_) => Kind::Bit,
        Cell::Text(_) => Kind::Text,
    })
}

/// The kind of column `i`: the common kind of its non-NULL values, else text.
fn column_kind(rows: &[Vec<Cell>], i: usize) -> Kind {
    let mut kind = None;
    for row in rows {
        match (kind, row.get(i).and_then(kind_of)) {
            (_, None) => {}
            (None, Some(k)) => kind = Some(k),
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => return Kind::Text,
        }
    }
    kind.unwrap_or(Kind::Text)
}

/// The width column `i` is sent with: its declared one, when it is an integer column all of
/// whose values fit.
fn column_width(
    rows: &[Vec<Cell>],
    i: usize,
    kind: Kind,
    declared: Option<IntWidth>,
) -> Option<IntWidth> {
    let width = declared.filter(|_| kind == Kind::Int)?;
    rows.iter()
        .all(|row| match row.get(i) {
            Some(Cell::Int(v)) => width.holds(*v),
            _ => true,
        })
        .then_some(width)
}

fn column_def(name: &str, kind: Kind, width: Option<IntWidth>, table: &str) -> Column {
    let (coltype, colflags) = match kind {
        Kind::Int => (
            match width {
                Some(IntWidth::Tiny) => ColumnType::MYSQL_TYPE_TINY,
                Some(IntWidth::Short) => ColumnType::MYSQL_TYPE_SHORT,
                Some(IntWidth::Medium) => ColumnType::MYSQL_TYPE_INT24,
                Some(IntWidth::Long) => ColumnType::MYSQL_TYPE_LONG,
                Some(IntWidth::LongLong) | None => ColumnType::MYSQL_TYPE_LONGLONG,
            },
            ColumnFlags::empty(),
        ),
        Kind::UInt => (ColumnType::MYSQL_TYPE_LONGLONG, ColumnFlags::UNSIGNED_FLAG),
        Kind::Float => (ColumnType::MYSQL_TYPE_DOUBLE, ColumnFlags::empty()),
        Kind::Float32 => (ColumnType::MYSQL_TYPE_FLOAT, ColumnFlags::empty()),
        Kind::Decimal => (ColumnType::MYSQL_TYPE_NEWDECIMAL, ColumnFlags::empty()),
        Kind::Date => (ColumnType::MYSQL_TYPE_DATE, ColumnFlags::empty()),
        Kind::DateTime => (ColumnType::MYSQL_TYPE_DATETIME, ColumnFlags::empty()),
        Kind::Bytes => (ColumnType::MYSQL_TYPE_BLOB, ColumnFlags::BINARY_FLAG),
        Kind::Json => (ColumnType::MYSQL_TYPE_JSON, ColumnFlags::BLOB_FLAG),
        Kind::Time => (ColumnType::MYSQL_TYPE_TIME, ColumnFlags::BINARY_FLAG),
        Kind::Bit => (
            ColumnType::MYSQL_TYPE_BIT,
            ColumnFlags::UNSIGNED_FLAG.union(ColumnFlags::BINARY_FLAG),
        ),
        Kind::Text => (ColumnType::MYSQL_TYPE_VAR_STRING, ColumnFlags::empty()),
    };
    Column {
        table: table.to_owned(),
        column: name.to_owned(),
        coltype,
        colflags,
    }
}

/// Writes `result` as the statement's reply. `status` goes into OK packets (autocommit,
/// in-transaction). Before a result set, `announce` learns which of its columns are binary
/// (opensrv cannot say so: `stream::column_charset`). An OK's count of notes, and a result
/// set's end, are written by the stream (`ConnShared::ok_warnings_next`,
/// `ConnShared::result_set_next`): opensrv writes none.
///
/// # Errors
/// An I/O error writing to the client (the connection is then over).
pub async fn write_reply<W: AsyncWrite + Unpin + Send>(
    w: QueryResultWriter<'_, W>,
    result: Result<Reply, SqlError>,
    status: StatusFlags,
    announce: impl FnOnce(Vec<bool>) + Send,
) -> io::Result<()> {
    match result {
        Err(e) => w.error(e.kind, e.message.as_bytes()).await,
        Ok(Reply::Ok {
            affected_rows,
            last_insert_id,
            warnings,
        }) => {
            w.completed(OkResponse {
                affected_rows,
                last_insert_id,
                warnings,
                status_flags: status,
                ..OkResponse::default()
            })
            .await
        }
        Ok(Reply::Rows {
            columns,
            rows,
            int_widths,
            tables,
        }) => {
            let kinds: Vec<Kind> = (0..columns.len()).map(|i| column_kind(&rows, i)).collect();
            let widths: Vec<Option<IntWidth>> = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| column_width(&rows, i, *k, int_widths.get(i).copied().flatten()))
                .collect();
            let defs: Vec<Column> = columns
                .iter()
                .zip(kinds.iter().zip(&widths))
                .enumerate()
                .map(|(i, (n, (k, w)))| {
                    column_def(n, *k, *w, tables.get(i).map_or("", String::as_str))
                })
                .collect();
            announce(
                kinds
                    .iter()
                    .map(|k| matches!(k, Kind::Bytes | Kind::Bit))
                    .collect(),
            );
            let mut rw = w.start(&defs).await?;
            for row in rows {
                for (i, (kind, width)) in kinds.iter().zip(&widths).enumerate() {
                    write_cell(&mut rw, row.get(i).unwrap_or(&Cell::Null), *kind, *width)?;
                }
                rw.end_row().await?;
            }
            rw.finish().await
        }
    }
}

fn write_cell<W: AsyncWrite + Unpin>(
    rw: &mut opensrv_mysql::RowWriter<'_, W>,
    cell: &Cell,
    kind: Kind,
    width: Option<IntWidth>,
) -> io::Result<()> {
    // In the width the column was announced with ([`column_width`]: every value fits).
    let mut narrow = |v: i64| -> io::Result<()> {
        let too_wide = || io::Error::other(format!("{v} does not fit its column"));
        match width {
            Some(IntWidth::Tiny) => rw.write_col(i8::try_from(v).map_err(|_| too_wide())?),
            Some(IntWidth::Short) => rw.write_col(i16::try_from(v).map_err(|_| too_wide())?),
            Some(IntWidth::Medium | IntWidth::Long) => {
                rw.write_col(i32::try_from(v).map_err(|_| too_wide())?)
            }
            Some(IntWidth::LongLong) | None => rw.write_col(v),
        }
    };
    match (cell, kind) {
        (Cell::Null, _) => rw.write_col(None::<i64>),
        (Cell::Int(v), Kind::Int) => narrow(*v),
        (Cell::UInt(v), Kind::UInt) => rw.write_col(*v),
        (Cell::Float(v), Kind::Float) => rw.write_col(MysqlDouble(*v)),
        (Cell::Float32(..), Kind::Float32) => rw.write_col(MysqlFloat(cell.clone())),
        (Cell::Date(v), Kind::Date) => rw.write_col(*v),
        (Cell::DateTime(v), Kind::DateTime) => rw.write_col(*v),
        (Cell::Bytes(v), Kind::Bytes) | (Cell::Bit(v), Kind::Bit) => rw.write_col(v.as_slice()),
        (Cell::Time(v), Kind::Time) => rw.write_col(MysqlTimeValue(*v)),
        (other, _) => rw.write_col(other.to_text().unwrap_or_default()),
    }
}

/// A `DOUBLE` value: in text as MariaDB writes it ([`crate::engine::double_text`]; opensrv
/// would use Rust's text), in binary as the eight bytes.
struct MysqlDouble(f64);

impl ToMysqlValue for MysqlDouble {
    fn to_mysql_text<W: io::Write>(&self, w: &mut W) -> io::Result<()> {
        crate::engine::double_text(self.0).as_str().to_mysql_text(w)
    }

    fn to_mysql_bin<W: io::Write>(&self, w: &mut W, c: &Column) -> io::Result<()> {
        self.0.to_mysql_bin(w, c)
    }
}

/// A `FLOAT` column's value ([`Cell::Float32`]): in text as MariaDB writes it, in binary as
/// the four bytes.
struct MysqlFloat(Cell);

impl ToMysqlValue for MysqlFloat {
    fn to_mysql_text<W: io::Write>(&self, w: &mut W) -> io::Result<()> {
        self.0
            .to_text()
            .unwrap_or_default()
            .as_str()
            .to_mysql_text(w)
    }

    fn to_mysql_bin<W: io::Write>(&self, w: &mut W, c: &Column) -> io::Result<()> {
        let Cell::Float32(v, _) = self.0 else {
            return Err(io::Error::other("not a FLOAT"));
        };
        #[expect(
            clippy::cast_possible_truncation,
            reason = "a 4-byte float already: its column's trigger stored it so"
        )]
        (v as f32).to_mysql_bin(w, c)
    }
}

/// A `TIME` value: in text as MySQL writes it, in binary as its days, hours, ... (opensrv's
/// own `Duration` holds no sign and refuses more than 34 days).
struct MysqlTimeValue(crate::mysql_time::MysqlTime);

impl ToMysqlValue for MysqlTimeValue {
    fn to_mysql_text<W: io::Write>(&self, w: &mut W) -> io::Result<()> {
        self.0.to_string().as_str().to_mysql_text(w)
    }

    fn to_mysql_bin<W: io::Write>(&self, w: &mut W, c: &Column) -> io::Result<()> {
        if c.coltype != ColumnType::MYSQL_TYPE_TIME {
            return Err(io::Error::other("a TIME value in a column of another type"));
        }
        w.write_all(&self.0.to_binary())
    }
}

/// The status flags of an OK packet for a session in this state.
#[must_use]
pub fn status_flags(autocommit: bool, in_transaction: bool) -> StatusFlags {
    let mut s = StatusFlags::empty();
    if autocommit {
        s |= StatusFlags::SERVER_STATUS_AUTOCOMMIT;
    }
    if in_transaction {
        s |= StatusFlags::SERVER_STATUS_IN_TRANS;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_column_type_from_values() {
        let rows = vec![
            vec![Cell::Int(1), Cell::Null, Cell::Int(1), Cell::Float(1.5)],
            vec![
                Cell::Int(2),
                Cell::Null,
                Cell::Text("x".into()),
                Cell::Float(2.0),
            ],
        ];
        assert_eq!(column_kind(&rows, 0), Kind::Int);
        assert_eq!(column_kind(&rows, 1), Kind::Text);
        assert_eq!(column_kind(&rows, 2), Kind::Text);
        assert_eq!(column_kind(&rows, 3), Kind::Float);
        assert_eq!(
            column_def("u", Kind::UInt, None, "").colflags,
            ColumnFlags::UNSIGNED_FLAG
        );
    }

    #[test]
    fn an_integer_column_has_its_declared_width_while_its_values_fit() {
        let rows = vec![vec![Cell::Int(0)], vec![Cell::Null], vec![Cell::Int(1)]];
        let tiny = Some(IntWidth::Tiny);
        assert_eq!(column_width(&rows, 0, Kind::Int, tiny), tiny);
        assert_eq!(
            column_def("vip", Kind::Int, tiny, "").coltype,
            ColumnType::MYSQL_TYPE_TINY
        );
        let wide = vec![vec![Cell::Int(300)]];
        assert_eq!(column_width(&wide, 0, Kind::Int, tiny), None);
        assert_eq!(column_width(&rows, 0, Kind::Int, None), None);
        assert_eq!(
            column_def("n", Kind::Int, Some(IntWidth::Long), "").coltype,
            ColumnType::MYSQL_TYPE_LONG
        );
    }
}
