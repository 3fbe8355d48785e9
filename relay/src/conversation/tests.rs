//! Byte fixtures of whole exchanges, fed whole and one byte at a time: the conversation is
//! busy at every byte before a response's last one and idle after it.

use super::*;
use authplugin::packet::capabilities::{CLIENT_PROTOCOL_41, SERVER_STATUS_IN_TRANS};

const CLASSIC: u32 = CLIENT_PROTOCOL_41;
const DEPRECATE_EOF: u32 = CLIENT_PROTOCOL_41 | CLIENT_DEPRECATE_EOF;
const AUTOCOMMIT: u16 = 0x0002;

/// One packet: a 3-byte length, the sequence id, the payload.
fn packet(sequence_id: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    assert!(len < MAX_PACKET_LEN);
    let mut out = len.to_le_bytes()[..3].to_vec();
    out.push(sequence_id);
    out.extend_from_slice(payload);
    out
}

fn ok(flags: u16) -> Vec<u8> {
    let mut p = vec![OK_HEADER, 0, 0];
    p.extend_from_slice(&flags.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    p
}

/// An OK with the EOF header: the terminator under `CLIENT_DEPRECATE_EOF`.
fn ok_eof(flags: u16) -> Vec<u8> {
    let mut p = ok(flags);
    p[0] = EOF_HEADER;
    p
}

fn eof(flags: u16) -> Vec<u8> {
    let mut p = vec![EOF_HEADER, 0, 0];
    p.extend_from_slice(&flags.to_le_bytes());
    p
}

fn err() -> Vec<u8> {
    let mut p = vec![ERR_HEADER, 0x28, 0x04, b'#'];
    p.extend_from_slice(b"42000boom");
    p
}

/// A column definition (its content does not matter to the conversation).
fn column(name: &str) -> Vec<u8> {
    let mut p = vec![3, b'd', b'e', b'f', 0, 0, 0];
    p.push(u8::try_from(name.len()).unwrap());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&[0, 0x0c, 0x3f, 0, 1, 0, 0, 0, 8, 0x81, 0, 0, 0, 0]);
    p
}

#[derive(Clone, Copy, Debug)]
enum From {
    Client,
    Server,
}

/// A whole exchange: packets in the order they cross the relay.
struct Exchange(Vec<(From, Vec<u8>)>);

impl Exchange {
    fn new() -> Self {
        Self(Vec::new())
    }

    fn client(mut self, seq: u8, payload: &[u8]) -> Self {
        self.0.push((From::Client, packet(seq, payload)));
        self
    }

    fn server(mut self, seq: u8, payload: &[u8]) -> Self {
        self.0.push((From::Server, packet(seq, payload)));
        self
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|(_, b)| b.len()).sum()
    }
}

fn feed(conversation: &mut Conversation, from: From, bytes: &[u8]) {
    match from {
        From::Client => conversation.client_bytes(bytes),
        From::Server => conversation.server_bytes(bytes),
    }
}

/// Feeds `exchange` one byte at a time and asserts busy before its last byte and idle after;
/// then feeds it again in whole packets and asserts the same end. Returns the conversation.
fn assert_one_command(capabilities: u32, exchange: &Exchange) -> Conversation {
    let mut bytewise = Conversation::new(capabilities, 0, AUTOCOMMIT);
    assert_eq!(bytewise.phase(), Phase::Idle);
    let total = exchange.bytes();
    let mut fed = 0;
    for (from, bytes) in &exchange.0 {
        for byte in bytes {
            feed(&mut bytewise, *from, std::slice::from_ref(byte));
            fed += 1;
            if fed < total {
                assert_eq!(
                    bytewise.phase(),
                    Phase::Busy,
                    "after {fed} of {total} bytes"
                );
            }
        }
    }
    assert_eq!(bytewise.phase(), Phase::Idle, "after the whole exchange");
    let mut whole = Conversation::new(capabilities, 0, AUTOCOMMIT);
    for (from, bytes) in &exchange.0 {
        feed(&mut whole, *from, bytes);
    }
    assert_eq!(whole.phase(), Phase::Idle);
    assert_eq!(whole.status_flags(), bytewise.status_flags());
    whole
}

