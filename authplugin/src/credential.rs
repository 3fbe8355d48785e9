//! What a compute node stores for an account, and the check of a login answer against it.
//!
//! Used by the compute (server-shim) for both routes: a direct login answers the compute's own
//! scramble, a relayed login (architecture.md §3, last check) answers the relay's scramble A. The relay
//! never holds a [`Credential`].

use core::fmt;

use crate::caching_sha2::{self, CachingSha2Digest};
use crate::native_password::{self, NativeStage2};
use crate::scramble::Scramble;

/// The auth plugins a login answer can be made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthPlugin {
    /// `mysql_native_password`.
    MysqlNativePassword,
    /// `caching_sha2_password`, fast path.
    CachingSha2Password,
}

impl AuthPlugin {
    /// The plugin's name on the wire.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::MysqlNativePassword => "mysql_native_password",
            Self::CachingSha2Password => "caching_sha2_password",
        }
    }

    /// Looks a plugin up by its wire name; `None` for every plugin whose answer cannot be
    /// checked against a stored hash and a scramble (ed25519, sha256_password, clear text...).
    #[must_use]
    pub fn from_name(name: &[u8]) -> Option<Self> {
        match name {
            b"mysql_native_password" => Some(Self::MysqlNativePassword),
            b"caching_sha2_password" => Some(Self::CachingSha2Password),
            _ => None,
        }
    }
}

impl fmt::Display for AuthPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An account's stored secret. Never a password: only the hashes the plugins verify against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The account has an empty password: only an empty answer logs in.
    EmptyPassword,
    /// The account has a password, kept as the hashes of the plugins it may log in with.
    Hashed {
        /// SHA1(SHA1(password)), for `mysql_native_password`.
        native: Option<NativeStage2>,
        /// SHA256(SHA256(password)), for the `caching_sha2_password` fast path.
        caching_sha2: Option<CachingSha2Digest>,
    },
}

/// Why a login answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerError {
    /// The answer does not match the stored hash (wrong password), or an empty answer for an
    /// account that has a password, or the reverse.
    Mismatch,
    /// The account has no hash for the plugin the answer was made with.
    NoHashForPlugin(AuthPlugin),
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch => f.write_str("answer does not match the stored hash"),
            Self::NoHashForPlugin(p) => write!(f, "account has no {p} hash"),
        }
    }
}

impl std::error::Error for AnswerError {}

impl Credential {
    /// Hashes a password for every supported plugin; an empty password gives
    /// [`Credential::EmptyPassword`].
    #[must_use]
    pub fn from_password(password: &[u8]) -> Self {
        if password.is_empty() {
            return Self::EmptyPassword;
        }
        Self::Hashed {
            native: Some(NativeStage2::from_password(password)),
            caching_sha2: Some(CachingSha2Digest::from_password(password)),
        }
    }

    /// Checks `answer`, made with `plugin` for `scramble`, against this credential.
    ///
    /// # Errors
    /// [`AnswerError`] saying why the answer is refused.
    pub fn check_answer(
        &self,
        plugin: AuthPlugin,
        scramble: &Scramble,
        answer: &[u8],
    ) -> Result<(), AnswerError> {
        match self {
            // The empty answer is the whole proof of an empty password; any bytes are wrong.
            Self::EmptyPassword if answer.is_empty() => Ok(()),
            Self::EmptyPassword => Err(AnswerError::Mismatch),
            Self::Hashed { .. } if answer.is_empty() => Err(AnswerError::Mismatch),
            Self::Hashed {
                native,
                caching_sha2,
            } => {
                let ok = match plugin {
                    AuthPlugin::MysqlNativePassword => native_password::verify(
                        answer,
                        scramble,
                        native
                            .as_ref()
                            .ok_or(AnswerError::NoHashForPlugin(plugin))?,
                    ),
                    AuthPlugin::CachingSha2Password => caching_sha2::verify(
                        answer,
                        scramble,
                        caching_sha2
                            .as_ref()
                            .ok_or(AnswerError::NoHashForPlugin(plugin))?,
                    ),
                };
                if ok {
                    Ok(())
                } else {
                    Err(AnswerError::Mismatch)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scramble() -> Scramble {
        Scramble::from_bytes([0x41; 20])
    }

    #[test]
    fn accepts_right_answer_for_each_plugin() {
        let c = Credential::from_password(b"pw");
        let s = scramble();
        let native = native_password::token(b"pw", &s);
        let sha2 = caching_sha2::token(b"pw", &s);
        assert_eq!(
            c.check_answer(AuthPlugin::MysqlNativePassword, &s, &native),
            Ok(())
        );
        assert_eq!(
            c.check_answer(AuthPlugin::CachingSha2Password, &s, &sha2),
            Ok(())
        );
        // An answer made for one plugin is not accepted as the other.
        assert_eq!(
            c.check_answer(AuthPlugin::CachingSha2Password, &s, &native),
            Err(AnswerError::Mismatch)
        );
    }

    #[test]
    fn empty_password_semantics() {
        let s = scramble();
        let empty = Credential::from_password(b"");
        assert_eq!(empty, Credential::EmptyPassword);
        assert_eq!(
            empty.check_answer(AuthPlugin::MysqlNativePassword, &s, b""),
            Ok(())
        );
        let some = native_password::token(b"x", &s);
        assert_eq!(
            empty.check_answer(AuthPlugin::MysqlNativePassword, &s, &some),
            Err(AnswerError::Mismatch)
        );
        let hashed = Credential::from_password(b"x");
        assert_eq!(
            hashed.check_answer(AuthPlugin::MysqlNativePassword, &s, b""),
            Err(AnswerError::Mismatch)
        );
    }

    #[test]
    fn refuses_plugin_without_hash() {
        let c = Credential::Hashed {
            native: Some(NativeStage2::from_password(b"pw")),
            caching_sha2: None,
        };
        let s = scramble();
        assert_eq!(
            c.check_answer(
                AuthPlugin::CachingSha2Password,
                &s,
                &caching_sha2::token(b"pw", &s)
            ),
            Err(AnswerError::NoHashForPlugin(
                AuthPlugin::CachingSha2Password
            ))
        );
    }
}
