//! What the relay asks Linux about sockets and processes, below everything that uses it: the
//! kernel's socket table through `sock_diag` netlink ([`sock_diag`]), and which process owns a
//! listening socket ([`listener_owner`]). Pure queries: nothing here changes kernel state.

pub mod listener_owner;
pub mod sock_diag;