#[test]
fn ping_is_busy_until_its_ok() {
    let c = assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, &[0x0E])
            .server(1, &ok(AUTOCOMMIT)),
    );
    assert_eq!(c.status_flags(), AUTOCOMMIT);
}

#[test]
fn text_result_set_with_eof_packets_ends_at_the_last_eof() {
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x03SELECT 1")
            .server(1, &[1])
            .server(2, &column("1"))
            .server(3, &eof(AUTOCOMMIT))
            .server(4, b"\x011")
            .server(5, &eof(AUTOCOMMIT)),
    );
}

#[test]
fn text_result_set_with_deprecate_eof_ends_at_the_ok_terminator() {
    assert_one_command(
        DEPRECATE_EOF,
        &Exchange::new()
            .client(0, b"\x03SELECT a, b FROM t")
            .server(1, &[2])
            .server(2, &column("a"))
            .server(3, &column("b"))
            .server(4, b"\x011\x012")
            .server(5, b"\x013\xfb")
            .server(6, &ok_eof(AUTOCOMMIT)),
    );
}

#[test]
fn an_eof_shaped_row_is_a_row_when_it_is_long() {
    // Without CLIENT_DEPRECATE_EOF a row starting with 0xFE is a row when it has 9 bytes or
    // more; the conversation stays busy until the real EOF.
    let mut long_row = vec![EOF_HEADER];
    long_row.extend_from_slice(&[0; 9]);
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x03SELECT x")
            .server(1, &[1])
            .server(2, &column("x"))
            .server(3, &eof(AUTOCOMMIT))
            .server(4, &long_row)
            .server(5, &eof(AUTOCOMMIT)),
    );
}

#[test]
fn a_row_of_16_mib_spanning_two_packets_is_one_row() {
    // Under CLIENT_DEPRECATE_EOF a row whose first column is a string of 16 MiB starts with
    // 0xFE (its length's 8-byte form): it is a row because its first packet is full.
    let mut first = vec![0u8; MAX_PACKET_LEN as usize];
    first[0] = EOF_HEADER;
    let mut bytes = vec![0xFF, 0xFF, 0xFF, 4];
    bytes.extend_from_slice(&first);
    bytes.extend_from_slice(&packet(5, &[0; 100]));
    let mut c = Conversation::new(DEPRECATE_EOF, 0, AUTOCOMMIT);
    c.client_bytes(&packet(0, b"\x03SELECT big"));
    c.server_bytes(&packet(1, &[1]));
    c.server_bytes(&packet(2, &column("big")));
    for chunk in bytes.chunks(65_536) {
        c.server_bytes(chunk);
        assert_eq!(c.phase(), Phase::Busy);
    }
    c.server_bytes(&packet(6, &ok_eof(AUTOCOMMIT)));
    assert_eq!(c.phase(), Phase::Idle);
}

#[test]
fn more_results_keep_the_command_busy_until_the_last_result() {
    const MORE: u16 = AUTOCOMMIT | SERVER_MORE_RESULTS_EXISTS;
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x03INSERT INTO t VALUES (1); SELECT 1; DO 1")
            .server(1, &ok(MORE))
            .server(2, &[1])
            .server(3, &column("1"))
            .server(4, &eof(MORE))
            .server(5, b"\x011")
            .server(6, &eof(MORE))
            .server(7, &ok(AUTOCOMMIT)),
    );
}

#[test]
fn an_error_ends_a_result_set_in_the_middle() {
    assert_one_command(
        DEPRECATE_EOF,
        &Exchange::new()
            .client(0, b"\x03SELECT * FROM big")
            .server(1, &[1])
            .server(2, &column("v"))
            .server(3, b"\x011")
            .server(4, &err()),
    );
}

