//! The admin web client's static assets at `/ui` (ADM-1). The page holds
//! no data and no secrets; everything it shows comes from the authorized
//! admin API with the operator's token, kept in the browser session.

use actix_web::{web, HttpRequest, HttpResponse};

const INDEX: &str = include_str!("ui/index.html");
const APP: &str = include_str!("ui/app.js");

async fn index(req: HttpRequest) -> HttpResponse {
    if let Some(refused) = super::host_allowed::refusal(&req, "ui").await {
        return refused;
    }
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(INDEX)
}

async fn app(req: HttpRequest) -> HttpResponse {
    if let Some(refused) = super::host_allowed::refusal(&req, "ui").await {
        return refused;
    }
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(APP)
}

/// Mount `/ui` and `/ui/app.js`, with the security headers (AUTH-4).
pub fn configure(cfg: &mut web::ServiceConfig) {
    for (path, handler) in [("/ui", true), ("/ui/", true), ("/ui/app.js", false)] {
        let resource = web::resource(path).wrap(super::headers::security_headers());
        cfg.service(if handler {
            resource.route(web::get().to(index))
        } else {
            resource.route(web::get().to(app))
        });
    }
}
