//! The fleet's HTTP boundary (FLT-6): one view of every database's
//! backfills, the aggregates, actions on one database or on all, and
//! readiness of the fleet or of one database.
//!
//! A thin projection of [`FleetAdmin`], as `admin.rs` is of one
//! database's admin service: each database authorizes, audits and answers
//! for itself; this layer only reads parameters and renders.

use super::admin::{error, query, read_body, render, BearerAuth, Meta, SettingsPatch};
use crate::admin::{
    AdminError, Availability, BackfillView, CallerView, DatabaseReply, DatabaseStatus,
    DatabaseSummary, Diagnostic, ErrorBody, FleetAdmin, FleetBackfill, FleetBackfills,
    FleetOverview, FleetReadiness, FleetReply, FleetTotals, JournalView, Ownership, PartitionRates,
    PartitionView, Progress, RequestBody, Rollout, StateCounts, Throttle, UndoLink,
    ValidationSummary,
};
use crate::lifecycle::Action;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use std::rc::Rc;
use utoipa::OpenApi;

/// The OpenAPI document of the fleet listener, generated from its
/// handlers. Each database's own routes are in the admin API's document;
/// these routes fan out to them.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "backfill fleet API",
        description = "One view of a fleet of databases (docs/CONTRACT.md FLT-6). The /admin/fleet routes need a bearer token of the databases' own authentication: backfill:read for reads, backfill:operate for actions, settings changes and rollout caps. Each database authorizes, audits and answers an action for itself. Every database's own admin API (its detail, timeline, audit, dry run, undo and settings routes, and its /openapi.json) is served unchanged under /databases/{database}: a caller unknown to the databases' authentication gets 401, an unknown database 404, one that is not served 503."
    ),
    paths(overview, me, backfills, act, settings, rollout, readyz, livez, openapi_json),
    components(schemas(
        FleetOverview, DatabaseSummary, DatabaseStatus, Availability, StateCounts, FleetTotals,
        FleetBackfills, FleetBackfill, BackfillView, Progress, Ownership, Diagnostic,
        ValidationSummary, Throttle, PartitionView, UndoLink, JournalView, PartitionRates,
        FleetReply, DatabaseReply, Rollout, FleetReadiness, ErrorBody, SettingsPatch, CallerView
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct FleetApiDoc;

/// The database a fleet request is limited to, if any.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct DatabaseQuery {
    /// One database of the fleet, by the name the host gave it; absent:
    /// every database. An unknown name is a 404.
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

    /// Mount `GET /admin/fleet`, `GET /admin/fleet/me`, `GET
    /// /admin/fleet/backfills`, `POST
    /// /admin/fleet/backfills/{id}/{action}`, `PATCH
    /// /admin/fleet/backfills/{id}/settings`, `PUT
    /// /admin/fleet/rollout/{id}`, `GET /readyz`, `GET /livez`, `GET
    /// /metrics`, `GET /openapi.json`, and under `/databases/{database}`
    /// every route of that database's own admin API.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.app_data(self.admin.clone())
            .route("/openapi.json", web::get().to(openapi_json))
            .route("/admin/fleet", web::get().to(overview))
            .route("/admin/fleet/me", web::get().to(me))
            .route("/admin/fleet/backfills", web::get().to(backfills))
            .route(
                "/admin/fleet/backfills/{id}/settings",
                web::patch().to(settings),
            )
            .route("/admin/fleet/backfills/{id}/{action}", web::post().to(act))
            .route("/admin/fleet/rollout/{id}", web::put().to(rollout))
            .route("/readyz", web::get().to(readyz))
            .route("/livez", web::get().to(livez))
            .route("/metrics", web::get().to(metrics))
            .service(
                web::scope("/databases/{database}")
                    .wrap(from_fn(database_admin))
                    .wrap(super::headers::security_headers())
                    .configure(super::admin::routes),
            );
    }
}

/// Answer a request under `/databases/{database}` with that database's
/// own admin API (FLT-6): its admin service becomes the request's app
/// data, so every route of the admin API (detail, timeline, audit, dry
/// run, undo, settings ...) is served unchanged, each database
/// authorizing, auditing and answering for itself. An unknown caller is
/// a 401, an unknown database a 404, one that is not served a 503.
async fn database_admin(
    mut req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let name = req
        .match_info()
        .get("database")
        .unwrap_or_default()
        .to_string();
    let member = match req.app_data::<web::Data<FleetAdmin>>() {
        Some(fleet) => {
            let meta = Meta::from(req.request());
            fleet.member(meta.as_meta().bearer, &name)
        }
        None => Err(AdminError::Internal(
            "the fleet's routes are not mounted".into(),
        )),
    };
    match member {
        Ok(admin) => {
            let mut data = Extensions::new();
            data.insert(web::Data::new(admin));
            req.add_data_container(Rc::new(data));
            Ok(next.call(req).await?.map_into_left_body())
        }
        Err(e) => Ok(req.into_response(error(&e)).map_into_right_body()),
    }
}

