//! Throttling (THR-1..4): everything that decides how fast a backfill may
//! go, in one room.
//!
//! - [`settings`]: the live per-backfill settings an operator changes
//!   while a backfill runs (batch size, target duration, pause,
//!   concurrency, health thresholds), their ranges and their merge.
//! - [`sizing`]: the size each batch runs with, fixed or adaptive toward
//!   a target batch duration (THR-3).
//! - [`health`]: the process's health signals (standby lag, WAL rate,
//!   old transactions, lock waiters, the application's own check), read
//!   on an interval and judged against thresholds (THR-1, THR-2).
//! - [`latency`]: latency budgets: the application's latency beside a
//!   backfill, sampled by a probe or the host, and the controller that
//!   paces a budgeted claim to hold it (THR-6..8).
//! - [`window`]: the UTC hours in which a backfill's batches may start
//!   (FLT-3).
//!
//! The room decides; it does not act. The engine's per-batch gate
//! (`engine/gate.rs`) consults it before every batch, the settings action
//! (`Engine::update_settings`, audited by the admin layer) stores a
//! change, and the store's statements are the only thing the room itself
//! calls (the health monitor's readings). Nothing here depends on the
//! engine, the admin layer or the runtime.

pub mod budget;
pub mod health;
pub mod latency;
pub mod settings;
pub mod sizing;
pub mod window;
