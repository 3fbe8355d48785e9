//! `server-shim`: Perceptron's stand-in compute node (architecture.md §1). An
//! `opensrv-mysql` server whose login hook implements dual verification (architecture.md §3, P7), an
//! account store that keeps only password hashes, and an embedded persistent SQL engine
//! (SQLite behind a MySQL-to-SQLite translation, docs/server-shim.md, *Engine: SQLite behind
//! MySQL's dialect*), with a user-management CLI.
//!
//! # Layout
//! Modules in layers; each uses only modules of lower layers, so the graph has no circle
//! (`scripts/module-graph` checks that, here and in every submodule tree):
//!
//! ```text
//! layer  module                                 uses
//!   7    cli                                    server sqlite state stream catalog dialect
//!                                               accounts keys tickets tls
//!   6    server                                 session state stream catalog results
//!                                               variables auth keys sql_error tls
//!   5    session                                sqlite state catalog classify results
//!                                               variables auth dialect engine accounts
//!                                               processes sql_error
//!   4    sqlite                                 mysql_functions catalog information_schema
//!                                               sqlite_catalog sqlite_value table_rebuild
//!                                               column_triggers database_scope dialect
//!                                               engine processes sql_error file_format
//!        state                                  stream catalog accounts processes tickets
//!   3    file_format                            column_triggers dialect sql_error
//!        mysql_functions                        sqlite_value variables dialect engine
//!                                               mysql_text_functions mysql_json
//!        database_scope                         information_schema
//!        stream                                 variables auth
//!   2    catalog, classify, results             engine sql_error (classify: mysql_dialect)
//!        information_schema, sqlite_catalog,    engine, dialect (the names of its collations)
//!        sqlite_value, variables
//!        mysql_text_functions, mysql_json       dialect (the names of its functions)
//!        table_rebuild                          dialect sql_error
//!        column_triggers                        dialect
//!   1    auth                                   accounts processes tickets
//!        dialect, engine                        mysql_dialect sql_error (engine: processes)
//!   0    accounts, keys, mysql_dialect,         (authplugin, sqlparser, rusqlite only)
//!        processes, sql_error, tickets, tls
//! ```
//!
//! - [`cli`]: the command line (`run`, `user add|remove|list`); `main.rs` only calls it. The
//!   only public module: everything else is private, so the compiler reports dead code.
//! - `server`: the accept loop, graceful shutdown, and the `AsyncMysqlShim` per connection.
//! - `state`: what every connection of a server shares (catalog, accounts, key ring, replay
//!   window, deadlines, shutdown, connection ids).
//! - `session`: per-connection state and statement dispatch; its `show` submodule builds the
//!   `SHOW` result sets from the catalog.
//! - `stream`: the socket adapter between the client and opensrv-mysql, one submodule per
//!   opensrv shortcoming it works around (the login tee, the ERR 1045, one packet per read,
//!   COM_FIELD_LIST, unsupported commands, deadlines, executions without their types,
//!   statements that are not UTF-8, the OK's count of notes).
//! - `tls`: TLS for clients (`--tls-cert`), terminated under the stream adapters so they
//!   keep seeing plaintext packets.
//! - `auth`: the login decision, relayed (payload verification) and direct.
//! - `keys`: the key ring following `--key-file` (polled, on SIGHUP, on an unknown key id).
//! - `accounts`: the account file (hashes only, mode 0600, atomic writes).
//! - `classify`: which statements the session answers and which go to the engine.
//! - `variables`: the system variables clients ask for, and the values a session may not set.
//! - `sql_mode`: the `sql_mode` flags that change how a statement reads, followed by refusing
//!   what they would change.
//! - `results`: writing result sets, OK and ERR packets.
//! - `catalog`: the databases of a data directory, a lock per database, lazily opened storage.
//! - `dialect`: MySQL statement text in, SQLite statement text out (types, keys,
//!   `AUTO_INCREMENT`, `ON DUPLICATE KEY UPDATE`, versioned comments, functions).
//! - `engine`: the `Engine`/`Executor` traits (the seam between sessions and storage), the
//!   `Cell` values they exchange, and what a session tells its executor (`SessionFacts`).
//! - `column_shape`: a result column's MySQL type from its declared type or its expression's
//!   (`dialect::ResultType`), and each value as a `Cell` of it.
//! - `sqlite`: the SQLite engine: one file per database, WAL, `synchronous=FULL`, attached
//!   databases for qualified names, `information_schema` built on demand.
//! - `database_scope`: the attached databases a statement may use (those it names), so a
//!   table without a qualifier never resolves into another database.
//! - `information_schema`: MySQL's `information_schema` tables, built in SQLite per query.
//! - `sqlite_catalog`: `SHOW CREATE TABLE`, `SHOW INDEX` and table descriptions from
//!   SQLite's catalog, in MySQL's terms.
//! - `mysql_functions`: MySQL functions registered with SQLite (`DATE_FORMAT`, `MD5`, ...);
//!   the names of those the dialect calls are the dialect's (`dialect::SYSTEM_VARIABLE_FN`).
//! - `mysql_text_functions`: MySQL's string functions whose SQLite namesakes answer otherwise
//!   (`LENGTH`, `HEX`, `QUOTE`, `FORMAT`), registered over them, and those SQLite lacks.
//! - `general_ci`, `utf8mb4_bin`: MariaDB's collations of text, as the shim's text columns
//!   compare, sort and match (`LIKE`) them.
//! - `mysql_numeric_functions`: MySQL's `ROUND`, `%`, `CEIL` and `FLOOR` (SQLite's round the
//!   binary value, take integers, and give doubles).
//! - `mysql_time`: MySQL's `TIME`, a signed duration, read and written as MySQL does.
//! - `mysql_date_parsing`: MySQL's `STR_TO_DATE`, text read by a format as MariaDB reads it.
//! - `mysql_json`: MariaDB's JSON functions (`JSON_EXTRACT` as MariaDB writes JSON,
//!   `JSON_LENGTH`, `JSON_TYPE`, `JSON_UNQUOTE`).
//! - `typed_values`: the functions that give a value as its column's declared type asks
//!   (`JSON_ARRAY` of a `DECIMAL`, `ROUND` of a `DOUBLE`; `dialect::TypedColumn`).
//! - `sqlite_value`: how a `Cell` is bound to SQLite (the executor's and the functions').
//! - `mysql_dialect`: the one sqlparser dialect every tokenizer and parser here uses.
//! - `sql_error`: MySQL error codes for every failure (one place).
//! - `processes`: the server's connections by id (the process list, `KILL`).
//! - `tickets`: resumption tickets (the store is `authplugin::ticket_store`).
//! - `file_format`: the version of a database file's format (its collations' order, its
//!   triggers), and the steps that bring an older file to today's.
//! - `table_rebuild`: a table rebuilt with changes SQLite's `ALTER TABLE` cannot make.
//! - `column_triggers`: the triggers of a table's columns (`ON UPDATE CURRENT_TIMESTAMP`, a
//!   `DECIMAL`'s rounding) made again after a rebuild or a dropped column.

