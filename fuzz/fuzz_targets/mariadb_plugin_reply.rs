//! The perceptron_dual plugin's decision on a reply read from the network (a native answer or a
//! relayed-auth payload), with any user, database and stored hash: it must never panic, and it
//! must never accept a relayed login the fuzzer could only have signed with a key it cannot
//! know.
#![no_main]

use std::sync::Mutex;

use authplugin::identity::{KeyId, KeyRing, KeySecret, PerceptronKey};
use authplugin::{ReplayGuard, Scramble};
use libfuzzer_sys::fuzz_target;
use perceptron_dual::decision::{self, Attempt, Policy, Route};

fuzz_target!(|data: &[u8]| {
    // [stored_len][stored][user_len][user][db_len][db][flags] reply...
    let mut rest = data;
    let mut take = |rest: &mut &[u8]| -> Vec<u8> {
        let (len, tail) = match rest.split_first() {
            Some((&len, tail)) => (usize::from(len), tail),
            None => (0, &[][..]),
        };
        let (field, tail) = tail.split_at(len.min(tail.len()));
        *rest = tail;
        field.to_vec()
    };
    let stored = take(&mut rest);
    let user = take(&mut rest);
    let database = take(&mut rest);
    let flags = take(&mut rest);
    let reply = rest;
    let ring = KeyRing::new(vec![PerceptronKey::new(
        KeyId::new("k").unwrap(),
        KeySecret::from_bytes([0x5A; 32]),
    )])
    .unwrap();
    let replay = Mutex::new(ReplayGuard::default());
    let challenge = Scramble::from_bytes([b'B'; 20]);
    let attempt = Attempt {
        challenge: &challenge,
        reply,
        user: &user,
        database: (flags.first() != Some(&0)).then_some(&database[..]),
        stored: &stored,
        now_ms: 1_796_097_600_000,
    };
    let policy = Policy { require_relay: flags.get(1).is_some_and(|b| b & 1 == 1) };
    let _ = decision::using_password(reply);
    if let Ok(accepted) = decision::decide(&attempt, policy, &ring, &replay) {
        assert_eq!(accepted.route, Route::Direct, "a relayed login without the key");
        assert!(!policy.require_relay);
    }
});
