//! The command/response conversation tracker, fed arbitrary client and server bytes in
//! arbitrary chunks: it must never panic, and where a chunk ends must not change what it says;
//! the server's last 32 bytes read for its last packet (the kernel splice's take-back).
//! Input: `[capabilities u8][client length u16 LE][client][server]`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&caps, rest)) = data.split_first() else {
        return;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (client, server) = rest.split_at(split);
    relay::fuzzing::conversation(caps, client, server);
});
