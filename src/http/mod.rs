//! HTTP boundaries (actix-web): the serving health endpoints, metrics, the
//! web client and the admin API with its OpenAPI document. None holds
//! lifecycle state of its own (ADM-1).

pub mod admin;
pub mod metrics;
pub mod serving;
pub mod ui;
