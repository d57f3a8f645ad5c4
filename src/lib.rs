//! backfill: finite, crash-proof, operator-controlled data repairs on
//! PostgreSQL.
//!
//! PostgreSQL alone owns state, claims, progress and completion; every batch
//! commits its mutations and its checkpoint in one transaction that a stale
//! owner cannot pass. See `ARCHITECTURE.md` for the map and
//! `../shared/spec/CONTRACT.md` for the requirement IDs cited throughout.

pub mod admin;
pub mod bench;
pub mod ctl;
pub mod engine;
pub mod example;
pub mod host;
pub mod http;
pub mod key;
pub mod lifecycle;
pub mod repair;
pub mod runtime;
pub mod store;

pub use async_trait::async_trait;
pub use diesel_async::AsyncPgConnection;
pub use engine::{BatchOutcome, Claim, Engine, EngineConfig, EngineError, Phase};
pub use key::Key;
pub use lifecycle::{Action, State};
pub use repair::{Mutated, Registry, Repair, RepairError, SourceSet, Validation};
