//! The admin layer's errors: what a caller is told (status, code, JSON
//! body) and what rolls an admin transaction back.

use super::auth::Capability;
use super::request::MAX_BODY_BYTES;
use super::view::ErrorBody;
use crate::engine::EngineError;
use crate::repair::bounded;
use crate::store::{self, StoreError};
use crate::throttle::settings::SettingsError;

/// Errors of the admin layer. Every message is bounded and redacted (AUD-2).
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// 401: no bearer token, or one that matches no principal (AUTH-1).
    /// The message tells the two apart (never echoing the token) and
    /// says how a token is passed, since "unauthorized" alone leaves an
    /// operator guessing whether the token was lost or is wrong.
    #[error(
        "{}",
        if *token_sent {
            "the bearer token sent matches no principal: check it (it goes in the header \
             `Authorization: Bearer <token>`; backfill ctl reads it from BACKFILL_TOKEN or \
             --token-file)"
        } else {
            "no bearer token was sent: a backfill capability is required (send the header \
             `Authorization: Bearer <token>`; backfill ctl reads it from BACKFILL_TOKEN or \
             --token-file)"
        }
    )]
    Unauthorized {
        /// Whether the request carried a bearer token at all.
        token_sent: bool,
    },
    /// 403: the principal lacks the capability the request needs (AUTH-1).
    #[error("the principal lacks the {} capability", .0.as_str())]
    Forbidden(Capability),
    /// AUTH-3: a state-changing request whose `Origin` or `Sec-Fetch-Site`
    /// says it comes from another site.
    #[error("a state-changing request from another site is refused")]
    CrossSite,
    /// AUTH-3: in trusted-network mode, a `Host` outside the allow-list
    /// (what a DNS-rebinding page sends).
    #[error("this server does not answer for the Host named in the request")]
    Misdirected,
    /// 400: a malformed request; the message says what is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// 404: no backfill has this ID. At the HTTP boundary a caller who
    /// may read the list is told the nearest IDs (a typo's likely
    /// intent); empty otherwise, and wherever nothing was looked up.
    #[error("no backfill with this ID")]
    NotFound {
        /// Up to [`MAX_SUGGESTIONS`](super::suggest::MAX_SUGGESTIONS)
        /// known IDs nearest the one asked for.
        did_you_mean: Vec<String>,
    },
    /// 422: the idempotency key was already used for another action,
    /// backfill or body (ADM-4).
    #[error("this Idempotency-Key was already used for a different request")]
    KeyReused,
    /// A settings change that is refused (THR-4); nothing changed.
    #[error("{0}")]
    InvalidSettings(SettingsError),
    /// 415: a request body that is neither `application/json` nor
    /// `application/merge-patch+json`.
    #[error("the body must be application/json or application/merge-patch+json")]
    UnsupportedMediaType,
    /// 413: a request body longer than `MAX_BODY_BYTES`.
    #[error("the body is larger than {} bytes", MAX_BODY_BYTES)]
    PayloadTooLarge,
    /// 409: this server holds no definition for the backfill (REG-4).
    #[error("this server has no definition for the backfill")]
    NoDefinition,
    /// A request option outside its limits; the message names the limit.
    #[error("{message}")]
    OutOfRange {
        /// The request option that is out of range (reported as the body's
        /// `field`).
        field: &'static str,
        /// What the limit is, in words.
        message: String,
    },
    /// The definition's split points were refused at `start` (PAR-1): a
    /// defect of the deployed repair, not of the request. The start
    /// rolled back; nothing was written.
    #[error("{0}")]
    InvalidSplit(String),
    /// API-3: too many rejected requests from this source; retry after
    /// this many seconds.
    #[error("too many rejected requests from this source; retry later")]
    TooManyRequests(u64),
    /// 404: a fleet request names a database the fleet does not have
    /// (FLT-6).
    #[error("no database named {0:?} in the fleet")]
    UnknownDatabase(String),
    /// 503: a transient database condition (a pool timeout, a lost
    /// connection) that may pass; the message is its bounded, redacted
    /// cause.
    #[error("{0}")]
    Unavailable(String),
    /// 500: any other failure; the message is the bounded, redacted cause
    /// (AUD-2).
    #[error("{0}")]
    Internal(String),
}