mod accounts;
mod auth;
mod catalog;
mod classify;
pub mod cli;
mod column_shape;
mod column_triggers;
mod database_scope;
/// The network-facing SQL translation, for the fuzz targets only.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// Translates `sql` as a session on database `db` would, without the panic guard, so the
    /// fuzzer sees any panic.
    pub fn translate(sql: &str) {
        let _ = crate::dialect::translate_unguarded(sql, Some("db"));
    }

    /// A client's first packet as the reader hands it to opensrv: a relay's login that asks
    /// for the proof goes on without its Hello, and must decode, with an empty answer.
    ///
    /// # Panics
    /// When it does not: what the fuzzer looks for.
    pub fn login_without_hello(payload: &[u8]) {
        if let Some((login, hello)) = crate::stream::without_hello(payload) {
            assert!(authplugin::compute_proof::Hello::is_hello(&hello));
            let again = crate::auth::decode_handshake(&login);
            assert!(again.is_ok_and(|l| l.auth_response.is_empty()), "{login:?}");
        }
    }

    /// Client bytes as executions the reader completes with their statement's types.
    ///
    /// # Panics
    /// When a completed execution is badly framed: what the fuzzer looks for.
    pub fn execute_with_bound_types(data: &[u8]) {
        crate::stream::fuzz_bound_types(data);
    }

    /// Client bytes as a statement whose literals the reader writes in hexadecimal where
    /// they are not UTF-8.
    ///
    /// # Panics
    /// When a rewritten statement is badly framed or not UTF-8: what the fuzzer looks for.
    pub fn query_with_binary_literals(data: &[u8]) {
        crate::stream::fuzz_binary_literals(data);
    }
}
mod dialect;
mod engine;
mod file_format;
mod general_ci;
mod information_schema;
mod keys;
mod mysql_date_parsing;
mod mysql_dialect;
mod mysql_functions;
mod mysql_json;
mod mysql_numeric_functions;
mod mysql_text_functions;
mod mysql_time;
mod processes;
mod results;
mod server;
mod session;
mod sql_error;
mod sql_mode;
mod sqlite;
mod sqlite_catalog;
mod sqlite_value;
mod state;
mod stream;
mod table_rebuild;
mod tickets;
mod tls;
mod typed_values;
mod utf8mb4_bin;
mod variables;
