//! The reason an operator gives for an action: the `Backfill-Reason`
//! header, stored with the action's audit row and shown in the audit and
//! the timeline.
//!
//! A header carries ASCII only, so the reason travels as up to
//! [`MAX_REASON_HEADER`] printable ASCII characters in which `%XX`
//! sequences spelling UTF-8 (as `encodeURIComponent` writes them) are
//! decoded; text that does not decode is kept as written. What the
//! header may hold is exactly what the OpenAPI document declares, so a
//! client that follows it is never refused.

use super::view::audit_text;
use super::{Admin, AdminError, RequestMeta};
use crate::admin::auth::Authority;

/// The most characters the header may have.
pub const MAX_REASON_HEADER: usize = 2000;

/// The header's name.
pub const REASON_HEADER: &str = "Backfill-Reason";

/// `text` as the header carries it: every byte other than an ASCII letter,
/// digit or one of `-._~` percent-encoded.
pub fn encode_reason(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The reason a header value carries (`None` for an empty one, which HTTP
/// cannot tell from a header of spaces), or why it is not one: more than
/// [`MAX_REASON_HEADER`] characters, or a character that is not printable
/// ASCII. `%XX` sequences are decoded when the whole decodes to UTF-8;
/// control and invisible formatting characters are stored escaped, as
/// audit text is shown (AUD-3).
pub fn decode_reason(raw: &str) -> Result<Option<String>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.len() > MAX_REASON_HEADER || !raw.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(format!(
            "it must be at most {MAX_REASON_HEADER} printable ASCII characters \
             (percent-encode UTF-8 text)"
        ));
    }
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                decoded.push(b);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    let text = String::from_utf8(decoded).unwrap_or_else(|_| raw.to_string());
    Ok(Some(audit_text(&text)))
}

impl Admin {
    /// The action's reason, if the request gave one; a header that is not
    /// one is a 400 naming it, audited like every refused input.
    pub(super) async fn require_reason(
        &self,
        meta: &RequestMeta<'_>,
        authority: &Authority,
        id: &str,
        action: &str,
    ) -> Result<Option<String>, AdminError> {
        let Some(raw) = meta.reason else {
            return Ok(None);
        };
        match decode_reason(raw) {
            Ok(reason) => Ok(reason),
            Err(problem) => {
                let error =
                    AdminError::BadRequest(format!("the {REASON_HEADER} header: {problem}"));
                Err(self.rejected(authority, id, action, meta, error).await)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obs04_reasons_round_trip_and_bad_ones_are_named() {
        for text in ["quiet hours", "café → ok, 100%", "x"] {
            assert_eq!(
                decode_reason(&encode_reason(text)),
                Ok(Some(text.to_string()))
            );
        }
        assert_eq!(
            decode_reason("plain words ok"),
            Ok(Some("plain words ok".into()))
        );
        // Text that does not decode is kept as written.
        assert_eq!(decode_reason("100%zz"), Ok(Some("100%zz".into())));
        assert_eq!(decode_reason("%C3"), Ok(Some("%C3".into())));
        // Controls and bidi overrides are stored escaped.
        assert_eq!(decode_reason("a%0Ab"), Ok(Some("a\\u{000a}b".into())));
        assert_eq!(decode_reason("%E2%80%AEx"), Ok(Some("\\u{202e}x".into())));
        assert_eq!(decode_reason("   "), Ok(None));
        let long = "a".repeat(MAX_REASON_HEADER);
        assert!(decode_reason(&long).is_ok());
        assert!(decode_reason(&format!("{long}a")).is_err());
        assert!(decode_reason("caf\u{e9}").is_err(), "raw UTF-8 in a header");
        assert!(decode_reason("a\tb").is_err(), "a raw tab");
    }
}
