//! `relay`: the perceptron (wake-on-connect MySQL relay) and its control plane.
//!
//! # Layout
//! - [`cli`]: the command line (`relay keygen`, ...), parsed with clap.
//! - [`keygen`]: `relay keygen`: create or extend the key file relays and computes share.

pub mod cli;
pub mod keygen;