impl AdminError {
    /// The 404 of an unknown backfill, before any suggestion is looked up.
    pub(crate) fn not_found() -> Self {
        AdminError::NotFound {
            did_you_mean: Vec::new(),
        }
    }

    /// The 401 of a request whose bearer token (`None`: no
    /// `Authorization: Bearer` header) matched no principal. An empty
    /// token counts as none sent: that is what a lost variable sends.
    pub(crate) fn unauthorized(bearer: Option<&str>) -> Self {
        AdminError::Unauthorized {
            token_sent: bearer.is_some_and(|t| !t.is_empty()),
        }
    }

    /// HTTP status of the error.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::Unauthorized { .. } => 401,
            AdminError::Forbidden(_) => 403,
            AdminError::CrossSite => 403,
            AdminError::Misdirected => 421,
            AdminError::BadRequest(_) => 400,
            AdminError::NotFound { .. } => 404,
            AdminError::UnknownDatabase(_) => 404,
            AdminError::KeyReused => 422,
            AdminError::InvalidSettings(_) => 422,
            AdminError::UnsupportedMediaType => 415,
            AdminError::PayloadTooLarge => 413,
            AdminError::NoDefinition => 409,
            AdminError::OutOfRange { .. } => 422,
            AdminError::InvalidSplit(_) => 422,
            AdminError::TooManyRequests(_) => 429,
            AdminError::Unavailable(_) => 503,
            AdminError::Internal(_) => 500,
        }
    }

    /// Stable error code (also the audit outcome of a rejection).
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::Unauthorized { .. } => "unauthorized",
            AdminError::Forbidden(_) => "forbidden",
            AdminError::CrossSite => "cross_site",
            AdminError::Misdirected => "misdirected_request",
            AdminError::BadRequest(_) => "bad_request",
            AdminError::NotFound { .. } => "not_found",
            AdminError::UnknownDatabase(_) => "unknown_database",
            AdminError::KeyReused => "idempotency_key_reused",
            AdminError::InvalidSettings(_) => "invalid_settings",
            AdminError::UnsupportedMediaType => "unsupported_media_type",
            AdminError::PayloadTooLarge => "payload_too_large",
            AdminError::NoDefinition => "no_definition",
            AdminError::OutOfRange { .. } => "out_of_range",
            AdminError::InvalidSplit(_) => "invalid_split",
            AdminError::TooManyRequests(_) => "too_many_requests",
            AdminError::Unavailable(_) => "unavailable",
            AdminError::Internal(_) => "internal",
        }
    }

    /// The JSON error body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.code().into(),
            message: bounded(self.to_string()),
            field: match self {
                AdminError::InvalidSettings(e) => e.field().map(str::to_string),
                AdminError::OutOfRange { field, .. } => Some(field.to_string()),
                _ => None,
            },
            did_you_mean: match self {
                AdminError::NotFound { did_you_mean } => did_you_mean.clone(),
                _ => Vec::new(),
            },
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        // StoreError's Display is already redacted (store::describe).
        if store::is_transient(&e) {
            AdminError::Unavailable(bounded(e.to_string()))
        } else {
            AdminError::Internal(bounded(e.to_string()))
        }
    }
}

impl From<EngineError> for AdminError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::UnknownBackfill(_) => AdminError::not_found(),
            EngineError::NoDefinition(_) => AdminError::NoDefinition,
            EngineError::InvalidSettings(e) => AdminError::InvalidSettings(e),
            EngineError::InvalidDryRun(message) => AdminError::OutOfRange {
                field: if message.starts_with("sample") {
                    "sample"
                } else {
                    "batches"
                },
                message,
            },
            e @ EngineError::Split { .. } => AdminError::InvalidSplit(bounded(e.to_string())),
            EngineError::Store(e) => e.into(),
            // Repair diagnostics are bounded and redacted by contract.
            other => AdminError::Internal(bounded(other.to_string())),
        }
    }
}

/// Errors inside an admin transaction: anything here rolls it back.
#[derive(Debug, thiserror::Error)]
pub(super) enum TxError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("database error")]
    Db(#[from] diesel::result::Error),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Admin(e.into())
    }
}

impl From<EngineError> for TxError {
    fn from(e: EngineError) -> Self {
        TxError::Admin(e.into())
    }
}

impl From<TxError> for AdminError {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Admin(e) => e,
            TxError::Db(e) => StoreError::Database(e).into(),
        }
    }
}
