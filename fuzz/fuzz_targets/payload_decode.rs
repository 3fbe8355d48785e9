//! The relayed-auth payload decoder and verifier: the compute runs them on bytes from the
//! network. Anything that decodes must re-encode to the same bytes, and verify must never
//! accept a payload signed with a key the fuzzer cannot know.
#![no_main]

use authplugin::identity::{KeyId, KeyRing, KeySecret, PerceptronKey};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{Credential, ReplayGuard, Scramble};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(decoded) = payload::decode(data) else {
        return;
    };
    // Re-encoding the decoded fields with the same key id reproduces everything but the MAC.
    let key = PerceptronKey::new(decoded.key_id.clone(), KeySecret::from_bytes([7; 32]));
    let claim = LoginClaim {
        scramble_a: decoded.scramble_a.clone(),
        answer_a: decoded.answer_a.clone(),
        client_plugin: decoded.client_plugin,
        client_addr: decoded.client_addr.clone(),
    };
    let scramble_b = Scramble::from_bytes([b'B'; 20]);
    let binding = Binding { scramble_b: &scramble_b, user: b"u", database: b"" };
    let flags = (data[4] == payload::VERSION_WITH_FLAGS).then_some(decoded.flags);
    let again = payload::encode_signed_with(&claim, &key, decoded.issued_at_ms, &binding, flags)
        .expect("decoded fields fit");
    assert_eq!(again[..again.len() - 32], data[..data.len() - 32]);
    // The fuzzer does not know this secret, so nothing it writes may verify.
    let ring = KeyRing::new(vec![PerceptronKey::new(
        KeyId::new("k").unwrap(),
        KeySecret::from_bytes([0x5A; 32]),
    )])
    .unwrap();
    let mut replay = ReplayGuard::default();
    let cred = Credential::from_password(b"pw");
    assert!(
        payload::verify(data, &binding, &ring, &mut replay, decoded.issued_at_ms, Some(&cred))
            .is_err()
    );
});
