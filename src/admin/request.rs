//! What one admin request carries besides its body, and the limits the
//! admin boundary puts on requests.

use crate::failure::cut;
use serde_json::Value;
use std::net::IpAddr;

/// Largest request body read, in bytes. A change of every setting is a few
/// hundred bytes (the stored object is bounded to 2 KiB); reading stops
/// here, so a client cannot make the server hold more.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Longest accepted idempotency key or request id, in bytes (the
/// `backfill_request` and `backfill_audit` columns are bounded to 200).
pub const MAX_KEY_BYTES: usize = 200;
/// Largest page.
pub const MAX_PAGE: i64 = 500;
/// Page size when none is given.
pub const DEFAULT_PAGE: i64 = 50;

/// What a caller presents with one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestMeta<'a> {
    /// The bearer token, if any.
    pub bearer: Option<&'a str>,
    /// The `Idempotency-Key` header, if any.
    pub idempotency_key: Option<&'a str>,
    /// A request id for correlation when there is no idempotency key.
    pub request_id: Option<&'a str>,
    /// The peer address: rejections of callers without a principal are
    /// coalesced and rate-limited per source (API-3). `None` (not a socket
    /// peer) is a source of its own.
    pub source: Option<IpAddr>,
    /// The `Host` the request was sent to, checked against the allow-list
    /// in trusted-network mode (AUTH-3). `None` when there is none (an
    /// in-process caller, an HTTP/1.0 client): not checked.
    pub host: Option<&'a str>,
    /// The `Origin` header, if any (AUTH-3).
    pub origin: Option<&'a str>,
    /// The `Sec-Fetch-Site` header, if any (AUTH-3).
    pub fetch_site: Option<&'a str>,
    /// The `Backfill-Reason` header as sent (percent-encoded), if any:
    /// the operator's reason for an action.
    pub reason: Option<&'a str>,
}

impl RequestMeta<'_> {
    pub(super) fn correlation(&self) -> Option<String> {
        self.idempotency_key
            .or(self.request_id)
            .map(|c| cut(c, MAX_KEY_BYTES))
    }
}

/// A response that went through the idempotent path: replayed verbatim to
/// every retry of the same key (200 applied/converged, 409 conflict).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status of the response.
    pub status: u16,
    /// The JSON body of the response.
    pub body: Value,
}
