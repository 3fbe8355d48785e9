//! SQLite files restored lazily from an offload store (docs/offload.md, "Lazy restore").
//!
//! - [`sidecar`]: what the relay writes beside a lazily restored file (pure);
//! - [`range`]: the protocol a compute asks the relay's socket for a range of an object with
//!   (pure);
//! - [`object`]: reading a range of an object, from a directory store or the relay's socket;
//! - [`hydrate`]: filling a file's chunks in from the store, on demand and in the background;
//! - `vfs` (feature `sqlite`): the SQLite VFS server-shim opens every database through, which
//!   calls [`hydrate`] before SQLite reads or writes a lazily restored file. The only `unsafe`
//!   code.

pub mod hydrate;
pub mod object;
pub mod range;
pub mod sidecar;
#[cfg(feature = "sqlite")]
mod vfs;

#[cfg(feature = "sqlite")]
pub use vfs::{RegisterError, register};
