//! Capability flags (`client_flag` / `capability_flags`) of the MySQL protocol, by MySQL's
//! own names. The flags decide which fields of a packet exist, so decoders take them as
//! context.

/// `CLIENT_LONG_PASSWORD`; MariaDB reads bit 0 as `CLIENT_MYSQL`: a server that clears it is a
/// MariaDB that puts extended capabilities in the reserved bytes of its greeting.
pub const CLIENT_LONG_PASSWORD: u32 = 0x0000_0001;
/// MariaDB's name for bit 0 (`CLIENT_MYSQL`): set by MySQL peers, cleared by MariaDB ones.
pub const CLIENT_MYSQL_MARIADB: u32 = CLIENT_LONG_PASSWORD;
/// `CLIENT_FOUND_ROWS`.
pub const CLIENT_FOUND_ROWS: u32 = 0x0000_0002;
/// `CLIENT_LONG_FLAG`.
pub const CLIENT_LONG_FLAG: u32 = 0x0000_0004;
/// `CLIENT_CONNECT_WITH_DB`: the HandshakeResponse41 carries a database name.
pub const CLIENT_CONNECT_WITH_DB: u32 = 0x0000_0008;
/// `CLIENT_NO_SCHEMA`.
pub const CLIENT_NO_SCHEMA: u32 = 0x0000_0010;
/// `CLIENT_COMPRESS`.
pub const CLIENT_COMPRESS: u32 = 0x0000_0020;
/// `CLIENT_ODBC`.
pub const CLIENT_ODBC: u32 = 0x0000_0040;
/// `CLIENT_LOCAL_FILES`.
pub const CLIENT_LOCAL_FILES: u32 = 0x0000_0080;
/// `CLIENT_IGNORE_SPACE`.
pub const CLIENT_IGNORE_SPACE: u32 = 0x0000_0100;
/// `CLIENT_PROTOCOL_41`: the only protocol Perceptron speaks.
pub const CLIENT_PROTOCOL_41: u32 = 0x0000_0200;
/// `CLIENT_INTERACTIVE`.
pub const CLIENT_INTERACTIVE: u32 = 0x0000_0400;
/// `CLIENT_SSL`.
pub const CLIENT_SSL: u32 = 0x0000_0800;
/// `CLIENT_IGNORE_SIGPIPE`.
pub const CLIENT_IGNORE_SIGPIPE: u32 = 0x0000_1000;
/// `CLIENT_TRANSACTIONS`.
pub const CLIENT_TRANSACTIONS: u32 = 0x0000_2000;
/// `CLIENT_RESERVED`.
pub const CLIENT_RESERVED: u32 = 0x0000_4000;
/// `CLIENT_SECURE_CONNECTION` (`CLIENT_RESERVED2`): 20-byte scramble, length-prefixed answer.
pub const CLIENT_SECURE_CONNECTION: u32 = 0x0000_8000;
/// `CLIENT_MULTI_STATEMENTS`.
pub const CLIENT_MULTI_STATEMENTS: u32 = 0x0001_0000;
/// `CLIENT_MULTI_RESULTS`.
pub const CLIENT_MULTI_RESULTS: u32 = 0x0002_0000;
/// `CLIENT_PS_MULTI_RESULTS`.
pub const CLIENT_PS_MULTI_RESULTS: u32 = 0x0004_0000;
/// `CLIENT_PLUGIN_AUTH`: greeting and response name an auth plugin.
pub const CLIENT_PLUGIN_AUTH: u32 = 0x0008_0000;
/// `CLIENT_CONNECT_ATTRS`: the response carries key/value connect attributes.
pub const CLIENT_CONNECT_ATTRS: u32 = 0x0010_0000;
/// `CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA`: the answer has a length-encoded length.
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 0x0020_0000;
/// `CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS`.
pub const CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS: u32 = 0x0040_0000;
/// `CLIENT_SESSION_TRACK`: OK packets carry session state information.
pub const CLIENT_SESSION_TRACK: u32 = 0x0080_0000;
/// `CLIENT_DEPRECATE_EOF`.
pub const CLIENT_DEPRECATE_EOF: u32 = 0x0100_0000;
/// `CLIENT_OPTIONAL_RESULTSET_METADATA`.
pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u32 = 0x0200_0000;
/// `CLIENT_ZSTD_COMPRESSION_ALGORITHM`: the response carries a compression level byte.
pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u32 = 0x0400_0000;
/// `CLIENT_QUERY_ATTRIBUTES`.
pub const CLIENT_QUERY_ATTRIBUTES: u32 = 0x0800_0000;
/// `MULTI_FACTOR_AUTHENTICATION`.
pub const MULTI_FACTOR_AUTHENTICATION: u32 = 0x1000_0000;
/// `CLIENT_CAPABILITY_EXTENSION`.
pub const CLIENT_CAPABILITY_EXTENSION: u32 = 0x2000_0000;
/// `CLIENT_SSL_VERIFY_SERVER_CERT`.
pub const CLIENT_SSL_VERIFY_SERVER_CERT: u32 = 0x4000_0000;
/// `CLIENT_REMEMBER_OPTIONS`.
pub const CLIENT_REMEMBER_OPTIONS: u32 = 0x8000_0000;

/// MariaDB's extended capabilities (`mariadb_capabilities`) are the last four bytes of the
/// greeting's filler and of the login's, meaningful where bit 0 ([`CLIENT_MYSQL_MARIADB`]) is
/// clear. `MARIADB_CLIENT_PROGRESS`: progress reports (ERR packets with code 0xFFFF that end
/// nothing) during long statements.
pub const MARIADB_CLIENT_PROGRESS: u32 = 1 << 0;
/// `MARIADB_CLIENT_STMT_BULK_OPERATIONS`: `COM_STMT_BULK_EXECUTE`.
pub const MARIADB_CLIENT_STMT_BULK_OPERATIONS: u32 = 1 << 2;
/// `MARIADB_CLIENT_EXTENDED_METADATA`: column definitions name a type's format (`json`, a
/// geometry's subtype), which drivers use to type a column.
pub const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;
/// `MARIADB_CLIENT_CACHE_METADATA`: result sets of prepared statements may come without their
/// column definitions.
pub const MARIADB_CLIENT_CACHE_METADATA: u32 = 1 << 4;

/// `SERVER_STATUS_IN_TRANS`: a transaction is open.
pub const SERVER_STATUS_IN_TRANS: u16 = 0x0001;
/// `SERVER_STATUS_AUTOCOMMIT`, a status flag of greetings and OK packets.
pub const SERVER_STATUS_AUTOCOMMIT: u16 = 0x0002;
/// `SERVER_MORE_RESULTS_EXISTS`: another result follows this one.
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
/// `SERVER_STATUS_CURSOR_EXISTS`: the rows wait behind a cursor (`COM_STMT_FETCH`).
pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
/// `SERVER_SESSION_STATE_CHANGED`: an OK packet carries session state changes.
pub const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;
