//! server-shim's MySQL-to-SQLite translation over arbitrary statement text (what any logged-in
//! client can send), and its reader's handling of a first packet, of executions that leave
//! out their parameters' types and of statements that are not UTF-8: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first packet, as server-shim's reader reads it.
    server_shim::fuzzing::login_without_hello(data);
    server_shim::fuzzing::execute_with_bound_types(data);
    server_shim::fuzzing::query_with_binary_literals(data);
    if let Ok(sql) = std::str::from_utf8(data) {
        server_shim::fuzzing::translate(sql);
    }
});
