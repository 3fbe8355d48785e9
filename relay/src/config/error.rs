//! A configuration that cannot be used, naming the file and the key.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration that cannot be used: the file, the key to blame and what is wrong.
#[derive(Debug)]
pub struct ConfigError {
    /// The configuration file.
    pub path: PathBuf,
    /// The key, as a path from the top of the file (`instance[0].resume_timeout`); none when
    /// no single key is to blame (the file cannot be read or is not TOML).
    pub key: Option<String>,
    /// What is wrong.
    pub problem: ConfigProblem,
}

/// What is wrong with a configuration.
#[derive(Debug)]
pub enum ConfigProblem {
    /// A file cannot be read: the configuration itself, or a file one of its keys names.
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not TOML.
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// The TOML parser's message.
        message: String,
    },
    /// A value that is missing, not allowed here, of the wrong type or out of range.
    Invalid(String),
    /// The file configures no `[[instance]]`.
    NoInstance,
    /// A secret file others can read, or not a small text file.
    Secret(authplugin::key_file::SecretFileError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        match &self.problem {
            ConfigProblem::Read { file, source } if *file == self.path => {
                write!(f, "cannot read: {source}")
            }
            ConfigProblem::Read { file, source } => {
                write!(f, "cannot read {}: {source}", file.display())
            }
            ConfigProblem::Syntax {
                line,
                column,
                message,
            } => write!(f, "line {line}, column {column}: {message}"),
            ConfigProblem::Invalid(message) => f.write_str(message),
            ConfigProblem::NoInstance => {
                f.write_str("no [[instance]] configured, and no relay.instances_dir")
            }
            ConfigProblem::Secret(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            ConfigProblem::Read { source, .. } => Some(source),
            ConfigProblem::Secret(e) => Some(e),
            _ => None,
        }
    }
}

impl ConfigError {
    pub(super) fn invalid(path: &Path, key: String, message: impl fmt::Display) -> Self {
        Self {
            path: path.to_owned(),
            key: Some(key),
            problem: ConfigProblem::Invalid(message.to_string()),
        }
    }
}
