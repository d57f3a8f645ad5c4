//! HTTP boundaries (actix-web): the serving health endpoints and the
//! admin API. Neither holds lifecycle state of its own (ADM-1).

pub mod metrics;
pub mod serving;
pub mod ui;
