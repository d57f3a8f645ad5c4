//! The `backfill` binary's library: the example relay-like application,
//! the demo (of one database or of a fleet), the operator CLI and the benchmark. It is one embedder of the
//! `backfill` crate and uses only its public API.

pub mod bench;
pub mod ctl;
pub mod demo;
pub mod example;
pub mod fleet_demo;
pub mod screen;
