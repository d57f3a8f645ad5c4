//! The admin HTTP API (docs/CONTRACT.md section 9) and its OpenAPI 3 document.
//!
//! A thin projection of [`crate::admin::Admin`]: handlers only read headers
//! and parameters and render results; authorization, audit, idempotency and
//! validation live in the admin layer. There is deliberately no reset,
//! rewind, bound edit, delete, force-complete, release or cancel route
//! (ADM-6).

use crate::admin::{
    ActionResponse, Admin, AdminError, AuditEntry, AuditPage, BackfillPage, BackfillView,
    CallerView, ConflictBody, Diagnostic, ErrorBody, JournalView, NotificationPage,
    NotificationView, Ownership, PartitionRates, PartitionView, Progress, Readiness, Reply,
    RequestBody, RequestMeta, RunChart, RunInterval, Throttle, Timeline, TimelineEntry, UndoLink,
    ValidationResponse, ValidationSummary, MAX_BODY_BYTES, REASON_HEADER,
};
use crate::engine::{DryBatch, DryRunError, DryRunReport, Forecast, SampleRow};
use crate::lifecycle::Action;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
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

/// The `{id}` of a backfill route, read by name: the routes also serve
/// under a prefix with a parameter of its own (the fleet listener's
/// `/databases/{database}`).
#[derive(Deserialize)]
struct IdPath {
    id: String,
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
        })
}

/// An admin path that is not a route (ADM-6: there is no reset, delete,
/// force-complete ...). Nothing is read or changed.
async fn no_route() -> HttpResponse {
    HttpResponse::NotFound().json(ErrorBody {
        error: "not_found".into(),
        message: "no admin route for this path".into(),
        field: None,
    })
}

/// Headers of one request, owned.
pub(super) struct Meta {
    source: Option<std::net::IpAddr>,
    bearer: Option<String>,
    idempotency_key: Option<String>,
    request_id: String,
    host: Option<String>,
    origin: Option<String>,
    fetch_site: Option<String>,
    reason: Option<String>,
}

impl Meta {
    pub(super) fn from(req: &HttpRequest) -> Self {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let bearer = header(header::AUTHORIZATION.as_str()).and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        });
        Self {
            // The socket peer, not a forwarded-for header a client could
            // choose: the rate of rejections is kept per peer (API-3).
            source: req.peer_addr().map(|a| a.ip()),
            bearer,
            idempotency_key: header("idempotency-key"),
            request_id: header("x-request-id")
                .filter(|r| !r.is_empty() && r.len() <= 200)
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            // The authority the request was sent to: an absolute-form
            // target's, else the Host header (RFC 9112, 3.2.2). Never a
            // forwarded-host header, which any client may set.
            host: req
                .uri()
                .authority()
                .map(|a| a.as_str().to_string())
                .or_else(|| header(header::HOST.as_str())),
            origin: header(header::ORIGIN.as_str()),
            fetch_site: header("sec-fetch-site"),
            // Its bytes as they came, so that a header that is not ASCII
            // is refused by name rather than ignored.
            reason: req
                .headers()
                .get(REASON_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        }
    }

    pub(super) fn as_meta(&self) -> RequestMeta<'_> {
        RequestMeta {
            bearer: self.bearer.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            request_id: Some(&self.request_id),
            source: self.source,
            host: self.host.as_deref(),
            origin: self.origin.as_deref(),
            fetch_site: self.fetch_site.as_deref(),
            reason: self.reason.as_deref(),
        }
    }
}

pub(super) fn error(e: &AdminError) -> HttpResponse {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    match e {
        AdminError::Unauthorized => {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        AdminError::TooManyRequests(seconds) => {
            response.insert_header((header::RETRY_AFTER, seconds.to_string()));
        }
        AdminError::UnsupportedMediaType => {
            // RFC 5789: a 415 to a PATCH names the patch types accepted.
            response.insert_header((ACCEPT_PATCH, ACCEPTED_PATCH_TYPES));
        }
        _ => {}
    }
    response.json(e.body())
}

pub(super) fn render<T: serde::Serialize>(result: Result<T, AdminError>) -> HttpResponse {
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(e) => error(&e),
    }
}

fn reply(result: Result<Reply, AdminError>) -> HttpResponse {
    match result {
        Ok(Reply { status, body }) => {
            HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK)).json(body)
        }
        Err(e) => error(&e),
    }
}

pub(super) fn query<T: for<'de> Deserialize<'de>>(req: &HttpRequest) -> Result<T, AdminError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|_| AdminError::BadRequest("malformed query parameters".into()))
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
    render(admin.detail(&meta.as_meta(), &id.id).await)
}