#[test]
fn load_data_local_is_busy_through_the_upload_and_its_ok() {
    // The file's content starts with 0x03, as a COM_QUERY would: it is data, not a command.
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x03LOAD DATA LOCAL INFILE 'f' INTO TABLE t")
            .server(1, b"\xfbf")
            .client(2, b"\x03SELECT looks like a command\n")
            .client(3, b"1,2\n")
            .client(4, b"")
            .server(5, &ok(AUTOCOMMIT)),
    );
}

#[test]
fn prepare_with_parameters_and_columns_and_eof_packets() {
    let prepare_ok = [OK_HEADER, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0];
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x16SELECT a FROM t WHERE b = ? AND c = ?")
            .server(1, &prepare_ok)
            .server(2, &column("?"))
            .server(3, &column("?"))
            .server(4, &eof(AUTOCOMMIT))
            .server(5, &column("a"))
            .server(6, &eof(AUTOCOMMIT)),
    );
}

#[test]
fn prepare_with_deprecate_eof_and_without_definitions() {
    let with_columns = [OK_HEADER, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0];
    assert_one_command(
        DEPRECATE_EOF,
        &Exchange::new()
            .client(0, b"\x16SELECT a FROM t WHERE b = ?")
            .server(1, &with_columns)
            .server(2, &column("?"))
            .server(3, &column("a")),
    );
    let nothing = [OK_HEADER, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_one_command(
        CLASSIC,
        &Exchange::new().client(0, b"\x16DO 1").server(1, &nothing),
    );
    assert_one_command(
        CLASSIC,
        &Exchange::new().client(0, b"\x16SELEC").server(1, &err()),
    );
}

#[test]
fn execute_with_a_cursor_is_idle_until_fetch_asks_for_rows() {
    const CURSOR: u16 = AUTOCOMMIT | SERVER_STATUS_CURSOR_EXISTS;
    let execute = [COM_STMT_EXECUTE, 1, 0, 0, 0, 1, 1, 0, 0, 0];
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, &execute)
            .server(1, &[1])
            .server(2, &column("a"))
            .server(3, &eof(CURSOR)),
    );
    let fetch = [COM_STMT_FETCH, 1, 0, 0, 0, 10, 0, 0, 0];
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, &fetch)
            .server(1, b"\x00\x00\x01")
            .server(2, b"\x00\x00\x02")
            .server(3, &eof(CURSOR | 0x0080)),
    );
}

#[test]
fn change_user_answers_are_not_commands() {
    let c = assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x11bob\x00\x14aaaaaaaaaaaaaaaaaaaa\x00")
            .server(1, b"\xfemysql_native_password\x00scramblescramblescr\x00")
            .client(2, b"\x03aaaaaaaaaaaaaaaaaaa")
            .server(3, &ok(AUTOCOMMIT | SERVER_STATUS_IN_TRANS)),
    );
    assert_eq!(
        c.status_flags() & SERVER_STATUS_IN_TRANS,
        SERVER_STATUS_IN_TRANS
    );
}

#[test]
fn commands_without_a_response_leave_it_idle_and_pipelined_ones_queue() {
    let mut c = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    c.client_bytes(&packet(0, &[COM_STMT_CLOSE, 1, 0, 0, 0]));
    assert_eq!(c.phase(), Phase::Idle);
    c.client_bytes(&packet(
        0,
        &[COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, b'x'],
    ));
    assert_eq!(c.phase(), Phase::Idle);
    // Two pings sent at once: busy until both OKs.
    c.client_bytes(&[packet(0, &[0x0E]), packet(0, &[0x0E])].concat());
    c.server_bytes(&packet(1, &ok(AUTOCOMMIT)));
    assert_eq!(c.phase(), Phase::Busy);
    c.server_bytes(&packet(1, &ok(AUTOCOMMIT)));
    assert_eq!(c.phase(), Phase::Idle);
}

#[test]
fn statistics_and_set_option_take_one_packet_of_any_kind() {
    assert_one_command(
        CLASSIC,
        &Exchange::new().client(0, &[0x09]).server(1, b"Uptime: 5"),
    );
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, &[0x1B, 0, 0])
            .server(1, &eof(AUTOCOMMIT)),
    );
}

