//! server-shim's MySQL-to-SQLite translation over arbitrary statement text (what any logged-in
//! client can send): never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sql) = std::str::from_utf8(data) {
        server_shim::fuzzing::translate(sql);
    }
});
