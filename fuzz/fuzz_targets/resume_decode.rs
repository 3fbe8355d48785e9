//! The resume payload and the ticket inside it: the compute parses both from the network on a
//! reattach. Whatever decodes re-encodes to the same bytes (but the MAC), and nothing the
//! fuzzer writes verifies or opens under keys it cannot know.
#![no_main]

use authplugin::identity::{KeyId, KeyRing, KeySecret, PerceptronKey};
use authplugin::payload::Binding;
use authplugin::{ReplayGuard, Scramble, resume, ticket};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = |b| KeySecret::from_bytes([b; 32]);
    let scramble_b = Scramble::from_bytes([b'B'; 20]);
    let binding = Binding { scramble_b: &scramble_b, user: b"u", database: b"" };
    if let Ok((key_id, issued, addr, inner)) = resume::decode(data) {
        let key = PerceptronKey::new(key_id, secret(7));
        let again = resume::encode_signed(&key, issued, &addr, inner, &binding)
            .expect("decoded fields fit");
        assert_eq!(again[..again.len() - 32], data[..data.len() - 32]);
        let ring = KeyRing::new(vec![PerceptronKey::new(KeyId::new("k").unwrap(), secret(0x5A))])
            .unwrap();
        let guard = ReplayGuard::default();
        assert!(resume::verify(data, &binding, &ring, &guard, issued).is_err());
    }
    if let Ok((key_id, claims)) = ticket::decode(data) {
        let key = PerceptronKey::new(key_id.clone(), secret(7));
        let again = ticket::seal(&claims, &key).expect("decoded fields fit");
        assert_eq!(again[..again.len() - 32], data[..data.len() - 32]);
        let ring = KeyRing::new(vec![PerceptronKey::new(key_id, secret(0x5A))]).unwrap();
        assert!(ticket::open(data, &ring).is_err());
    }
});
