//! The admin HTTP API (docs/CONTRACT.md section 9) and its OpenAPI 3 document.
//!
//! A thin projection of [`crate::admin::Admin`]: handlers only read headers
//! and parameters and render results; authorization, audit, idempotency and
//! validation live in the admin layer. There is deliberately no reset,
//! rewind, bound edit, delete, force-complete, release or cancel route
//! (ADM-6).

mod actions;
mod answer;

use crate::admin::{
    ActionResponse, Admin, AuditEntry, AuditPage, BackfillPage, BackfillView, CallerView,
    ConflictBody, Diagnostic, ErrorBody, JournalView, NotificationPage, NotificationView,
    Ownership, PartitionRates, PartitionView, Progress, Readiness, RunChart, RunInterval, Throttle,
    Timeline, TimelineEntry, UndoLink, ValidationResponse, ValidationSummary,
};
use crate::engine::{DryBatch, DryRunError, DryRunReport, Forecast, SampleRow};
#[doc(hidden)]
pub use actions::DryRunQuery;
// The handlers and the path items `#[utoipa::path]` generates for them,
// named without their module so that the document gives them no tag.
use actions::{
    __path_dry_run, __path_journal_prune, __path_pause, __path_resume, __path_retry,
    __path_settings, __path_start, __path_undo, __path_validate, dry_run, journal_prune, pause,
    resume, retry, settings, start, undo, validate,
};
pub(super) use actions::{read_body, SettingsPatch};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
pub(super) use answer::{error, query, render, Meta};
use answer::{render_for, IdPath};
use serde::Deserialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};

/// The OpenAPI document of the admin API, generated from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "backfill admin API",
        description = "Operator boundary of backfill (docs/CONTRACT.md section 9). Every /admin route needs a bearer token with backfill:read (reads) or backfill:operate (actions and dry runs); a dry run's sample of changed rows also needs backfill:inspect. GET /admin/me answers any valid token with the capabilities it holds."
    ),
    paths(
        me, list, detail, start, pause, resume, retry, validate, dry_run, settings, undo,
        journal_prune, timeline, run_chart, audit, notifications, openapi_json
    ),
    components(schemas(
        CallerView, BackfillPage, BackfillView, Progress, Ownership, Diagnostic, ValidationSummary,
        Readiness, ActionResponse, ConflictBody, ErrorBody, ValidationResponse, AuditPage,
        AuditEntry, Throttle, PartitionView, SettingsPatch, UndoLink, JournalView, DryRunReport,
        DryBatch, DryRunError, Forecast, SampleRow, NotificationPage, NotificationView, Timeline,
        TimelineEntry, RunChart, PartitionRates, RunInterval
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// Declares the bearer scheme every `/admin` route needs; the fleet's
/// document uses it too.
pub(super) struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Mount the admin routes and `/openapi.json` into a host's App.
pub fn configure(cfg: &mut web::ServiceConfig, admin: web::Data<Admin>) {
    cfg.app_data(admin);
    routes(cfg);
}

/// The admin routes and `/openapi.json`, over the [`Admin`] found in the
/// app data of the request (the host's, or the database a fleet's prefix
/// names).
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource(
        "/openapi.json",
        web::get().to(openapi_json),
        "GET",
    ))
    .service(resource("/admin/me", web::get().to(me), "GET"))
    .service(resource("/admin/backfills", web::get().to(list), "GET"))
    .service(resource(
        "/admin/backfills/{id}",
        web::get().to(detail),
        "GET",
    ))
    .service(resource(
        "/admin/backfills/{id}/start",
        web::post().to(start),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/pause",
        web::post().to(pause),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/resume",
        web::post().to(resume),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/retry",
        web::post().to(retry),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/validate",
        web::post().to(validate),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/dry-run",
        web::post().to(dry_run),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/settings",
        web::patch().to(settings),
        "PATCH",
    ))
    .service(resource(
        "/admin/backfills/{id}/undo",
        web::post().to(undo),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/journal/prune",
        web::post().to(journal_prune),
        "POST",
    ))
    .service(resource(
        "/admin/backfills/{id}/timeline",
        web::get().to(timeline),
        "GET",
    ))
    .service(resource(
        "/admin/backfills/{id}/progress",
        web::get().to(run_chart),
        "GET",
    ))
    .service(resource("/admin/audit", web::get().to(audit), "GET"))
    .service(resource(
        "/admin/notifications",
        web::get().to(notifications),
        "GET",
    ))
    // Registered last: any other path under /admin gets a JSON error
    // like every other rejection, not an empty body.
    .service(
        web::resource("/admin")
            .wrap(super::headers::security_headers())
            .route(web::route().to(no_route)),
    )
    .service(
        web::resource("/admin/{tail:.*}")
            .wrap(super::headers::security_headers())
            .route(web::route().to(no_route)),
    );
}

/// One known path served by `route`; every other method on it is a 405
/// naming the allowed one (API-2), so a client can tell a wrong method
/// from a path that does not exist. Every answer carries the security
/// headers (AUTH-4), on whatever listener the routes are mounted.
fn resource(
    path: &str,
    route: actix_web::Route,
    allow: &'static str,
) -> impl actix_web::dev::HttpServiceFactory {
    web::resource(path)
        .wrap(super::headers::security_headers())
        .route(route)
        .default_service(web::to(move || method_not_allowed(allow)))
}

async fn method_not_allowed(allow: &'static str) -> HttpResponse {
    HttpResponse::MethodNotAllowed()
        .insert_header((header::ALLOW, allow))
        .json(ErrorBody {
            error: "method_not_allowed".into(),
            message: format!("this path accepts only {allow}"),
            field: None,
            did_you_mean: Vec::new(),
        })
}

