//! backfill: finite, crash-proof, operator-controlled data repairs on
//! PostgreSQL.
//!
//! PostgreSQL alone owns state, claims, progress and completion; every batch
//! commits its mutations and its checkpoint in one transaction that a stale
//! owner cannot pass. See `ARCHITECTURE.md` for the map and
//! `docs/CONTRACT.md` for the requirement IDs cited throughout.
//!
//! A host service embeds it through [`host`]: it implements
//! [`host::Application`] (its repairs, and optionally its migrations,
//! schema check and routes) and starts [`host::Host`] (with the `http`
//! feature: listeners, admin API, `/metrics`, UI) or [`host::Embedded`]
//! (the runtime and readiness gate alone, for a service that serves its
//! own way). `examples/embed.rs` is a complete one.

pub mod admin;
pub mod engine;
pub mod ephemeral;
pub mod host;
#[cfg(feature = "http")]
pub mod http;
pub mod key;
pub mod lifecycle;
pub mod readiness;
pub mod repair;
pub mod runtime;
pub mod store;

pub use async_trait::async_trait;
pub use diesel_async::AsyncPgConnection;
pub use engine::{BatchOutcome, Claim, Engine, EngineConfig, EngineError, Phase};
pub use key::Key;
pub use lifecycle::{Action, State};
pub use repair::{
    Batches, Mutated, Registry, Repair, RepairError, SelectAndMutate, SelectThenMutate, SourceSet,
    SqlRepair, Validation,
};
