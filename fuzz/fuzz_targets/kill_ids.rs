//! The session a client's `KILL` names (`relay::kill_ids`): any payload is searched, and a
//! rewrite of the id it found changes nothing else.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (id, payload) = data.split_at(4.min(data.len()));
    let mut word = [0u8; 4];
    word[..id.len()].copy_from_slice(id);
    relay::fuzzing::kill_ids(payload, u32::from_le_bytes(word));
});