#[test]
fn field_list_ends_at_its_terminator() {
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x04t\x00")
            .server(1, &column("a"))
            .server(2, &column("b"))
            .server(3, &eof(AUTOCOMMIT)),
    );
}

#[test]
fn a_replication_stream_stays_busy() {
    let mut c = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    c.client_bytes(&packet(0, &[COM_BINLOG_DUMP, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0]));
    for seq in 1..50 {
        c.server_bytes(&packet(seq, b"\x00binlog event"));
        assert_eq!(c.phase(), Phase::Busy);
    }
}

#[test]
fn rejects_what_it_cannot_follow() {
    let compressed = Conversation::new(CLASSIC | CLIENT_COMPRESS, 0, AUTOCOMMIT);
    assert_eq!(compressed.phase(), Phase::Untracked(Untracked::Compressed));
    let optional = Conversation::new(CLASSIC | CLIENT_OPTIONAL_RESULTSET_METADATA, 0, AUTOCOMMIT);
    assert_eq!(
        optional.phase(),
        Phase::Untracked(Untracked::OptionalMetadata)
    );

    let cached = Conversation::new(CLASSIC, MARIADB_CLIENT_CACHE_METADATA, AUTOCOMMIT);
    assert_eq!(
        cached.phase(),
        Phase::Untracked(Untracked::OptionalMetadata)
    );

    let mut quit = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    quit.client_bytes(&packet(0, &[COM_QUIT]));
    assert_eq!(quit.phase(), Phase::Untracked(Untracked::Quit));

    // The server speaks first with something other than an ERR.
    let mut unsolicited = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    unsolicited.server_bytes(&packet(1, &ok(AUTOCOMMIT)));
    assert_eq!(unsolicited.phase(), Phase::Untracked(Untracked::Unexpected));
    // Once untracked, always untracked: a later ping and OK do not make it idle.
    unsolicited.client_bytes(&packet(0, &[0x0E]));
    unsolicited.server_bytes(&packet(1, &ok(AUTOCOMMIT)));
    assert_eq!(unsolicited.phase(), Phase::Untracked(Untracked::Unexpected));

    // A result set with zero columns.
    let mut zero = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    zero.client_bytes(&packet(0, b"\x03SELECT 1"));
    zero.server_bytes(&packet(1, &[0xFC, 0, 0]));
    assert_eq!(zero.phase(), Phase::Untracked(Untracked::Unexpected));
    // An ERR among column definitions.
    let mut err_in_definitions = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    err_in_definitions.client_bytes(&packet(0, b"\x03SELECT 1"));
    err_in_definitions.server_bytes(&packet(1, &[2]));
    err_in_definitions.server_bytes(&packet(2, &column("a")));
    err_in_definitions.server_bytes(&packet(3, &err()));
    assert_eq!(
        err_in_definitions.phase(),
        Phase::Untracked(Untracked::Unexpected)
    );
    // An empty packet where a command should be.
    let mut empty = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    empty.client_bytes(&packet(0, b""));
    assert_eq!(empty.phase(), Phase::Untracked(Untracked::Unexpected));

    let mut pipelined = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    for _ in 0..=MAX_PENDING {
        pipelined.client_bytes(&packet(0, &[0x0E]));
    }
    assert_eq!(
        pipelined.phase(),
        Phase::Untracked(Untracked::TooManyPending)
    );
}

#[test]
fn a_progress_report_is_not_the_end_of_a_command() {
    // MariaDB reports the progress of a long ALTER TABLE in ERR packets with code 0xFFFF.
    let progress = [ERR_HEADER, 0xFF, 0xFF, 1, 1, 2, 0x10, 0x27, 0, 0, 0];
    assert_one_command(
        CLASSIC,
        &Exchange::new()
            .client(0, b"\x03ALTER TABLE t ADD COLUMN c INT")
            .server(1, &progress)
            .server(2, &progress)
            .server(3, &ok(AUTOCOMMIT)),
    );
}

