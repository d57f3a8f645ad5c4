//! The JSON log format: one JSON object per event and line.
//!
//! The shape is `tracing-subscriber`'s flattened JSON (`timestamp`,
//! `level`, the event's fields at the top level, `target`), written by a
//! formatter of this crate so that a field logged as
//! [`Json`](super::Json) (the library's list-valued fields, such as
//! `required`) is written as its JSON value, an array, instead of a string
//! holding its text. Every other field keeps its type: integers, floats
//! and bools as such, everything else as a string. The code logs inside no
//! span, so spans are not written.

use super::fields::{render, Rendered};
use serde_json::Value;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON event formatter.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        // Events bridged from the `log` crate carry their real level and
        // target in `log.*` fields; these are what a reader wants.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = String::with_capacity(256);
        line.push('{');
        entry(&mut line, "timestamp", &Value::String(timestamp));
        entry(&mut line, "level", &Value::from(meta.level().as_str()));
        for (name, value) in &fields.0 {
            entry(&mut line, name, value);
        }
        entry(&mut line, "target", &Value::from(meta.target()));
        line.push('}');
        writeln!(writer, "{line}")
    }
}

/// Append `"name":value` to an object being written.
fn entry(line: &mut String, name: &str, value: &Value) {
    if !line.ends_with('{') {
        line.push(',');
    }
    // A `str` and a `Value` always serialize; the fallbacks are never
    // taken and keep the line valid JSON if they were.
    line.push_str(&serde_json::to_string(name).unwrap_or_else(|_| "\"?\"".into()));
    line.push(':');
    line.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "null".into()));
}

/// An event's fields in the order they were recorded.
#[derive(Default)]
struct Fields(Vec<(&'static str, Value)>);

impl Fields {
    fn push(&mut self, field: &Field, value: Value) {
        let name = field.name();
        // `log.*` fields were read into the normalized metadata; a raw
        // identifier (`r#type`) is named without its prefix.
        if name.starts_with("log.") {
            return;
        }
        self.0
            .push((name.strip_prefix("r#").unwrap_or(name), value));
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let value = match render(value) {
            Rendered::Json(json) => json,
            Rendered::Text(text) => Value::String(text),
        };
        self.push(field, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::fields::Json;
    use std::sync::{Arc, Mutex};

    /// Collects what the formatter writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Each kind of field keeps its JSON type; a `Json` list is an array,
    /// and a plain string that looks like one stays a string.
    #[test]
    fn obs02_fields_keep_their_types_and_json_lists_are_arrays() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .with_writer(move || writer.clone())
            .finish();
        let ids = vec!["a.v1".to_string(), "b.v1".to_string()];
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                event = "registered",
                required = %Json(&ids),
                empty = %Json(&Vec::<String>::new()),
                count = 2u64,
                delta = -1i64,
                ratio = 0.5,
                automatic = true,
                diagnostic = %r#"["not","a","list"]"#,
                "with a message"
            );
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: Value = serde_json::from_str(text.trim_end()).expect("one JSON object");
        assert_eq!(line["event"], "registered");
        assert_eq!(line["required"], serde_json::json!(["a.v1", "b.v1"]));
        assert_eq!(line["empty"], serde_json::json!([]));
        assert_eq!(line["count"], 2);
        assert_eq!(line["delta"], -1);
        assert_eq!(line["ratio"], 0.5);
        assert_eq!(line["automatic"], true);
        assert_eq!(line["diagnostic"], r#"["not","a","list"]"#);
        assert_eq!(line["message"], "with a message");
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert!(line["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("backfill")));
    }
}
