//! What the relay asks Linux about sockets, routes and processes, below everything that uses
//! it, through netlink ([`netlink`]): the kernel's socket table ([`sock_diag`]), the interface
//! toward a peer ([`route`]), whether conntrack translates a connection ([`conntrack_nat`]);
//! and which process owns a listening socket ([`listener_owner`]): pure queries. One change,
//! to the relay's own process only: no core dumps ([`dumps`]).

pub mod conntrack_nat;
pub mod dumps;
pub mod listener_owner;
pub mod netlink;
pub mod route;
pub mod sock_diag;
