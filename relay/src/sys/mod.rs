//! What the relay asks Linux about sockets, routes and processes, below everything that uses
//! it, through netlink ([`netlink`]): the kernel's socket table ([`sock_diag`]), the interface
//! toward a peer ([`route`]), whether conntrack translates a connection ([`conntrack_entry`]);
//! and which process owns a listening socket ([`listener_owner`]): queries. Two changes: a
//! spliced connection's conntrack entry forgotten ([`conntrack_entry`]), and no core dumps
//! for the relay's own process ([`dumps`]).

pub mod conntrack_entry;
pub mod dumps;
pub mod listener_owner;
pub mod netlink;
pub mod route;
pub mod sock_diag;
