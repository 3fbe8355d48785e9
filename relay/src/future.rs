//! The boxed future the relay's object-safe seams return (drivers, the kernel route, the
//! fleet store): `async fn` in a trait is not object-safe, and these traits are used as
//! `dyn`; and a connection's task, boxed ([`Session`]).

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One connection's future, boxed: a connection's task lives for hours, and is sized by it.
pub type Session = BoxFuture<'static, ()>;