/// The database named by `?database=`, refusing malformed parameters.
fn database(req: &HttpRequest) -> Result<Option<String>, AdminError> {
    let q: DatabaseQuery = query(req)?;
    Ok(q.database)
}

/// Every database with its backfills by state, rows/s and ETA, and the
/// fleet's totals (FLT-6). A database that is unavailable is listed with
/// its reason and zero counts; one that answered its probe but not this
/// read carries an `error`.
#[utoipa::path(
    get, path = "/admin/fleet",
    responses(
        (status = 200, description = "Every database and the totals", body = FleetOverview),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
async fn overview(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let meta = Meta::from(&req);
    render(admin.overview(&meta.as_meta()).await)
}

/// The caller's principal and capabilities in the fleet's databases, for
/// any token they know (FLT-6): a client offers only the actions the
/// token may take.
#[utoipa::path(
    get, path = "/admin/fleet/me",
    responses(
        (status = 200, description = "The caller", body = CallerView),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
    )
)]
async fn me(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let meta = Meta::from(&req);
    render(admin.me(&meta.as_meta()))
}

/// The backfills of every database, or of one, each with its database;
/// the databases that could not be read are named with why (FLT-6).
#[utoipa::path(
    get, path = "/admin/fleet/backfills", params(DatabaseQuery),
    responses(
        (status = 200, description = "Backfills by database, then ID (at most 500 per database), and the unavailable databases", body = FleetBackfills),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "Lacks backfill:read", body = ErrorBody),
        (status = 404, description = "`unknown_database`: no database of that name", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
async fn backfills(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let meta = Meta::from(&req);
    let database = match database(&req) {
        Ok(database) => database,
        Err(e) => return error(&e),
    };
    render(admin.backfills(&meta.as_meta(), database.as_deref()).await)
}

/// An action on backfill `id` in every database, or in one: one request
/// to each database's own admin service, which authorizes, audits and
/// answers it there with the same Idempotency-Key, so a retry replays
/// every answer (FLT-6, ADM-4). Each database's status and body are in
/// `results`; a database that is unavailable answers 503 and is never
/// skipped.
#[utoipa::path(
    post, path = "/admin/fleet/backfills/{id}/{action}",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("action" = String, Path, description = "start, pause, resume, retry or validate", pattern = "^(start|pause|resume|retry|validate)$"),
        DatabaseQuery,
        ("Idempotency-Key" = String, Header, description = "One logical request, passed to each database; retries replay its answers (ADM-4). A missing or malformed key is each database's 400 in `results`", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator acts, stored with each database's audit row", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    responses(
        (status = 200, description = "Each database's answer, by name", body = FleetReply),
        (status = 400, description = "Not one of the actions, or a malformed query", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 404, description = "`unknown_database`: no database of that name", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
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

/// A live settings change (THR-4) of backfill `id` in every database, or
/// in one: the same JSON merge patch and Idempotency-Key sent to each
/// database's own admin service, which applies, audits and answers it
/// there (or refuses it: 422 naming the field, 409 when completed), so a
/// retry replays every answer. Each database's status and body are in
/// `results`; a database that is unavailable answers 503 and is never
/// skipped.
#[utoipa::path(
    patch, path = "/admin/fleet/backfills/{id}/settings",
    params(
        ("id" = String, Path, description = "Stable ID", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        DatabaseQuery,
        ("Idempotency-Key" = String, Header, description = "One logical request, passed to each database; retries replay its answers (ADM-4). A missing or malformed key is each database's 400 in `results`", pattern = r"^[!-~]{1,200}$", min_length = 1, max_length = 200),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator changes the settings, stored with each database's audit row", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    request_body(
        description = "A JSON merge patch of live settings, as each database's own settings route takes it",
        content(
            (SettingsPatch = "application/merge-patch+json"),
            (SettingsPatch = "application/json"),
        ),
    ),
    responses(
        (status = 200, description = "Each database's answer, by name: 200 with the backfill, or its refusal", body = FleetReply),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 404, description = "`unknown_database`: no database of that name", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
async fn settings(
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
    admin: web::Data<FleetAdmin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    let database = match database(&req) {
        Ok(database) => database,
        Err(e) => return error(&e),
    };
    let content_type = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let read = read_body(payload).await;
    let body = match &read {
        Ok(bytes) => RequestBody::Complete {
            content_type,
            bytes,
        },
        Err(problem) => *problem,
    };
    render(
        admin
            .update_settings(&meta.as_meta(), database.as_deref(), &id, body)
            .await,
    )
}

/// Cap how many databases run repair `id` at once (FLT-2), or lift the
/// cap with `null`. The cap belongs to this process and applies to its
/// next claims; every database that is served records the change in its
/// own audit log (action `rollout`), and the answer names those that
/// could not.
#[utoipa::path(
    put, path = "/admin/fleet/rollout/{id}",
    params(
        ("id" = String, Path, description = "Stable ID of a repair", pattern = r"^[a-z0-9._-]{1,128}$", min_length = 1, max_length = 128),
        ("Backfill-Reason" = Option<String>, Header, description = "Why the operator changes the cap, stored with each database's audit row", pattern = r"^[ -~]{0,2000}$", max_length = 2000),
    ),
    request_body(content = Rollout, description = "`{\"max_databases\": N}` with N at least 1, or `null` for no cap"),
    responses(
        (status = 200, description = "The cap now in force, and which databases audited the change", body = Rollout),
        (status = 400, description = "A body that is not the JSON above, a cap of 0, not a stable ID, or a Backfill-Reason that is not printable ASCII or too long", body = ErrorBody),
        (status = 401, description = "No or unknown bearer token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "Lacks backfill:operate", body = ErrorBody),
        (status = 500, description = "Server error", body = ErrorBody),
    )
)]
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
    render(
        admin
            .set_rollout(&meta.as_meta(), &id, wanted.max_databases)
            .await,
    )
}

/// Readiness of the fleet, or of one database, as of the last probe:
/// 200 when every database in question is available and ready, else 503
/// naming those that keep it closed. Needs no token.
#[utoipa::path(
    get, path = "/readyz", params(DatabaseQuery), security(()),
    responses(
        (status = 200, description = "Ready", body = FleetReadiness),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 404, description = "`unknown_database`: no database of that name", body = ErrorBody),
        (status = 503, description = "Not ready: the databases that keep it closed", body = FleetReadiness),
    )
)]
async fn readyz(req: HttpRequest, admin: web::Data<FleetAdmin>) -> HttpResponse {
    let readiness = database(&req).and_then(|database| admin.readiness(database.as_deref()));
    match readiness {
        Ok(report) if report.ready => HttpResponse::Ok().json(report),
        Ok(report) => HttpResponse::ServiceUnavailable().json(report),
        Err(e) => error(&e),
    }
}

