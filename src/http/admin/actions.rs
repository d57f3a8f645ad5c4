//! The admin API's state-changing routes: the lifecycle actions (start,
//! pause, resume, retry), explicit validation, undo and the journal's
//! pruning, dry runs and live settings. Each reads its headers and
//! parameters and hands them to the admin layer, which authorizes, audits
//! and answers.

use super::answer::{error, query, reply_for, IdPath, Meta};
use crate::admin::{
    ActionResponse, Admin, BackfillView, ConflictBody, ErrorBody, RequestBody, ValidationResponse,
    MAX_BODY_BYTES,
};
use crate::engine::DryRunReport;
use crate::lifecycle::Action;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use utoipa::IntoParams;

pub(super) async fn act(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
    action: Action,
) -> HttpResponse {
    let meta = Meta::from(&req);
    reply_for(
        &admin,
        &meta,
        &id.id,
        admin.act(&meta.as_meta(), &id.id, action).await,
    )
    .await
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
pub(super) async fn start(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
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
pub(super) async fn pause(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
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
pub(super) async fn resume(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
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
pub(super) async fn retry(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
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
pub(super) async fn validate(
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
pub(super) async fn undo(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    reply_for(
        &admin,
        &meta,
        &id.id,
        admin.undo(&meta.as_meta(), &id.id).await,
    )
    .await
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
        (status = 409, description = "`journal_in_use`: the backfill runs (it may still write the journal) or an undo of it has not completed; `not_journaled`: its repair keeps no journal, so there is none to delete", body = ConflictBody),
        (status = 422, description = "Idempotency-Key reused for another action or backfill", body = ErrorBody),
        (status = 500, description = "Server error; nothing committed", body = ErrorBody),
        (status = 503, description = "Database unavailable; nothing committed", body = ErrorBody),
    )
)]
pub(super) async fn journal_prune(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    reply_for(
        &admin,
        &meta,
        &id.id,
        admin.journal_prune(&meta.as_meta(), &id.id).await,
    )
    .await
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
pub(super) async fn dry_run(
    req: HttpRequest,
    id: web::Path<IdPath>,
    admin: web::Data<Admin>,
) -> HttpResponse {
    let meta = Meta::from(&req);
    let q: DryRunQuery = match query(&req) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    let result = admin
        .dry_run(&meta.as_meta(), &id.id, q.batches, q.sample)
        .await;
    reply_for(&admin, &meta, &id.id, result).await
}

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
pub(crate) async fn read_body(
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
pub(super) async fn settings(
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
    let result = admin.update_settings(&meta.as_meta(), &id.id, body).await;
    reply_for(&admin, &meta, &id.id, result).await
}
