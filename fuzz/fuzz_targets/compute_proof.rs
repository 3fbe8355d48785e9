//! The compute's proof of the key, as the relay reads it from the network (a greeting's server
//! version, a proof packet) and the MariaDB plugin reads a Hello: no input may panic, a Hello
//! that decodes must re-encode to the same bytes, and no proof made without the relay's key
//! may verify.
#![no_main]

use authplugin::compute_proof::{self, Hello};
use authplugin::identity::{KeyId, KeyRing, KeySecret, PerceptronKey};
use authplugin::Scramble;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ring = KeyRing::new(vec![PerceptronKey::new(
        KeyId::new("k1").unwrap(),
        KeySecret::from_bytes([7; 32]),
    )])
    .unwrap();
    let b = Scramble::with_clock(1_796_097_600_000, *b"bbbbbbbbbbbbbb");
    let mut guard = compute_proof::greeting_guard();
    assert!(
        compute_proof::verify_greeting(data, &b, &ring, 1_796_097_600_000, &mut guard).is_err(),
        "a greeting proof verified without the key"
    );
    let _ = compute_proof::version_without_proof(data);
    if let Ok(hello) = Hello::decode(data) {
        assert_eq!(hello.encode(), data);
    }
    let hello = Hello {
        key_id: KeyId::new("k1").unwrap(),
        nonce: [3; 32],
    };
    assert!(
        hello.verify_proof(data, &b, &ring).is_err(),
        "a challenge proof verified without the key"
    );
    if let Some((scramble, proof)) = compute_proof::switch_proof(data) {
        assert!(
            hello.verify_proof(proof, &scramble, &ring).is_err(),
            "a proof in an auth switch verified without the key"
        );
    }
});
