//! What an account `IDENTIFIED VIA perceptron_dual` stores: exactly what
//! `mysql_native_password` stores, so accounts move between the two plugins unchanged.
//!
//! - `hash_password` (`USING PASSWORD('...')`, `SET PASSWORD`): the `*` + 40 upper-case hex
//!   digits of SHA1(SHA1(password)); an empty password stores an empty string.
//! - `preprocess_hash` (once per account, when the server loads or changes it): that text
//!   becomes the 20 raw bytes `authenticate_user` later sees; anything else is refused, so
//!   `USING 'not-a-hash'` fails at `CREATE USER` instead of at every login.

use authplugin::Credential;
use authplugin::native_password::{NATIVE_TOKEN_LEN, NativeStage2};

/// Length of the `*HEX` text form.
pub const TEXT_LEN: usize = 1 + 2 * NATIVE_TOKEN_LEN;

/// The text the server stores for `password`: empty for an empty password, else `*HEX`.
#[must_use]
pub fn hash_password(password: &[u8]) -> String {
    if password.is_empty() {
        String::new()
    } else {
        NativeStage2::from_password(password).to_text()
    }
}

/// A stored string that is neither empty nor `*` followed by 40 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidStoredHash;

impl core::fmt::Display for InvalidStoredHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the password hash must be empty or '*' followed by 40 hex digits")
    }
}

impl std::error::Error for InvalidStoredHash {}

/// Converts the stored text into the bytes `authenticate_user` receives: none for an empty
/// password, else SHA1(SHA1(password)).
///
/// # Errors
/// [`InvalidStoredHash`] for any other text.
pub fn preprocess(stored: &[u8]) -> Result<Vec<u8>, InvalidStoredHash> {
    if stored.is_empty() {
        return Ok(Vec::new());
    }
    let text = core::str::from_utf8(stored).map_err(|_| InvalidStoredHash)?;
    let stage2 = NativeStage2::parse_text(text).map_err(|_| InvalidStoredHash)?;
    Ok(stage2.as_bytes().to_vec())
}

/// The credential the preprocessed bytes stand for. Only the native hash exists: a client
/// answer made with `caching_sha2_password` is refused as "no hash for that plugin".
///
/// # Errors
/// [`InvalidStoredHash`] when the bytes are neither empty nor 20 long (the server hands over
/// what `preprocess` produced, so this means a corrupted account row).
pub fn credential(preprocessed: &[u8]) -> Result<Credential, InvalidStoredHash> {
    if preprocessed.is_empty() {
        return Ok(Credential::EmptyPassword);
    }
    let bytes: [u8; NATIVE_TOKEN_LEN] = preprocessed.try_into().map_err(|_| InvalidStoredHash)?;
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
            hash_password(b"app-password"),
            NativeStage2::from_password(b"app-password").to_text()
        );
        // A value every MySQL documents: PASSWORD('password').
        assert_eq!(
            hash_password(b"password"),
            "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"
        );
        assert_eq!(hash_password(b""), "");
        assert_eq!(hash_password(b"x").len(), TEXT_LEN);
    }

    #[test]
    fn preprocess_round_trips_the_text_form() {
        let text = hash_password(b"pw");
        let raw = preprocess(text.as_bytes()).unwrap();
        assert_eq!(raw, NativeStage2::from_password(b"pw").as_bytes().to_vec());
        assert_eq!(
            preprocess(text.to_ascii_lowercase().as_bytes()).unwrap(),
            raw
        );
        assert_eq!(preprocess(b"").unwrap(), Vec::<u8>::new());
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
        ] {
            assert_eq!(preprocess(bad), Err(InvalidStoredHash), "{bad:?}");
        }
    }

    #[test]
    fn credential_from_preprocessed_bytes() {
        assert_eq!(credential(b"").unwrap(), Credential::EmptyPassword);
        let raw = preprocess(hash_password(b"pw").as_bytes()).unwrap();
        assert_eq!(
            credential(&raw).unwrap(),
            Credential::Hashed {
                native: Some(NativeStage2::from_password(b"pw")),
                caching_sha2: None,
            }
        );
        assert_eq!(credential(&[0; 19]), Err(InvalidStoredHash));
    }
}
