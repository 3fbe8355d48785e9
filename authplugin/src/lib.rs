//! `authplugin`: the pure core of Perceptron's dual-verification login.
//!
//! Sans-I/O: no sockets, no async runtime, no clock (time is a parameter). Randomness comes
//! from a caller-supplied CSPRNG. The one exception is [`key_file`], which reads and writes
//! key files and reads secret files, so that every binary applies the same permission checks.
//!
//! # Layout
//! - [`reader`]: the checked cursor every decoder uses; [`DecodeError`].
//! - [`scramble`]: 20-byte login challenges.
//! - [`native_password`], [`caching_sha2`]: the plugins' token math and verification.
//! - [`credential`]: what a compute stores per account and the check of an answer against it.
//! - [`identity`]: the HMAC-SHA256 key ring shared by relays and computes.
//! - [`key_file`]: loading and writing key files, and reading any secret file (mode-checked).
//! - [`payload`]: the relayed-auth payload v2 (architecture.md §3, hardened): encode, strict decode, verify.
//! - [`compute_proof`]: the compute's proof that it holds the key, before the relay sends a
//!   login.
//! - [`replay`]: the bounded replay window over scramble A (whatever key id signed it).
//! - [`packet`]: the connection-phase packets and framing.
//! - [`hex`]: hex for key files and stored hashes.
//! - `digest`: hashing several parts and XOR of digests, the scramble plugins' primitives.

pub mod caching_sha2;
pub mod compute_proof;
pub mod credential;
mod digest;
pub mod hex;
pub mod identity;
pub mod key_file;
pub mod native_password;
pub mod packet;
pub mod payload;
pub mod reader;
pub mod replay;
pub mod resume;
pub mod scramble;
pub mod ticket;
pub mod ticket_store;

pub use credential::{AnswerError, AuthPlugin, Credential};
pub use identity::{IdentityError, KeyId, KeyRing, KeySecret, PerceptronKey};
pub use key_file::{SecretFileError, read_secret_file};
pub use payload::{Binding, DecodedPayload, DenyReason, LoginAgeError, LoginClaim, VerifiedLogin};
pub use reader::DecodeError;
pub use replay::{ReplayError, ReplayGuard};
pub use scramble::{SCRAMBLE_LEN, Scramble};