#[test]
fn an_unsolicited_error_while_idle_keeps_it_idle() {
    // A server shutting down or killing the session says so in an ERR to an idle client.
    let mut c = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    c.server_bytes(&packet(0, &err()));
    assert_eq!(c.phase(), Phase::Idle);
}

#[test]
fn reads_length_encoded_integers_of_every_width() {
    assert_eq!(lenenc_int(&[0xFA, 9]), Some((250, &[9u8][..])));
    assert_eq!(lenenc_int(&[0xFC, 1, 2]), Some((0x0201, &[][..])));
    assert_eq!(lenenc_int(&[0xFD, 1, 2, 3]), Some((0x03_0201, &[][..])));
    assert_eq!(
        lenenc_int(&[0xFE, 1, 0, 0, 0, 0, 0, 0, 1]),
        Some((0x0100_0000_0000_0001, &[][..]))
    );
    for truncated in [
        &[0xFC, 1][..],
        &[0xFD, 1, 2],
        &[0xFE, 1, 2, 3, 4, 5, 6, 7],
        &[],
    ] {
        assert_eq!(lenenc_int(truncated), None, "{truncated:?}");
    }
    assert_eq!(lenenc_int(&[0xFB]), None);
    assert_eq!(lenenc_int(&[0xFF]), None);
}

#[test]
fn never_panics_on_any_split_of_random_bytes() {
    // A small deterministic generator: every input and every split point are reproducible.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..2_000 {
        let caps = if next() % 2 == 0 {
            CLASSIC
        } else {
            DEPRECATE_EOF
        };
        let mut c = Conversation::new(caps, 0, AUTOCOMMIT);
        for _ in 0..8 {
            let len = usize::try_from(next() % 40).unwrap();
            let bytes: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
            if next() % 2 == 0 {
                c.client_bytes(&bytes);
            } else {
                c.server_bytes(&bytes);
            }
        }
        let _ = c.phase();
    }
}

/// Replays a trace recorded by `capture.py` (real clients, real mariadbd): never untracked
/// before the client's `COM_QUIT`, busy after every chunk that sends a command, idle wherever
/// the client library had returned. Returns the commands seen, the idle marks passed, and the
/// phase at the end.
fn replay(trace: &str) -> (usize, usize, Phase) {
    let field = |name: &str| -> u32 {
        let line = trace
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name}"));
        u32::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap()
    };
    let status = u16::try_from(field("status ")).unwrap();
    let mut c = Conversation::new(field("caps "), field("mariadb_caps "), status);
    let (mut commands, mut idles) = (0, 0);
    for line in trace.lines() {
        let (tag, hex) = line.split_once(' ').unwrap_or((line, ""));
        let bytes = || -> Vec<u8> {
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect()
        };
        match tag {
            "C" => {
                let bytes = bytes();
                c.client_bytes(&bytes);
                match bytes.get(4) {
                    Some(&COM_QUIT) => assert_eq!(c.phase(), Phase::Untracked(Untracked::Quit)),
                    Some(&(COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA)) => {}
                    _ => {
                        assert_eq!(c.phase(), Phase::Busy, "after {line:.60}");
                        commands += 1;
                    }
                }
            }
            "S" => {
                c.server_bytes(&bytes());
                assert!(
                    matches!(c.phase(), Phase::Idle | Phase::Busy),
                    "{:?} after {line:.60}",
                    c.phase()
                );
            }
            "idle" => {
                assert_eq!(c.phase(), Phase::Idle, "at an idle mark");
                idles += 1;
            }
            _ => {}
        }
    }
    (commands, idles, c.phase())
}

#[test]
fn follows_pymysql_against_mariadb() {
    // A ping, 13 statements (multi-statements, a procedure's results, LOAD DATA LOCAL, an
    // error) and select_db: 15 idle marks. The uploaded file's chunks count as client chunks
    // sent while busy.
    let (commands, idles, end) = replay(include_str!("fixtures/mariadb_pymysql.trace"));
    assert_eq!(idles, 15);
    assert!(commands >= idles, "{commands} client chunks");
    assert_eq!(end, Phase::Untracked(Untracked::Quit));
}