async fn act(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
    action: Action,
) -> HttpResponse {
    let meta = Meta::from(&req);
    reply(admin.act(&meta.as_meta(), &id.id, action).await)
}

/// `start`: capture the bound and enter `running` (docs/CONTRACT.md section 3).
#[utoipa::path(
    post, path = "/admin/backfills/{id}/start",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "Applied or already converged", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "Not allowed from the current state (ADM-5), or no local definition", body = ConflictBody),
        (status = 422, description = "`idempotency_key_reused`: the key answered another action or backfill; or `invalid_split`: the definition's split points were refused (PAR-1), nothing written", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn start(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    act(req, id, admin, Action::Start).await
}

/// `pause`: enter `paused`, advance the generation, drop the claim.
#[utoipa::path(
    post, path = "/admin/backfills/{id}/pause",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "Applied or already converged", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "Not allowed from the current state (ADM-5)", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn pause(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    act(req, id, admin, Action::Pause).await
}

/// `resume`: from `paused` back to `running` (or `validating`).
#[utoipa::path(
    post, path = "/admin/backfills/{id}/resume",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "Applied or already converged", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "`conflict`: not allowed from the current state (ADM-5); `undone`: the backfill has an undo and does not run again (UNDO-2)", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn resume(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    act(req, id, admin, Action::Resume).await
}

/// `retry`: from `blocked`/`failed` back to `running` at the same bound and
/// checkpoint (RT-3).
#[utoipa::path(
    post, path = "/admin/backfills/{id}/retry",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "Applied or already converged", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "`conflict`: not allowed from the current state (ADM-5); `undone`: the backfill has an undo and does not run again (UNDO-2)", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn retry(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    act(req, id, admin, Action::Retry).await
}

/// Explicit validation (VAL-4..7): exactly one of `success`, `failure`,
/// `current-state`. Read-only; one per ID at a time.
#[utoipa::path(
    post, path = "/admin/backfills/{id}/validate",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; a retry recovers its outcome (VAL-6): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "The validation outcome", body = ValidationResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn validate(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    act(req, id, admin, Action::Validate).await
}

/// `undo`: start the reverse backfill of a journaled backfill (UNDO-2). It
/// restores the journaled columns of every row that still holds what the
/// repair wrote; a row changed since is left alone and counted as a
/// conflict. The original's row does not change.
#[utoipa::path(
    post, path = "/admin/backfills/{id}/undo",
    params(
        ("id" = String, Path, description = "Stable ID of the backfill to undo", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "`applied`: the undo was created and started; `converged`: the backfill already has its undo (one per backfill). `backfill` is the undo's view, `prior_state` the original's state", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many requests without valid credentials from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "`conflict`: not from the current state (only completed, paused, failed or blocked); `not_journaled`: its repair keeps no journal; `undo_of_undo`: it is itself an undo; `no_definition`: this server has no definition for it", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn undo(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    reply(admin.undo(&meta.as_meta(), &id.id).await)
}

/// `journal prune`: delete the before-image journal of a backfill (UNDO-4).
/// Afterwards the backfill can no longer be undone.
#[utoipa::path(
    post, path = "/admin/backfills/{id}/journal/prune",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "`applied`: the journal was deleted (the count is in the audit detail)", body = ActionResponse),
        (status = 400, description = "Not a backfill ID, or a missing or malformed Idempotency-Key, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many requests without valid credentials from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "`journal_in_use`: the backfill runs (it may still write the journal) or an undo of it has not completed", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn journal_prune(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    reply(admin.journal_prune(&meta.as_meta(), &id.id).await)
}

/// The options of a dry run.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[doc(hidden)]
pub struct DryRunQuery {
    /// Batches to run, 1..=20 (default 3).
    #[param(minimum = 1, maximum = 20)]
    pub batches: Option<i64>,
    /// Changed rows to show with their values, 0..=50 (default 5); only
    /// for a principal holding backfill:inspect.
    #[param(minimum = 0, maximum = 50)]
    pub sample: Option<i64>,
}

/// Dry run (DRY-1..4): run up to `batches` batches of a pending or paused
/// backfill exactly as the real run would, inside a transaction that is
/// rolled back, and report per batch and a forecast for the remaining
/// range. Changes nothing; audited as `dry_run`. Needs no Idempotency-Key.
#[utoipa::path(
    post, path = "/admin/backfills/{id}/dry-run",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        DryRunQuery,
    ),
    responses(
        (status = 200, description = "The report; a batch that failed is part of it (`error`), and nothing changed", body = DryRunReport),
        (status = 400, description = "Not a backfill ID, or malformed query parameters", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many requests without valid credentials from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "Neither pending nor paused (the message names the state), or no local definition", body = ConflictBody),
        (status = 422, description = "`out_of_range`: `batches` or `sample` outside its limits; `field` names it", body = ErrorBody),
        (status = 500, description = "Server error; nothing changed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing changed", body = ErrorBody),
    )
)]
async fn dry_run(req: HttpRequest, id: web::Path<IdPath>, admin: web::Data<Admin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: DryRunQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    reply(
        admin
            .dry_run(&meta.as_meta(), &id.id, q.batches, q.sample)
            .await,
    )
}

