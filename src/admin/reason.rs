//! The reason an operator gives for an action: the `Backfill-Reason`
//! header, stored with the action's audit row and shown in the audit and
//! the timeline.
//!
//! A header carries ASCII only, so the reason travels percent-encoded
//! (UTF-8 bytes as `%XX`, as `encodeURIComponent` writes them); printable
//! ASCII other than `%` may also stand for itself.

use super::{Admin, AdminError, RequestMeta};
use crate::admin::auth::Authority;

/// The most characters a reason may have.
pub const MAX_REASON_CHARS: usize = 200;

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

/// The reason a header value carries, or why it is not one: valid
/// percent-encoding of UTF-8, 1 to [`MAX_REASON_CHARS`] characters, none
/// of them a control or invisible formatting character (the reason is
/// shown to other operators as it is).
pub fn decode_reason(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("a % must be followed by two hex digits")?;
                out.push(hex);
                i += 3;
            }
            b if (0x20..0x7f).contains(&b) => {
                out.push(b);
                i += 1;
            }
            _ => return Err("only printable ASCII and %XX escapes may appear".into()),
        }
    }
    let text = String::from_utf8(out).map_err(|_| "the escapes are not UTF-8".to_string())?;
    let chars = text.chars().count();
    if chars == 0 || chars > MAX_REASON_CHARS {
        return Err(format!("it must be 1 to {MAX_REASON_CHARS} characters"));
    }
    if text.chars().any(|c| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
    }) {
        return Err("control and invisible formatting characters are not allowed".into());
    }
    Ok(text)
}

impl Admin {
    /// The action's reason, if the request gave one; a malformed one is a
    /// 400 naming the header, audited like every refused input.
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
            Ok(reason) => Ok(Some(reason)),
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
            assert_eq!(decode_reason(&encode_reason(text)).as_deref(), Ok(text));
        }
        assert_eq!(
            decode_reason("plain words ok").as_deref(),
            Ok("plain words ok")
        );
        let long = "a".repeat(MAX_REASON_CHARS);
        assert!(decode_reason(&long).is_ok());
        assert!(decode_reason(&format!("{long}a")).is_err());
        assert!(decode_reason("").is_err());
        assert!(decode_reason("%zz").is_err());
        assert!(decode_reason("%").is_err());
        assert!(decode_reason("%C3").is_err(), "a cut UTF-8 sequence");
        assert!(decode_reason("a%0Ab").is_err(), "a line feed");
        assert!(decode_reason("%E2%80%AE").is_err(), "a bidi override");
    }
}
