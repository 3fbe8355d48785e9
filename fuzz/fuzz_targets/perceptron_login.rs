//! The perceptron route's state machine (P1–P8) driven by arbitrary client and compute byte
//! streams, in memory on paused time, in dual and switch mode: it must end without a panic or
//! a hang whatever either side sends. Input: `[mode][client length u16 LE][client][compute]`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (client, compute) = rest.split_at(split);
    let accepted = relay::fuzzing::perceptron_login(client, compute, mode & 1 == 1);
    if accepted {
        // The compute's bytes must hold an OK packet for the relay to report an accepted login.
        assert!(compute.contains(&0x00));
    }
});
