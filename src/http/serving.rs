//! The serving boundary's health endpoints: `/livez` (the process runs)
//! and `/readyz` (docs/CONTRACT.md section 8: 503 with the gating IDs until every
//! required backfill is `completed` in automatic mode).

use crate::readiness::Readiness;
use actix_web::{web, HttpResponse};

async fn livez() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"live": true}))
}

async fn readyz(readiness: web::Data<Readiness>) -> HttpResponse {
    let report = readiness.evaluate().await;
    if report.ready {
        HttpResponse::Ok().json(report)
    } else {
        HttpResponse::ServiceUnavailable().json(report)
    }
}

/// Mount `/livez` and `/readyz`.
pub fn configure(cfg: &mut web::ServiceConfig, readiness: web::Data<Readiness>) {
    cfg.app_data(readiness)
        .route("/livez", web::get().to(livez))
        .route("/readyz", web::get().to(readyz));
}
