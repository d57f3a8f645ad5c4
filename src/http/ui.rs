//! The admin web client's static assets at `/ui` (ADM-1). The page holds
//! no data and no secrets; everything it shows comes from the authorized
//! admin API with the operator's token, kept in the browser session.

use actix_web::{web, HttpResponse};

const INDEX: &str = include_str!("ui/index.html");
const APP: &str = include_str!("ui/app.js");

async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(INDEX)
}

async fn app() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(APP)
}

/// Mount `/ui` and `/ui/app.js`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/ui", web::get().to(index))
        .route("/ui/", web::get().to(index))
        .route("/ui/app.js", web::get().to(app));
}
