//! An offload's manifest (read from the object store) and a lazy restore's sidecar (read by
//! server-shim): `relay::fuzzing::offload_metadata`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relay::fuzzing::offload_metadata(data));
