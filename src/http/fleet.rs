//! The fleet's HTTP boundary (FLT-6): one view of every database's
//! backfills, the aggregates, actions on one database or on all, and
//! readiness of the fleet or of one database.
//!
//! A thin projection of [`FleetAdmin`], as `admin.rs` is of one
//! database's admin service: each database authorizes, audits and answers
//! for itself; this layer only reads parameters and renders.

use super::admin::{error, query, render, Meta};
use crate::admin::{AdminError, Availability, DatabaseStatus, FleetAdmin, Rollout};
use crate::lifecycle::Action;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

/// The database a fleet request is limited to, if any.
#[derive(Debug, Deserialize)]
struct DatabaseQuery {
    database: Option<String>,
}

/// The fleet's routes. Clone it into an `HttpServer` factory and mount it
/// with `App::new().configure(|cfg| routes.configure(cfg))`.
#[derive(Clone)]
pub struct FleetRoutes {
    admin: web::Data<FleetAdmin>,
}

impl FleetRoutes {
    /// Routes over `admin`.
    pub fn new(admin: FleetAdmin) -> Self {
        Self {
            admin: web::Data::new(admin),
        }
    }

    /// Mount `GET /admin/fleet`, `GET /admin/fleet/backfills`, `POST
    /// /admin/fleet/backfills/{id}/{action}`, `PUT
    /// /admin/fleet/rollout/{id}`, `GET /readyz`, `GET /livez` and `GET
    /// /metrics`.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.app_data(self.admin.clone())
            .route("/admin/fleet", web::get().to(overview))
            .route("/admin/fleet/backfills", web::get().to(backfills))
            .route("/admin/fleet/backfills/{id}/{action}", web::post().to(act))
            .route("/admin/fleet/rollout/{id}", web::put().to(rollout))
            .route("/readyz", web::get().to(readyz))
            .route("/livez", web::get().to(livez))
            .route("/metrics", web::get().to(metrics));
    }
}

/// The database named by `?database=`, refusing malformed parameters.
fn database(req: &HttpRequest) -> Result<Option<String>, AdminError> {
    let q: DatabaseQuery = query(req)?;
    Ok(q.database)
}

async fn overview(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let meta = Meta::from(&req);
    render(admin.overview(&meta.as_meta()).await)
}

async fn backfills(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let database = match database(&req) {
        Ok(database) => database,
        Err(e) => return error(&e),
    };
    render(admin.backfills(&meta.as_meta(), database.as_deref()).await)
}

async fn act(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    admin: web::Data<FleetAdmin>,
) -> HttpResponse {
    let (id, action) = path.into_inner();
    let action = match action.parse::<Action>() {
        Ok(action) => action,
        Err(_) => {
            return error(&AdminError::BadRequest(
                "the action must be start, pause, resume, retry or validate".into(),
            ))
        }
    };
    let meta = Meta::from(&req);
    let database = match database(&req) {
        Ok(database) => database,
        Err(e) => return error(&e),
    };
    render(
        admin
            .act(&meta.as_meta(), database.as_deref(), &id, action)
            .await,
    )
}

/// `PUT /admin/fleet/rollout/{id}` with `{"max_databases": N | null}`.
async fn rollout(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    admin: web::Data<FleetAdmin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    let wanted: Rollout = match serde_json::from_slice(&body) {
        Ok(wanted) => wanted,
        Err(_) => {
            return error(&AdminError::BadRequest(
                "the body must be JSON: {\"max_databases\": N or null}".into(),
            ))
        }
    };
    render(admin.set_rollout(&meta.as_meta(), &id, wanted.max_databases))
}

async fn readyz(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let readiness = database(&req).and_then(|database| admin.readiness(database.as_deref()));
    match readiness {
        Ok(report) if report.ready => HttpResponse::Ok().json(report),
        Ok(report) => HttpResponse::ServiceUnavailable().json(report),
        Err(e) => error(&e),
    }
}

async fn livez() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"live": true}))
}

/// `GET /metrics`: each database's availability and readiness as of the
/// last probe (FLT-1), in the Prometheus text format. The `database`
/// label is a name from the host's own list, so its values are as many
/// as the fleet has databases. Every database's own families are on its
/// single-database listener, not here.
async fn metrics(admin: web::Data<FleetAdmin>) -> HttpResponse {
    match fleet_exposition(&admin.statuses()) {
        Ok(body) => HttpResponse::Ok()
            .content_type(prometheus::TEXT_FORMAT)
            .body(body),
        Err(error) => {
            tracing::error!(event = "metrics_unrenderable", error = %error);
            HttpResponse::InternalServerError()
                .content_type("text/plain; charset=utf-8")
                .body("metrics could not be rendered\n")
        }
    }
}

fn fleet_exposition(statuses: &[DatabaseStatus]) -> prometheus::Result<String> {
    use prometheus::{IntGaugeVec, Opts, Registry, TextEncoder};
    let databases = IntGaugeVec::new(
        Opts::new(
            "backfill_fleet_databases",
            "Databases of the fleet by availability",
        ),
        &["availability"],
    )?;
    let available = IntGaugeVec::new(
        Opts::new(
            "backfill_fleet_database_available",
            "1 while the database is served and answered its last probe, else 0",
        ),
        &["database"],
    )?;
    let ready = IntGaugeVec::new(
        Opts::new(
            "backfill_fleet_database_ready",
            "The database's readiness at its last probe, 1 ready, 0 not; absent when unknown",
        ),
        &["database"],
    )?;
    for (label, which) in [
        ("available", Availability::Available),
        ("unavailable", Availability::Unavailable),
    ] {
        let n = statuses.iter().filter(|s| s.availability == which).count();
        databases
            .with_label_values(&[label])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    for status in statuses {
        let up = status.availability == Availability::Available;
        available
            .with_label_values(&[status.name.as_str()])
            .set(i64::from(up));
        if let Some(r) = status.ready {
            ready
                .with_label_values(&[status.name.as_str()])
                .set(i64::from(r));
        }
    }
    let registry = Registry::new();
    registry.register(Box::new(databases))?;
    registry.register(Box::new(available))?;
    registry.register(Box::new(ready))?;
    TextEncoder::new().encode_to_string(&registry.gather())
}
