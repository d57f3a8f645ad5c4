//! What every admin handler shares: the request's headers as the admin
//! layer reads them, the path's backfill ID, and how a result or an error
//! becomes a response (status, headers, JSON body).

use crate::admin::{Admin, AdminError, Reply, RequestMeta, MAX_KEY_BYTES, REASON_HEADER};
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

/// The `{id}` of a backfill route, read by name: the routes also serve
/// under a prefix with a parameter of its own (the fleet listener's
/// `/databases/{database}`).
#[derive(Deserialize)]
pub(crate) struct IdPath {
    pub(crate) id: String,
}

/// `Accept-Patch` (RFC 5789), which actix does not name.
pub(crate) const ACCEPT_PATCH: &str = "accept-patch";
/// The media types a settings change is accepted as.
pub(crate) const ACCEPTED_PATCH_TYPES: &str = "application/merge-patch+json, application/json";

/// Headers of one request, owned.
pub(crate) struct Meta {
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
    pub(crate) fn from(req: &HttpRequest) -> Self {
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
                .filter(|r| !r.is_empty() && r.len() <= MAX_KEY_BYTES)
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

    pub(crate) fn as_meta(&self) -> RequestMeta<'_> {
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

pub(crate) fn error(e: &AdminError) -> HttpResponse {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    match e {
        AdminError::Unauthorized { .. } => {
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

pub(crate) fn render<T: serde::Serialize>(result: Result<T, AdminError>) -> HttpResponse {
    match result {
        Ok(body) => HttpResponse::Ok().json(body),
        Err(e) => error(&e),
    }
}

pub(crate) fn reply(result: Result<Reply, AdminError>) -> HttpResponse {
    match result {
        Ok(Reply { status, body }) => {
            HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK)).json(body)
        }
        Err(e) => error(&e),
    }
}

/// [`render`] for a route of backfill `id`: a 404 of an unknown ID gets
/// the nearest known IDs in `did_you_mean` (for a caller who may read).
pub(crate) async fn render_for<T: serde::Serialize>(
    admin: &Admin,
    meta: &Meta,
    id: &str,
    result: Result<T, AdminError>,
) -> HttpResponse {
    match result {
        Err(e) => error(&admin.with_suggestions(&meta.as_meta(), id, e).await),
        ok => render(ok),
    }
}

/// [`reply`] for a route of backfill `id`, its 404 as [`render_for`]'s.
pub(crate) async fn reply_for(
    admin: &Admin,
    meta: &Meta,
    id: &str,
    result: Result<Reply, AdminError>,
) -> HttpResponse {
    match result {
        Err(e) => error(&admin.with_suggestions(&meta.as_meta(), id, e).await),
        ok => reply(ok),
    }
}

pub(crate) fn query<T: for<'de> Deserialize<'de>>(req: &HttpRequest) -> Result<T, AdminError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|_| AdminError::BadRequest("malformed query parameters".into()))
}
