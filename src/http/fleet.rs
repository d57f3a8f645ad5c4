//! The fleet's HTTP boundary (FLT-6): one view of every database's
//! backfills, the aggregates, actions on one database or on all, and
//! readiness of the fleet or of one database.
//!
//! A thin projection of [`FleetAdmin`], as `admin.rs` is of one
//! database's admin service: each database authorizes, audits and answers
//! for itself; this layer only reads parameters and renders.

use super::admin::{error, query, render, Meta};
use crate::admin::{AdminError, FleetAdmin};
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
    /// /admin/fleet/backfills/{id}/{action}` and `GET /readyz`, `GET
    /// /livez`.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.app_data(self.admin.clone())
            .route("/admin/fleet", web::get().to(overview))
            .route("/admin/fleet/backfills", web::get().to(backfills))
            .route("/admin/fleet/backfills/{id}/{action}", web::post().to(act))
            .route("/readyz", web::get().to(readyz))
            .route("/livez", web::get().to(livez));
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
