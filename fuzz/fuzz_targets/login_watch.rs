//! The direct route's login watch, fed arbitrary client and compute bytes in arbitrary chunks:
//! it must never panic, and it reports at most one login and one verdict.
//! Input: `[client length u16 LE][client][compute]`; each side is cut into chunks of 1–16 bytes
//! by its own bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (client, compute) = rest.split_at(split);
    relay::fuzzing::login_watch(client, compute);
});
