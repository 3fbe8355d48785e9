//! The range protocol between a compute and the relay's socket, both directions:
//! `relay::fuzzing::range_request`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relay::fuzzing::range_request(data));
