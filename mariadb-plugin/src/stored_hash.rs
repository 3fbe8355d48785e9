//! What an account `IDENTIFIED VIA perceptron_dual` stores: what `mysql_native_password`
//! stores, followed by a random generation drawn whenever the password is set.
//!
//! - `hash_password` (`USING PASSWORD('...')`, `SET PASSWORD`): the `*` + 40 upper-case hex
//!   digits of SHA1(SHA1(password)) (nothing for an empty password), then `$` and 16 hex
//!   digits of the generation. Resumption tickets are bound to the whole stored string
//!   (`decision`), so an account dropped and created again, even with the same password,
//!   opens none of the old account's sessions.
//! - `preprocess_hash` (once per account, when the server loads or changes it): that text
//!   becomes the bytes `authenticate_user` later sees: the 20 bytes of the hash (none for an
//!   empty password), then the generation's 8; anything else is refused, so
//!   `USING 'not-a-hash'` fails at `CREATE USER` instead of at every login.
//!
//! A `mysql_native_password` hash given as is (`USING '*HEX'`, `USING PASSWORD(...)` on
//! another plugin's account moved over) has no generation and still works: its tickets are
//! bound to the hash alone. Moving a `perceptron_dual` account to `mysql_native_password`
//! takes a `SET PASSWORD` (the stored string is no longer a bare native hash).

use authplugin::Credential;
use authplugin::native_password::{NATIVE_TOKEN_LEN, NativeStage2};

/// Length of the `*HEX` text form.
pub const TEXT_LEN: usize = 1 + 2 * NATIVE_TOKEN_LEN;
/// Bytes of an account's generation.
pub const GENERATION_LEN: usize = 8;
/// What separates the hash from the generation in the stored text.
const GENERATION_MARK: char = '$';

/// The text the server stores for `password` with a fresh random generation.
#[must_use]
pub fn hash_password(password: &[u8]) -> String {
    hash_password_with(password, rand::random())
}

/// The text the server stores for `password` with `generation`.
#[must_use]
pub fn hash_password_with(password: &[u8], generation: [u8; GENERATION_LEN]) -> String {
    let hash = if password.is_empty() {
        String::new()
    } else {
        NativeStage2::from_password(password).to_text()
    };
    format!(
        "{hash}{GENERATION_MARK}{}",
        authplugin::hex::encode(&generation).to_ascii_uppercase()
    )
}

/// A stored string that is not `[*HEX][$GENERATION]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidStoredHash;

impl core::fmt::Display for InvalidStoredHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(
            "the password hash must be empty or '*' followed by 40 hex digits, optionally \
             followed by '$' and 16 hex digits",
        )
    }
}

impl std::error::Error for InvalidStoredHash {}

