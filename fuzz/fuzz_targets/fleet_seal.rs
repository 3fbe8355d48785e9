//! An instance definition read from a fleet's store, and its seal: `relay::fuzzing::fleet_seal`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relay::fuzzing::fleet_seal(data));
