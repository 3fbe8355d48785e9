//! What `SHOW TABLES`, `SHOW [FULL] COLUMNS`, `SHOW TABLE STATUS`, `SHOW CREATE TABLE`,
//! `SHOW INDEX` and `ANALYZE|CHECK|OPTIMIZE|REPAIR TABLE` answer: MySQL's result sets,
//! column for column, built from the catalog SQLite describes rather than run as SQL.

use std::sync::Arc;

use super::{Session, rows};
use crate::catalog::Database;
use crate::classify::TableRef;
use crate::engine::{Cell, TableMeta};
use crate::results::Reply;
use crate::sql_error::SqlError;
use crate::variables;

impl Session {
    pub(super) async fn show_tables(
        &mut self,
        full: bool,
        database: Option<String>,
        like: Option<String>,
    ) -> Result<Reply, SqlError> {
        let db = match &database {
            Some(name) => self.server.catalog.get(name)?,
            None => self.current_database()?,
        };
        let mut label = format!("Tables_in_{}", db.name());
        if let Some(pattern) = &like {
            label.push_str(&format!(" ({pattern})"));
        }
        let mut names = self.with_executor(db, |e| e.table_names()).await?;
        names.retain(|n| like.as_deref().is_none_or(|p| crate::variables::like(p, n)));
        let mut columns = vec![label];
        if full {
            columns.push("Table_type".into());
        }
        Ok(Reply::Rows {
            int_widths: Vec::new(),
            tables: Vec::new(),
            columns,
            rows: names
                .into_iter()
                .map(|n| {
                    let mut row = vec![Cell::Text(n)];
                    if full {
                        row.push(Cell::Text("BASE TABLE".into()));
                    }
                    row
                })
                .collect(),
        })
    }

    /// The current database's tables with their columns and indexes.
    pub(super) async fn describe_current(&mut self) -> Result<(String, Vec<TableMeta>), SqlError> {
        let db = self.current_database()?;
        let name = db.name().to_owned();
        let tables = self.with_executor(db, |e| e.describe()).await?;
        Ok((name, tables))
    }

    /// The database `table` names: its qualifier, else the session's current one.
    fn database_of(&self, table: &TableRef) -> Result<Arc<Database>, SqlError> {
        match &table.database {
            Some(name) => self.server.catalog.get(name),
            None => self.current_database(),
        }
    }

    pub(super) async fn show_columns(
        &mut self,
        table: TableRef,
        full: bool,
    ) -> Result<Reply, SqlError> {
        let db = self.database_of(&table)?;
        let db_name = db.name().to_owned();
        let tables = self.with_executor(db, |e| e.describe()).await?;
        let table = table.table;
        let meta = tables
            .into_iter()
            .find(|t| t.name == table)
            .ok_or_else(|| SqlError::unknown_table(&db_name, &table))?;
        let mut header = vec!["Field", "Type"];
        if full {
            header.push("Collation");
        }
        header.extend(["Null", "Key", "Default", "Extra"]);
        if full {
            header.extend(["Privileges", "Comment"]);
        }
        let text = |s: &str| Cell::Text(s.to_owned());
        Ok(rows(
            &header,
            meta.columns
                .into_iter()
                .map(|c| {
                    let textual = c.column_type.contains("char")
                        || c.column_type.contains("text")
                        || c.column_type.starts_with("enum")
                        || c.column_type.starts_with("set");
                    let mut row = vec![Cell::Text(c.name), Cell::Text(c.column_type)];
                    if full {
                        row.push(if textual {
                            text(c.collation)
                        } else {
                            Cell::Null
                        });
                    }
                    row.extend([
                        text(if c.not_null { "NO" } else { "YES" }),
                        text(c.key),
                        c.default
                            .map_or(Cell::Null, |d| Cell::Text(d.trim_matches('\'').to_owned())),
                        text(&c.extra),
                    ]);
                    if full {
                        row.extend([text("select,insert,update,references"), text("")]);
                    }
                    row
                })
                .collect(),
        ))
    }

