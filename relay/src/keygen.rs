//! `relay keygen`: the only way a key secret comes into being.

use std::path::PathBuf;

use authplugin::identity::{KeyId, PerceptronKey};
use authplugin::key_file::{self, KeyFileError};

/// Why a key could not be generated.
#[derive(Debug)]
pub enum KeygenError {
    /// The id is not a valid key id.
    InvalidId(authplugin::IdentityError),
    /// The key file could not be created or extended.
    KeyFile(KeyFileError),
}

impl std::fmt::Display for KeygenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidId(e) => write!(f, "--id: {e}"),
            Self::KeyFile(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeygenError {}

/// Generates a key with a fresh secret from the OS CSPRNG and appends it to each file of
/// `out`, in order (the same key: relays and computes must share it). Every file is checked
/// first, so a bad one leaves them all unchanged.
///
/// # Errors
/// [`KeygenError`] for an invalid id or an unusable key file.
pub fn run(id: &str, out: &[PathBuf]) -> Result<KeyId, KeygenError> {
    let id = KeyId::new(id).map_err(KeygenError::InvalidId)?;
    for file in out {
        key_file::check_appendable(file, &id).map_err(KeygenError::KeyFile)?;
    }
    let key = PerceptronKey::generate(id.clone(), &mut rand::rngs::OsRng);
    for file in out {
        key_file::append(file, &key).map_err(KeygenError::KeyFile)?;
    }
    Ok(id)
}
