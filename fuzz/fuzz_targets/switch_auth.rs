//! Switch mode's exchange with a stock server (P6–P8, `relay/src/perceptron/switch_auth.rs`)
//! driven by arbitrary server and client bytes, in memory on paused time, with and without
//! TLS on the compute leg: it must end without a panic or a hang, and no client answer may
//! reach a plaintext compute after it asked for the password in clear (see
//! `relay::fuzzing::switch_auth`). Input: `[flags][client length u16 LE][client][compute]`,
//! flags bit 0: the compute leg is TLS.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (client, compute) = rest.split_at(split);
    relay::fuzzing::switch_auth(client, compute, flags & 1 == 1);
});