    pub(super) async fn show_table_status(
        &mut self,
        like: Option<String>,
    ) -> Result<Reply, SqlError> {
        let (_, tables) = self.describe_current().await?;
        let text = |s: &str| Cell::Text(s.to_owned());
        Ok(rows(
            &[
                "Name",
                "Engine",
                "Version",
                "Row_format",
                "Rows",
                "Avg_row_length",
                "Data_length",
                "Max_data_length",
                "Index_length",
                "Data_free",
                "Auto_increment",
                "Create_time",
                "Update_time",
                "Check_time",
                "Collation",
                "Checksum",
                "Create_options",
                "Comment",
            ],
            tables
                .into_iter()
                .filter(|t| like.as_deref().is_none_or(|p| variables::like(p, &t.name)))
                .map(|t| {
                    let (engine, comment) = if t.view {
                        (None, "VIEW")
                    } else {
                        (Some("InnoDB"), "")
                    };
                    vec![
                        Cell::Text(t.name),
                        engine.map_or(Cell::Null, text),
                        Cell::Int(10),
                        text("Dynamic"),
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        text("utf8mb4_general_ci"),
                        Cell::Null,
                        text(""),
                        text(comment),
                    ]
                })
                .collect(),
        ))
    }

    pub(super) async fn show_create_table(&mut self, table: TableRef) -> Result<Reply, SqlError> {
        let db = self.database_of(&table)?;
        let table = table.table;
        let db_name = db.name().to_owned();
        let lookup = table.clone();
        let sql = self
            .with_executor(db, move |e| e.show_create_table(&lookup))
            .await?
            .ok_or_else(|| SqlError::unknown_table(&db_name, &table))?;
        Ok(rows(
            &["Table", "Create Table"],
            vec![vec![Cell::Text(table), Cell::Text(sql)]],
        ))
    }

    /// `ANALYZE|CHECK|OPTIMIZE|REPAIR TABLE`: nothing to do on SQLite, so each existing
    /// table reports `status OK` and a missing one MySQL's `Error` row, in MySQL's
    /// four columns.
    pub(super) async fn table_maintenance(
        &mut self,
        op: &str,
        tables: Vec<(Option<String>, String)>,
    ) -> Result<Reply, SqlError> {
        let mut out = Vec::with_capacity(tables.len());
        for (db_name, table) in tables {
            let db = match db_name {
                Some(name) => self.server.catalog.get(&name)?,
                None => self.current_database()?,
            };
            let db_name = db.name().to_owned();
            let lookup = table.clone();
            let exists = self
                .with_executor(db, move |e| e.indexes(&lookup))
                .await?
                .is_some();
            let (msg_type, msg_text) = if exists {
                ("status".to_owned(), "OK".to_owned())
            } else {
                (
                    "Error".to_owned(),
                    SqlError::unknown_table(&db_name, &table).message,
                )
            };
            out.push(vec![
                Cell::Text(format!("{db_name}.{table}")),
                Cell::Text(op.to_owned()),
                Cell::Text(msg_type),
                Cell::Text(msg_text),
            ]);
        }
        Ok(rows(&["Table", "Op", "Msg_type", "Msg_text"], out))
    }

    pub(super) async fn show_index(&mut self, table: TableRef) -> Result<Reply, SqlError> {
        let db = self.database_of(&table)?;
        let table = table.table;
        let db_name = db.name().to_owned();
        let lookup = table.clone();
        let indexes = self
            .with_executor(db, move |e| e.indexes(&lookup))
            .await?
            .ok_or_else(|| SqlError::unknown_table(&db_name, &table))?;
        Ok(rows(
            &[
                "Table",
                "Non_unique",
                "Key_name",
                "Seq_in_index",
                "Column_name",
                "Collation",
                "Cardinality",
                "Sub_part",
                "Packed",
                "Null",
                "Index_type",
                "Comment",
                "Index_comment",
            ],
            indexes
                .into_iter()
                .map(|i| {
                    vec![
                        Cell::Text(table.clone()),
                        Cell::Int(i64::from(i.non_unique)),
                        Cell::Text(i.key_name),
                        Cell::Int(i64::from(i.seq_in_index)),
                        Cell::Text(i.column),
                        Cell::Text("A".into()),
                        Cell::Null,
                        Cell::Null,
                        Cell::Null,
                        Cell::Text(String::new()),
                        Cell::Text("BTREE".into()),
                        Cell::Text(String::new()),
                        Cell::Text(String::new()),
                    ]
                })
                .collect(),
        ))
    }
}