/// Converts the stored text into the bytes `authenticate_user` receives: SHA1(SHA1(password))
/// (none for an empty password), then the generation (none without one).
///
/// # Errors
/// [`InvalidStoredHash`] for any other text.
pub fn preprocess(stored: &[u8]) -> Result<Vec<u8>, InvalidStoredHash> {
    let text = core::str::from_utf8(stored).map_err(|_| InvalidStoredHash)?;
    let (hash, generation) = match text.split_once(GENERATION_MARK) {
        Some((hash, generation)) => (hash, Some(generation)),
        None => (text, None),
    };
    let mut out = Vec::with_capacity(NATIVE_TOKEN_LEN + GENERATION_LEN);
    if !hash.is_empty() {
        let stage2 = NativeStage2::parse_text(hash).map_err(|_| InvalidStoredHash)?;
        out.extend_from_slice(stage2.as_bytes());
    }
    if let Some(generation) = generation {
        let bytes: [u8; GENERATION_LEN] =
            authplugin::hex::decode_array(generation).ok_or(InvalidStoredHash)?;
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// The credential the preprocessed bytes stand for. Only the native hash exists: a client
/// answer made with `caching_sha2_password` is refused as "no hash for that plugin".
///
/// # Errors
/// [`InvalidStoredHash`] when the bytes are none of what `preprocess` produces (the server
/// hands over what it produced, so this means a corrupted account row).
pub fn credential(preprocessed: &[u8]) -> Result<Credential, InvalidStoredHash> {
    let hash = match preprocessed.len() {
        0 | GENERATION_LEN => return Ok(Credential::EmptyPassword),
        NATIVE_TOKEN_LEN => preprocessed,
        n if n == NATIVE_TOKEN_LEN + GENERATION_LEN => preprocessed
            .get(..NATIVE_TOKEN_LEN)
            .ok_or(InvalidStoredHash)?,
        _ => return Err(InvalidStoredHash),
    };
    let bytes: [u8; NATIVE_TOKEN_LEN] = hash.try_into().map_err(|_| InvalidStoredHash)?;
    Ok(Credential::Hashed {
        native: Some(NativeStage2::from_bytes(bytes)),
        caching_sha2: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_like_mariadb_password_function() {
        // SELECT PASSWORD('app-password') on MariaDB 10.11.
        assert_eq!(
            hash_password_with(b"app-password", [0; GENERATION_LEN]),
            format!(
                "{}$0000000000000000",
                NativeStage2::from_password(b"app-password").to_text()
            )
        );
        // A value every MySQL documents: PASSWORD('password').
        assert_eq!(
            hash_password_with(b"password", [0xAB; GENERATION_LEN]),
            "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19$ABABABABABABABAB"
        );
        assert_eq!(
            hash_password_with(b"", [1; GENERATION_LEN]),
            "$0101010101010101"
        );
        assert_eq!(hash_password(b"x").len(), TEXT_LEN + 1 + 2 * GENERATION_LEN);
        // Each time the password is set, another generation.
        assert_ne!(hash_password(b"x"), hash_password(b"x"));
    }

    #[test]
    fn preprocess_round_trips_the_text_form() {
        let text = hash_password_with(b"pw", [9; GENERATION_LEN]);
        let raw = preprocess(text.as_bytes()).unwrap();
        let mut want = NativeStage2::from_password(b"pw").as_bytes().to_vec();
        want.extend_from_slice(&[9; GENERATION_LEN]);
        assert_eq!(raw, want);
        assert_eq!(
            preprocess(text.to_ascii_lowercase().as_bytes()).unwrap(),
            raw
        );
        // A bare native hash, as mysql_native_password stores it, and an empty password.
        let native = NativeStage2::from_password(b"pw").to_text();
        assert_eq!(
            preprocess(native.as_bytes()).unwrap(),
            NativeStage2::from_password(b"pw").as_bytes().to_vec()
        );
        assert_eq!(preprocess(b"").unwrap(), Vec::<u8>::new());
        assert_eq!(
            preprocess(hash_password_with(b"", [3; GENERATION_LEN]).as_bytes()).unwrap(),
            vec![3; GENERATION_LEN]
        );
    }

    #[test]
    fn preprocess_refuses_everything_else() {
        for bad in [
            &b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1"[..],
            b"2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19",
            b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19A",
            b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1EZZ",
            b"password",
            b"\xff\xfe",
            b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19$ABAB",
            b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19$ZZABABABABABABAB",
            b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19$ABABABABABABABAB$",
            b"$",
        ] {
            assert_eq!(preprocess(bad), Err(InvalidStoredHash), "{bad:?}");
        }
    }

    #[test]
    fn credential_from_preprocessed_bytes() {
        assert_eq!(credential(b"").unwrap(), Credential::EmptyPassword);
        assert_eq!(
            credential(&[0; GENERATION_LEN]).unwrap(),
            Credential::EmptyPassword
        );
        let hashed = Credential::Hashed {
            native: Some(NativeStage2::from_password(b"pw")),
            caching_sha2: None,
        };
        let raw = preprocess(hash_password(b"pw").as_bytes()).unwrap();
        assert_eq!(credential(&raw).unwrap(), hashed);
        assert_eq!(credential(&raw[..NATIVE_TOKEN_LEN]).unwrap(), hashed);
        assert_eq!(credential(&[0; 19]), Err(InvalidStoredHash));
        assert_eq!(credential(&[0; 29]), Err(InvalidStoredHash));
    }
}
