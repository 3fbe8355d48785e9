//! Command bytes: the first byte of a client's command packet (MySQL's
//! `enum_server_command`, with MariaDB's additions). Plain `u8` constants, because every
//! reader of a command matches on the raw byte.

/// `COM_QUIT`: the client closes the connection; no reply.
pub const COM_QUIT: u8 = 0x01;
/// `COM_INIT_DB`: select a database (`USE`).
pub const COM_INIT_DB: u8 = 0x02;
/// `COM_QUERY`: a statement as text.
pub const COM_QUERY: u8 = 0x03;
/// `COM_FIELD_LIST`: a table's columns (deprecated; the `mariadb` CLI's tab completion).
pub const COM_FIELD_LIST: u8 = 0x04;
/// `COM_PROCESS_INFO`: `SHOW PROCESSLIST` as a command.
pub const COM_PROCESS_INFO: u8 = 0x0A;
/// `COM_PROCESS_KILL`: `KILL <id>` as a command (four bytes, little-endian).
pub const COM_PROCESS_KILL: u8 = 0x0C;
/// `COM_PING`.
pub const COM_PING: u8 = 0x0E;
/// `COM_CHANGE_USER`: log in again as another (or the same) user on the same connection.
pub const COM_CHANGE_USER: u8 = 0x11;
/// `COM_BINLOG_DUMP`: a replica's binary log stream.
pub const COM_BINLOG_DUMP: u8 = 0x12;
/// `COM_STMT_PREPARE`.
pub const COM_STMT_PREPARE: u8 = 0x16;
/// `COM_STMT_EXECUTE`.
pub const COM_STMT_EXECUTE: u8 = 0x17;
/// `COM_STMT_SEND_LONG_DATA`: a parameter's data in pieces; no reply.
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
/// `COM_STMT_CLOSE`: no reply.
pub const COM_STMT_CLOSE: u8 = 0x19;
/// `COM_STMT_RESET`.
pub const COM_STMT_RESET: u8 = 0x1A;
/// `COM_SET_OPTION`: multi-statements on or off.
pub const COM_SET_OPTION: u8 = 0x1B;
/// `COM_STMT_FETCH`: rows from a cursor.
pub const COM_STMT_FETCH: u8 = 0x1C;
/// `COM_BINLOG_DUMP_GTID`.
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1E;
/// `COM_RESET_CONNECTION`: the session back to its state after login.
pub const COM_RESET_CONNECTION: u8 = 0x1F;
/// MariaDB's `COM_STMT_BULK_EXECUTE`: answered like `COM_STMT_EXECUTE`, never opens a cursor.
pub const COM_STMT_BULK_EXECUTE: u8 = 0xFA;
