//! What the relay asks Linux about sockets and processes, below everything that uses it: the
//! kernel's socket table through `sock_diag` netlink ([`sock_diag`]), and which process owns a
//! listening socket ([`listener_owner`]): pure queries. One change, to the relay's own
//! process only: no core dumps ([`dumps`]).

pub mod dumps;
pub mod listener_owner;
pub mod sock_diag;
