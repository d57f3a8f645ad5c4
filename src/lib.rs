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
//! own way; [`host::Embedded::spawn`] from a plain tokio service).
//! [`Engine::wait_for`] awaits a state and [`events`] delivers typed
//! events.
//!
//! # Quickstart
//!
//! Repair `items.email_norm = lower(email)` for every existing row, with
//! the readiness gate closed until validation proved it, from a plain
//! tokio service:
//!
//! ```no_run
//! use backfill::host::{Embedded, HostConfig};
//! use backfill::{Registry, SqlRepair, State};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let email_norm = SqlRepair::new("items.email-norm.v1", "items")
//!     .key("id")
//!     .set("email_norm = lower(email)")
//!     .validate_where("email_norm IS DISTINCT FROM lower(email)")
//!     .build()?;
//! let config = HostConfig::new("postgres://postgres@127.0.0.1:5432/app");
//! // Migrates the framework's tables, registers, starts the required
//! // backfill (automatic mode) and runs it.
//! let backfills = Embedded::spawn(config, Registry::new().with(email_norm)?).await?;
//! let row = backfills
//!     .engine
//!     .wait_for("items.email-norm.v1", &[State::Completed], Duration::from_secs(3600))
//!     .await?;
//! println!("{} is {}", row.id, row.state);
//! backfills.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! # What is public
//!
//! Everything documented here is the public API, pinned in
//! `docs/public-api.txt` (EMB-10). The store's statements and the
//! runtime's plumbing (claims, batches, renewals: what the actor runtime
//! calls) are hidden from these docs; the project's own binary, bench and
//! tests reach them through `backfill::__private` and the hidden methods,
//! which any release may change. The throwaway PostgreSQL cluster of the
//! demo and tests is the separate `backfill-ephemeral` crate.
//!
//! More in `examples/`: `embed.rs` (the smallest service with the admin
//! API and UI), `actix_service.rs` (the pieces mounted into an `App` of
//! the service's own) and `tokio_service.rs` (events and awaiting from
//! plain tokio).

#![deny(missing_docs)]

pub mod admin;
pub mod engine;
pub mod events;
mod failure;
pub mod host;
#[cfg(feature = "http")]
pub mod http;
pub mod key;
pub mod lifecycle;
pub mod logging;
pub mod notify;
pub mod readiness;
pub mod repair;
pub mod runtime;
mod store;
pub mod throttle;

pub use async_trait::async_trait;
pub use diesel_async::AsyncPgConnection;
pub use engine::{BatchOutcome, Claim, Engine, EngineConfig, EngineError, Phase, Started};
pub use key::Key;
pub use lifecycle::{Action, State};
pub use repair::{
    Batches, Mutated, Registry, Repair, RepairError, RowCount, SelectAndMutate, SelectThenMutate,
    SourceSet, SqlRepair, Validation,
};
/// One backfill as PostgreSQL stores it (its lifecycle row): what
/// [`Engine::get`], [`Engine::wait_for`] and [`Started`] return.
pub use store::BackfillRow;
/// The connection pool the host hands to an application's routes.
pub use store::Pool;

// The crates whose types appear in the library's public signatures, so
// that an embedder uses the very versions the library was built with
// instead of pinning them by hand: diesel and diesel-async for a
// hand-written repair's statements and `Application::migrate`, chrono,
// serde_json and uuid for the admin views, actix-web and utoipa for the
// HTTP pieces an application mounts into its own `App`.
#[cfg(feature = "http")]
pub use actix_web;
pub use chrono;
pub use diesel;
pub use diesel_async;
pub use serde_json;
#[cfg(feature = "http")]
pub use utoipa;
pub use uuid;

/// The library's inside, for the project's own binary, bench and tests
/// only: the store's statements, which bypass the audit, the admin
/// layer's checks and the NOTIFY that the public entry points keep.
/// Nothing here is part of the public API (it is not in
/// docs/public-api.txt) and any release may change it; an embedder that
/// needs something from here should ask for it on the façade.
#[doc(hidden)]
pub mod __private {
    /// The store's statements and row types (one function per statement).
    pub mod store {
        pub use crate::store::*;
    }
}
