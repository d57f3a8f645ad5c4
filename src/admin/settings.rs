//! The settings action (THR-4): `PATCH /admin/backfills/{id}/settings`
//! without HTTP. Authorized, audited and idempotent like the lifecycle
//! actions; the change itself is [`Engine::update_settings_in`].
//!
//! [`Engine::update_settings_in`]: crate::Engine::update_settings_in

use super::{
    replay, requested_id, to_json, Admin, AdminError, Capability, ConflictBody, Reply, RequestMeta,
    TxError,
};
use crate::engine::EngineError;
use crate::repair::bounded;
use crate::store::{self, NewAudit};
use diesel_async::AsyncConnection;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The audit action and stored request name of a settings change.
const ACTION: &str = "settings";

/// The media types a change may come as: a JSON merge patch (RFC 7396),
/// under its own type or as plain JSON.
const MEDIA_TYPES: [&str; 2] = ["application/json", "application/merge-patch+json"];

/// A request body as the HTTP layer read it.
#[derive(Debug, Clone, Copy)]
pub enum RequestBody<'a> {
    /// The whole body and its `Content-Type` header, if any.
    Complete {
        /// The `Content-Type` header, if the request sent one.
        content_type: Option<&'a str>,
        /// The body as received.
        bytes: &'a [u8],
    },
    /// Longer than [`super::MAX_BODY_BYTES`]; not read past that.
    TooLarge,
    /// The body could not be read (the connection broke off, say).
    Unreadable,
}

impl RequestBody<'_> {
    /// The change as JSON: 415 for another media type, 413 past the size,
    /// 400 when it is not JSON. Whether it is a valid change is the
    /// engine's to say (422).
    fn change(&self) -> Result<Value, AdminError> {
        let (content_type, bytes) = match *self {
            RequestBody::Complete {
                content_type,
                bytes,
            } => (content_type, bytes),
            RequestBody::TooLarge => return Err(AdminError::PayloadTooLarge),
            RequestBody::Unreadable => {
                return Err(AdminError::BadRequest(
                    "the request body could not be read".into(),
                ))
            }
        };
        // `application/json; charset=utf-8` is JSON too: parameters aside,
        // media types compare without regard to case.
        let essence = content_type
            .and_then(|t| t.split(';').next())
            .map(|t| t.trim().to_ascii_lowercase());
        if !essence.is_some_and(|t| MEDIA_TYPES.contains(&t.as_str())) {
            return Err(AdminError::UnsupportedMediaType);
        }
        serde_json::from_slice(bytes).map_err(|e| {
            AdminError::BadRequest(format!(
                "the body is not JSON (line {}, column {})",
                e.line(),
                e.column()
            ))
        })
    }
}

