//! Statement-id translation of a reattached session (`relay::statement_ids`): it rewrites
//! bytes the client and the compute sent, so it may change nothing but an id and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (pairs, rest) = rest.split_at((usize::from(n % 8) * 8).min(rest.len()));
    let (server, rest) = rest.split_at(8.min(rest.len()));
    let mut word = [0u8; 8];
    word[..server.len()].copy_from_slice(server);
    relay::fuzzing::statement_ids(pairs, u64::from_le_bytes(word), rest);
});
