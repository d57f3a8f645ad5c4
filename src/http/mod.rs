//! HTTP boundaries (actix-web, the `http` feature): the serving health
//! endpoints, metrics, the web client and the admin API with its OpenAPI
//! document. Each mounts into any actix-web `App`; none holds lifecycle
//! state of its own (ADM-1).

pub mod admin;
pub mod fleet;
mod headers;
mod host_allowed;
mod latency;
pub mod metrics;
pub mod serving;
pub mod ui;

use crate::admin::Admin;
use actix_web::web;
use metrics::MetricsSource;

pub use headers::{security_headers, CONTENT_SECURITY_POLICY};
pub use latency::{RecordLatency, RecordLatencyService};

/// The admin boundary: the admin API and `GET /openapi.json`, `/metrics`
/// and the web client at `/ui`. Clone it into an `HttpServer` factory and
/// mount it with `App::new().configure(|cfg| routes.configure(cfg))`.
#[derive(Clone)]
pub struct AdminRoutes {
    metrics: web::Data<MetricsSource>,
    admin: web::Data<Admin>,
}

impl AdminRoutes {
    /// Routes over `admin` (authorization, audit, actions) and `metrics`
    /// (what `/metrics` reads).
    pub fn new(admin: Admin, metrics: MetricsSource) -> Self {
        Self {
            metrics: web::Data::new(metrics),
            admin: web::Data::new(admin),
        }
    }

    /// Mount every admin route.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        admin::configure(cfg, self.admin.clone());
        metrics::configure(cfg, self.metrics.clone());
        ui::configure(cfg);
    }
}