#[test]
fn follows_mysql_connector_python_prepared_statements_against_mariadb() {
    let (commands, idles, end) = replay(include_str!("fixtures/mariadb_connector_python.trace"));
    assert_eq!(idles, 4);
    assert!(commands >= idles, "{commands} client chunks");
    assert_eq!(end, Phase::Untracked(Untracked::Quit));
}

#[test]
fn follows_the_mariadb_cli_with_deprecate_eof() {
    let trace = include_str!("fixtures/mariadb_cli.trace");
    assert!(
        trace.contains("caps 0x00bfa28c"),
        "CLIENT_DEPRECATE_EOF is negotiated"
    );
    let (commands, _, end) = replay(trace);
    assert!(commands >= 5, "{commands} commands");
    assert_eq!(end, Phase::Untracked(Untracked::Quit));
}

/// A command may begin while another's response is outstanding (pipelining), but not in the
/// middle of a client packet nor while a `LOCAL INFILE` upload is due.
#[test]
fn the_client_may_begin_a_command_between_its_packets_only() {
    let mut c = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    assert!(c.client_may_command());
    let query = packet(0, b"\x03SELECT 1");
    c.client_bytes(&query[..3]);
    assert!(!c.client_may_command(), "half a header");
    c.client_bytes(&query[3..]);
    assert_eq!(c.phase(), Phase::Busy);
    assert!(c.client_may_command(), "pipelined behind the reply");
    let mut c = Conversation::new(CLASSIC, 0, AUTOCOMMIT);
    c.client_bytes(&packet(0, b"\x03LOAD DATA LOCAL INFILE 'x' INTO TABLE t"));
    c.server_bytes(&packet(1, b"\xfbx"));
    assert!(!c.client_may_command(), "the file is due");
}

/// The last packet of a response is read off the server's last bytes, whatever came before
/// them: an EOF, an OK (plain, or as a terminator with `CLIENT_DEPRECATE_EOF`, with a
/// message), and one that says more results follow. An ERR, or too few bytes, is unknown.
#[test]
fn reads_the_last_packet_off_the_tail_of_a_response() {
    let row = packet(4, b"\x011");
    let eof = packet(5, b"\xfe\x00\x00\x02\x00");
    let tail = [&row[..], &eof[..]].concat();
    assert_eq!(last_packet(&tail), LastPacket::Ended(AUTOCOMMIT));
    let in_trans = packet(1, b"\x00\x01\x00\x03\x00\x00\x00");
    assert_eq!(last_packet(&in_trans), LastPacket::Ended(0x0003));
    let with_message = packet(1, b"\x00\x01\x00\x22\x00\x00\x00Rows matched: 1");
    assert_eq!(
        last_packet(&[&row[..], &with_message[..]].concat()),
        LastPacket::Ended(0x0022)
    );
    let terminator = packet(7, b"\xfe\x00\x00\x02\x00\x00\x00");
    assert_eq!(
        last_packet(&[&b"row bytes"[..], &terminator[..]].concat()),
        LastPacket::Ended(AUTOCOMMIT)
    );
    let more = packet(3, b"\x00\x00\x00\x0a\x00\x00\x00");
    assert_eq!(last_packet(&more), LastPacket::MoreResults);
    // The end of a longer tail only: 32 bytes of an OK's message cut its header off.
    let long = packet(
        1,
        b"\x00\x00\x00\x02\x00\x00\x00Rows matched: 1  Changed: 1  Warnings: 0",
    );
    assert_eq!(last_packet(&long[long.len() - 32..]), LastPacket::Unknown);
    let err = packet(1, b"\xff\x7a\x04#42S02Table 't' doesn't exist");
    assert_eq!(last_packet(&err), LastPacket::Unknown);
    assert_eq!(last_packet(&eof[1..]), LastPacket::Unknown);
    assert_eq!(last_packet(b""), LastPacket::Unknown);
}