/// The process answers. Needs no token.
#[utoipa::path(
    get, path = "/livez", security(()),
    responses((status = 200, description = "`{\"live\": true}`", content_type = "application/json"))
)]
async fn livez() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"live": true}))
}

/// This document.
#[utoipa::path(
    get, path = "/openapi.json", security(()),
    responses((status = 200, description = "The OpenAPI 3 document", content_type = "application/json"))
)]
async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(FleetApiDoc::openapi())
}

/// `GET /metrics`: each database's availability and readiness as of the
/// last probe (FLT-1), in the Prometheus text format. The `database`
/// label is a name from the host's own list, so its values are as many
/// as the fleet has databases. Every database's own families are on its
/// single-database listener, not here.
async fn metrics(admin: web::Data<FleetAdmin>) -> HttpResponse {
    let running = admin.running_progress().await;
    match fleet_exposition(&admin.statuses(), &running) {
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

fn fleet_exposition(
    statuses: &[DatabaseStatus],
    running: &[(String, Vec<crate::store::RunningProgress>)],
) -> prometheus::Result<String> {
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
    // Each database's running backfills, as a single database's listener
    // exports them, with the database named: the per-backfill stall
    // alert then fires per database too (OBS-3).
    let rows = IntGaugeVec::new(
        Opts::new(
            "backfill_running_rows_done",
            "Rows a running backfill's committed batches changed so far, per database and backfill.",
        ),
        &["database", "backfill"],
    )?;
    let throttled = IntGaugeVec::new(
        Opts::new(
            "backfill_running_throttled",
            "Whether a throttle condition holds a running backfill back now (1) or not (0).",
        ),
        &["database", "backfill"],
    )?;
    for (database, backfills) in running {
        for b in backfills {
            let labels = [database.as_str(), b.id.as_str()];
            rows.with_label_values(&labels).set(b.rows_done);
            throttled
                .with_label_values(&labels)
                .set(i64::from(b.throttled));
        }
    }
    let registry = Registry::new();
    registry.register(Box::new(databases))?;
    registry.register(Box::new(available))?;
    registry.register(Box::new(ready))?;
    registry.register(Box::new(rows))?;
    registry.register(Box::new(throttled))?;
    TextEncoder::new().encode_to_string(&registry.gather())
}