/// An admin path that is not a route (ADM-6: there is no reset, delete,
/// force-complete ...). Nothing is read or changed.
async fn no_route() -> HttpResponse {
    HttpResponse::NotFound().json(ErrorBody {
        error: "not_found".into(),
        message: "no admin route for this path".into(),
        field: None,
        did_you_mean: Vec::new(),
    })
}

/// Paging of the backfill list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[doc(hidden)]
pub struct ListQuery {
    /// Return IDs strictly after this one (from `next_after`).
    #[param(pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128)]
    pub after: Option<String>,
    /// Page size, 1..=500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Paging of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[doc(hidden)]
pub struct AuditQuery {
    /// Only records of this backfill.
    #[param(pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128)]
    pub backfill: Option<String>,
    /// Return records strictly before this `seq` (from `next_before`).
    pub before: Option<i64>,
    /// Page size, 1..=500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// List backfills (ADM-2), ordered by ID.
#[utoipa::path(
    get, path = "/admin/backfills", params(ListQuery),
    responses(
        (status = 200, description = "A page of backfills", body = BackfillPage),
        (status = 400, description = "Bad paging parameters, or `after` not a backfill ID", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn list(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: ListQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    render(
        admin
            .list(&meta.as_meta(), q.after.as_deref(), q.limit)
            .await,
    )
}

/// One backfill in detail (ADM-2).
#[utoipa::path(
    get, path = "/admin/backfills/{id}",
    params(("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128)),
    responses(
        (status = 200, description = "The backfill", body = BackfillView),
        (status = 400, description = "Not a backfill ID", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn detail(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    render_for(
        &admin,
        &meta,
        &id.id,
        admin.detail(&meta.as_meta(), &id.id).await,
    )
    .await
}

/// How many timeline entries to return.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[doc(hidden)]
pub struct TimelineQuery {
    /// Entries, 1..=500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// A backfill's timeline (OBS-4), newest first: every claim, state change,
/// retryable error, throttle and explicit validation, recorded with the
/// change itself, and the operator actions that took effect.
#[utoipa::path(
    get, path = "/admin/backfills/{id}/timeline",
    params(("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128), TimelineQuery),
    responses(
        (status = 200, description = "The newest entries", body = Timeline),
        (status = 400, description = "Not a backfill ID, or a bad limit", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn timeline(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: TimelineQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    let result = admin.timeline(&meta.as_meta(), &id.id, q.limit).await;
    render_for(&admin, &meta, &id.id, result).await
}

/// A backfill's run chart (OBS-5): rows/s over the recorded run in equal
/// buckets, in total and per partition, from the progress samples the
/// claim holders record, with the throttled and paused intervals. A
/// bucket no sample pair of a claim covers is `null` (unknown, not zero).
#[utoipa::path(
    get, path = "/admin/backfills/{id}/progress",
    params(("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128)),
    responses(
        (status = 200, description = "The run chart", body = RunChart),
        (status = 400, description = "Not a backfill ID", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn run_chart(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    render_for(
        &admin,
        &meta,
        &id.id,
        admin.run_chart(&meta.as_meta(), &id.id).await,
    )
    .await
}

/// The audit log (AUD-1), newest first.
#[utoipa::path(
    get, path = "/admin/audit", params(AuditQuery),
    responses(
        (status = 200, description = "A page of audit records", body = AuditPage),
        (status = 400, description = "Bad paging parameters, or `backfill` not a backfill ID", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn audit(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: AuditQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    render(
        admin
            .audit(&meta.as_meta(), q.backfill.as_deref(), q.before, q.limit)
            .await,
    )
}

/// Paging of the notification outbox.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[doc(hidden)]
pub struct NotificationQuery {
    /// Only notifications in this status.
    #[param(pattern = r"^(pending|delivered|dead)$")]
    pub status: Option<String>,
    /// Return notifications strictly before this `seq` (from `next_before`).
    pub before: Option<i64>,
    /// Page size, 1..=500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// The webhook notification outbox (NTF-2), newest first: status, tries
/// and last error of each notification; never a URL or a secret (NTF-3).
#[utoipa::path(
    get, path = "/admin/notifications", params(NotificationQuery),
    responses(
        (status = 200, description = "A page of notifications", body = NotificationPage),
        (status = 400, description = "Bad paging parameters or status", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many requests without valid credentials from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
        (status = 503, description = "Database unavailable", body = ErrorBody),
    )
)]
async fn notifications(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: NotificationQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    render(
        admin
            .notifications(&meta.as_meta(), q.status.as_deref(), q.before, q.limit)
            .await,
    )
}

/// The caller: its principal and the capabilities it holds (AUTH-1), so a
/// client offers only what the token may do. Needs a valid token, no
/// capability.
#[utoipa::path(
    get, path = "/admin/me",
    responses(
        (status = 200, description = "The caller", body = CallerView),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many requests without valid credentials from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
async fn me(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    render(admin.me(&meta.as_meta()).await)
}

/// This document.
#[utoipa::path(
    get, path = "/openapi.json", security(()),
    responses((status = 200, description = "The OpenAPI 3 document", content_type = "application/json"))
)]
async fn openapi_json(req: HttpRequest) -> HttpResponse {
    if let Some(refused) = super::host_allowed::refusal(&req, "openapi").await {
        return refused;
    }
    HttpResponse::Ok().json(ApiDoc::openapi())
}