/// `Accept-Patch` (RFC 5789), which actix does not name.
const ACCEPT_PATCH: &str = "accept-patch";
/// The media types a settings change is accepted as.
const ACCEPTED_PATCH_TYPES: &str = "application/merge-patch+json, application/json";

/// A settings change (THR-4) as a JSON merge patch: each field named sets
/// it (an integer within its range) or clears it (`null`); fields not
/// named keep their value. The schema is generated from
/// [`crate::throttle::settings::Field`], so it lists exactly the fields and ranges
/// the server checks.
#[doc(hidden)]
pub struct SettingsPatch;

impl utoipa::PartialSchema for SettingsPatch {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::admin::view::settings_object(true)
            .min_properties(Some(1))
            .description(Some(
                "A JSON merge patch of live settings: an integer within the field's range sets \
                 it, null clears it (the definition's or the process's default applies), a \
                 field not named keeps its value. batch_size and target_batch_ms exclude each \
                 other; min_batch_size must not exceed max_batch_size; target_batch_ms must be \
                 below the server's batch statement timeout.",
            ))
            .build()
            .into()
    }
}

impl utoipa::ToSchema for SettingsPatch {}

/// Read a request body, at most [`MAX_BODY_BYTES`] of it.
pub(super) async fn read_body(
    mut payload: web::Payload,
) -> Result<web::BytesMut, RequestBody<'static>> {
    use futures_util::StreamExt;
    let mut bytes = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| RequestBody::Unreadable)?;
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(RequestBody::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Change live settings (THR-4): a JSON merge patch; each process applies
/// the result at its next batch, without a restart.
#[utoipa::path(
    patch, path = "/admin/backfills/{id}/settings",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Idempotency-Key" = String, Header, description = "One logical request; retries with the same change replay its response (ADM-4): 1 to 200 printable ASCII characters without spaces", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with the audit row and shown in the audit and the timeline: at most 2000 printable ASCII characters, in which %XX sequences spelling UTF-8 are decoded (text that does not decode is kept as written; control and invisible formatting characters are stored escaped); other characters: 400", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    request_body(
        description = "The change: fields to set or clear",
        content(
            (SettingsPatch = "application/merge-patch+json"),
            (SettingsPatch = "application/json"),
        ),
    ),
    responses(
        (status = 200, description = "Applied; the backfill with its settings", body = BackfillView),
        (status = 400, description = "Not a backfill ID, a missing or malformed Idempotency-Key, a Backfill-Reason that is not printable ASCII or too long, or a body that is not JSON", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "Too many refused requests without an authenticated principal from this source (API-3)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds to wait"))),
        (status = 403, description = "`forbidden`: lacks backfill:operate; or `cross_site`: the Origin or Sec-Fetch-Site names another site (AUTH-3)", body = ErrorBody),
        (status = 421, description = "`misdirected_request`: in trusted-network mode, a Host outside the allow-list (AUTH-3)", body = ErrorBody),
        (status = 404, description = "No such backfill", body = ErrorBody),
        (status = 409, description = "The backfill is completed: its settings no longer change (ADM-5)", body = ConflictBody),
        (status = 413, description = "The body is larger than 16384 bytes", body = ErrorBody),
        (status = 415, description = "The body is not application/json or application/merge-patch+json", body = ErrorBody,
            headers(("Accept-Patch" = String, description = "The media types accepted"))),
        (status = 422, description = "`invalid_settings`: the change is refused (an unknown field, a value out of range, contradicting settings, not an object); `field` names the setting when it is about one; nothing changed. Or `idempotency_key_reused`: the key answered another request", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
async fn settings(
    req: HttpRequest,
    id: web::Path<IdPath>,
    payload: web::Payload,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let read = read_body(payload).await;
    let body = match &read {
        Ok(bytes) => RequestBody::Complete {
            content_type,
            bytes,
        },
        Err(problem) => *problem,
    };
    reply(admin.update_settings(&meta.as_meta(), &id.id, body).await)
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
    render(admin.timeline(&meta.as_meta(), &id.id, q.limit).await)
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
    render(admin.run_chart(&meta.as_meta(), &id.id).await)
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
async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}
