//! HTTP boundary (actix-web): the admin API and its OpenAPI document.

pub mod admin;
