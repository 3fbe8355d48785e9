//! The boxed future the relay's object-safe seams return (drivers, the kernel route, the
//! fleet store): `async fn` in a trait is not object-safe, and these traits are used as
//! `dyn`.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
