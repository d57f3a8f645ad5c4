//! List-valued (and other structured) log fields.
//!
//! `tracing` records a field as a number, a bool, a string, or a value
//! formatted with `Debug`/`Display`; a list reaches a subscriber as one
//! string, and a JSON log would carry `"required": "a,b"` where a consumer
//! wants `["a", "b"]`. (`tracing`'s own structured values need the
//! `tracing_unstable` cfg, which a library cannot ask of every build that
//! embeds it.) So a structured field is logged as [`Json`]:
//!
//! ```
//! # let required = vec!["events.author-norm.v1".to_string()];
//! tracing::info!(event = "registered", required = %backfill::logging::Json(&required));
//! ```
//!
//! It renders as the value's JSON text, which reads well in a text log
//! (`required=["events.author-norm.v1"]`), and while it renders it marks
//! its thread. A JSON formatter formats each field through [`render`],
//! which reads that mark, and writes a marked field as the JSON value
//! itself rather than as a string; the `backfill` binary's
//! `--log-format json` does. The mark, not the text, decides: a diagnostic
//! string that happens to look like `["x"]` stays a string.

use serde::Serialize;
use std::cell::Cell;
use std::fmt;

thread_local! {
    /// Set by a [`Json`] while it renders; cleared and read by [`render`].
    static RENDERED_JSON: Cell<bool> = const { Cell::new(false) };
}

/// A log field value written as JSON (see the module documentation).
/// A value that cannot be serialized is written as `null`.
pub struct Json<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> fmt::Display for Json<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An error here would make `format!` in any subscriber panic, so a
        // value serde cannot write becomes `null` instead.
        let text = serde_json::to_string(self.0).unwrap_or_else(|_| "null".to_string());
        RENDERED_JSON.with(|mark| mark.set(true));
        f.write_str(&text)
    }
}

impl<T: Serialize + ?Sized> fmt::Debug for Json<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A field value as a JSON formatter should write it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rendered {
    /// A plain value: write it as a JSON string.
    Text(String),
    /// A [`Json`] field: write the value as it is.
    Json(serde_json::Value),
}

/// Format a field value recorded with `Debug` (which is how `tracing`
/// hands over `%value` and `?value` fields) and tell whether it was a
/// [`Json`]. Formatting happens here, on this thread, between clearing and
/// reading the mark, so a mark left by another formatter cannot leak in.
/// A marked value whose text is not JSON (a [`Json`] inside some other
/// formatting, say `?Some(Json(..))`) stays text.
pub fn render(value: &dyn fmt::Debug) -> Rendered {
    RENDERED_JSON.with(|mark| mark.set(false));
    let text = format!("{value:?}");
    if RENDERED_JSON.with(|mark| mark.replace(false)) {
        if let Ok(json) = serde_json::from_str(&text) {
            return Rendered::Json(json);
        }
    }
    Rendered::Text(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn obs02_a_json_field_renders_as_its_value_and_plain_text_as_text() {
        let ids = vec!["a".to_string(), "b \"quoted\"".to_string()];
        assert_eq!(
            render(&format_args!("{}", Json(&ids))),
            Rendered::Json(json!(["a", "b \"quoted\""]))
        );
        // Text that looks like JSON is still text: only the mark decides.
        assert_eq!(
            render(&format_args!("{}", r#"["a"]"#)),
            Rendered::Text(r#"["a"]"#.into())
        );
        // A mark set by formatting elsewhere does not carry over.
        let _ = format!("{}", Json(&ids));
        assert_eq!(render(&"x"), Rendered::Text("\"x\"".into()));
        // Wrapped in other formatting, the text is not JSON: text.
        assert_eq!(
            render(&Some(Json(&ids))),
            Rendered::Text(r#"Some(["a","b \"quoted\""])"#.into())
        );
        assert_eq!(Json(&ids).to_string(), r#"["a","b \"quoted\""]"#);
    }
}
