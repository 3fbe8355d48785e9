//! A session's state as the relay reads it from a compute by value (`relay::session_state`):
//! whatever the compute answers, nothing panics and a reattach sends only statements the relay
//! wrote, never a value parsed as SQL.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relay::fuzzing::session_state(data));
