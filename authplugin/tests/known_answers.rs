//! Known-answer tests against independent implementations: RFC 4231 for HMAC-SHA256, MariaDB's
//! own `PASSWORD()` for the stage2 text form, and PyMySQL's token functions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use authplugin::Scramble;
use authplugin::caching_sha2::{self, CachingSha2Digest};
use authplugin::credential::{AuthPlugin, Credential};
use authplugin::hex;
use authplugin::identity::hmac_sha256;
use authplugin::native_password::{self, NativeStage2};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

#[test]
fn hmac_sha256_matches_rfc_4231() {
    // (key, data, HMAC-SHA256) for test cases 1, 2, 3, 4, 6 and 7. Case 5 tests truncated
    // output, which this crate never uses.
    let cases: [(Vec<u8>, Vec<u8>, &str); 6] = [
        (
            vec![0x0b; 20],
            b"Hi There".to_vec(),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        ),
        (
            b"Jefe".to_vec(),
            b"what do ya want for nothing?".to_vec(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            vec![0xaa; 20],
            vec![0xdd; 50],
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        ),
        (
            (1..=25).collect(),
            vec![0xcd; 50],
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        ),
        (
            vec![0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
        (
            vec![0xaa; 131],
            b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        ),
    ];
    for (i, (key, data, expected)) in cases.iter().enumerate() {
        assert_eq!(
            hex::encode(&hmac_sha256(key, &[data])),
            *expected,
            "case {i}"
        );
        // Splitting the message into parts is the same as concatenating them.
        let (a, b) = data.split_at(data.len() / 2);
        assert_eq!(
            hex::encode(&hmac_sha256(key, &[a, b])),
            *expected,
            "case {i} split"
        );
    }
}

#[test]
fn stage2_text_matches_mariadb_password_function() {
    let text = fixture("mariadb_password_fn.txt");
    let mut checked = 0;
    for line in text.lines() {
        let (password, expected) = line.split_once('\t').unwrap();
        if password.is_empty() {
            // MariaDB stores an empty string for an empty password: no hash at all.
            assert_eq!(expected, "");
            assert_eq!(Credential::from_password(b""), Credential::EmptyPassword);
        } else {
            let h = NativeStage2::from_password(password.as_bytes());
            assert_eq!(h.to_text(), expected, "PASSWORD('{password}')");
            assert_eq!(NativeStage2::parse_text(expected).unwrap(), h);
        }
        checked += 1;
    }
    assert_eq!(checked, 5);
}

#[test]
fn tokens_match_pymysql() {
    let text = fixture("pymysql_tokens.txt");
    let mut checked = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [kind, password, scramble, expected] = fields[..] else {
            panic!("bad line {line:?}");
        };
        let scramble = Scramble::from_bytes(hex::decode_array(scramble).unwrap());
        let pw = password.as_bytes();
        let expected = unhex(expected);
        let (token, plugin) = match kind {
            "native" => (
                native_password::token(pw, &scramble),
                AuthPlugin::MysqlNativePassword,
            ),
            "caching_sha2" => (
                caching_sha2::token(pw, &scramble),
                AuthPlugin::CachingSha2Password,
            ),
            other => panic!("unknown kind {other}"),
        };
        assert_eq!(token, expected, "{kind} {password:?}");
        // And our verifier accepts PyMySQL's token against the stored hashes.
        Credential::from_password(pw)
            .check_answer(plugin, &scramble, &expected)
            .unwrap();
        if !pw.is_empty() {
            assert!(match plugin {
                AuthPlugin::MysqlNativePassword =>
                    native_password::verify(&expected, &scramble, &NativeStage2::from_password(pw)),
                AuthPlugin::CachingSha2Password => caching_sha2::verify(
                    &expected,
                    &scramble,
                    &CachingSha2Digest::from_password(pw)
                ),
            });
        }
        checked += 1;
    }
    assert_eq!(checked, 12);
}