/// What an idempotency key is stored with for this change: the action and
/// a digest of the change, so that the same key with another change is a
/// reuse (422) rather than a replay of a different request's answer. The
/// digest is of the change's canonical form (object keys sorted, no
/// spaces): the same change sent with other spacing or key order is the
/// same request.
fn request_name(change: &Value) -> String {
    let mut text = String::new();
    canonical(change, &mut text);
    format!("{ACTION}:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

impl Admin {
    /// PATCH /admin/backfills/{id}/settings (THR-4): apply a JSON merge
    /// patch of live settings. Authorized (`backfill:operate`) and
    /// idempotent like [`Admin::act`]: in ONE transaction, under the
    /// idempotency key's lock, the row is locked, the change applied and
    /// checked, stored, audited (prior and new values) and announced on
    /// the wake-up channel, and the response stored for replay. 200 with
    /// the backfill; 409 when it is completed (stored and replayed like
    /// the lifecycle conflicts); a refused change is 422 and changes
    /// nothing. Every rejection is audited.
    pub async fn update_settings(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        body: RequestBody<'_>,
    ) -> Result<Reply, AdminError> {
        let authority = self
            .authorize(meta, id, ACTION, Capability::Operate)
            .await?;
        if let Err(error) = requested_id("the path's ID", id) {
            return Err(self.rejected(&authority, id, ACTION, meta, error).await);
        }
        let key = self.require_key(meta, &authority, id, ACTION).await?;
        let reason = self.require_reason(meta, &authority, id, ACTION).await?;
        let change = match body.change() {
            Ok(change) => change,
            Err(error) => return Err(self.rejected(&authority, id, ACTION, meta, error).await),
        };
        let request = request_name(&change);
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) = replay(conn, &authority, id, ACTION, &request, key).await? {
                    return Ok(reply);
                }
                let (status, row, outcome, detail, body) =
                    match self.engine.update_settings_in(conn, id, &change).await {
                        Ok(change) => {
                            let body = to_json(&self.view_on(conn, &change.row).await?)?;
                            let detail = bounded(change.prior.diff(&change.next));
                            (200, change.row, "applied", detail, body)
                        }
                        Err(EngineError::Completed(row)) => {
                            let message =
                                "settings cannot change: the backfill is completed".to_string();
                            let body = to_json(&ConflictBody {
                                error: "conflict".into(),
                                message: message.clone(),
                                current: self.view_on(conn, &row).await?,
                            })?;
                            (409, *row, "conflict", message, body)
                        }
                        Err(e) => return Err(e.into()),
                    };
                store::audit_insert(
                    conn,
                    &NewAudit {
                        backfill_id: id,
                        action: ACTION,
                        actor: authority.actor.as_deref(),
                        authority: authority.source,
                        correlation: Some(key),
                        prior_state: Some(row.state),
                        resulting_state: Some(row.state),
                        generation: Some(row.generation),
                        outcome,
                        detail: Some(&detail),
                        reason: reason.as_deref(),
                    },
                )
                .await?;
                store::request_insert(
                    conn,
                    authority.principal(),
                    key,
                    id,
                    &request,
                    status,
                    &body,
                )
                .await?;
                Ok(Reply {
                    status: status as u16,
                    body,
                })
            })
            .await;
        match result {
            Ok(reply) => Ok(reply),
            Err(e) => Err(self.rejected(&authority, id, ACTION, meta, e.into()).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn thr04_the_same_change_is_the_same_request() {
        let a: Value = serde_json::from_str(r#"{"pause_ms": 5, "batch_size": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "batch_size":null,"pause_ms":5 }"#).unwrap();
        assert_eq!(request_name(&a), request_name(&b));
        assert_ne!(request_name(&a), request_name(&json!({"pause_ms": 6})));
        assert!(request_name(&a).starts_with("settings:"));
    }

    #[test]
    fn thr04_only_json_media_types_are_a_change() {
        let body = |content_type: Option<&'static str>, bytes: &'static [u8]| {
            RequestBody::Complete {
                content_type,
                bytes,
            }
            .change()
        };
        for t in [
            "application/json",
            "Application/Merge-Patch+JSON",
            "application/json; charset=utf-8",
        ] {
            assert_eq!(body(Some(t), b"{}").ok(), Some(json!({})), "{t}");
        }
        for t in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            assert!(
                matches!(body(t, b"{}"), Err(AdminError::UnsupportedMediaType)),
                "{t:?}"
            );
        }
        assert!(matches!(
            body(Some("application/json"), b"{"),
            Err(AdminError::BadRequest(_))
        ));
        assert!(matches!(
            RequestBody::TooLarge.change(),
            Err(AdminError::PayloadTooLarge)
        ));
    }

    /// THR-4: the canonical form that the request digest is taken of is
    /// exactly JSON with sorted keys and no spaces, at every depth, so two
    /// different changes never share a digest (`[1,2]` is not `[12]`).
    #[test]
    fn thr04_canonical_form_is_sorted_compact_json() {
        let mut text = String::new();
        canonical(
            &json!({"b": [1, 2, {"z": true, "y": "s"}], "a": {"d": null, "c": "x"}}),
            &mut text,
        );
        assert_eq!(
            text,
            r#"{"a":{"c":"x","d":null},"b":[1,2,{"y":"s","z":true}]}"#
        );
        assert_ne!(
            request_name(&json!({"x": [1, 2]})),
            request_name(&json!({"x": [12]}))
        );
    }

    /// THR-4: a body that could not be read is a bad request.
    #[test]
    fn thr04_unreadable_body_is_a_bad_request() {
        assert!(matches!(
            RequestBody::Unreadable.change(),
            Err(AdminError::BadRequest(message)) if message.contains("could not be read")
        ));
    }
}
