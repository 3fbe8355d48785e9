//! `server-shim`: the stand-in compute node (opensrv-mysql with dual verification).
//!
//! Not built yet (issue 3). The binary says so and exits non-zero rather than pretend.
