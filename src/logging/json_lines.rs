//! The JSON log format: one JSON object per event and line.
//!
//! The shape is `tracing-subscriber`'s flattened JSON (`timestamp`,
//! `level`, the event's fields at the top level, `target`), written by a
//! formatter of this crate so that a field logged as
//! [`Json`](super::Json) (the library's list-valued fields, such as
//! `required`) is written as its JSON value, an array, instead of a string
//! holding its text. Every other field keeps its type: integers, floats
//! and bools as such, everything else as a string.
//!
//! The fields of the spans an event happens in are written with the
//! event's own, outermost span first: a fleet logs each database's work
//! inside a `fleet_member` span, so every such line carries `"database"`.
//! The span's name is not written, and an event's own field wins over a
//! span's of the same name. Span fields are kept as JSON text by this
//! type's [`FormatFields`] implementation, so a subscriber sets it as
//! both formatters: `.fmt_fields(JsonLines).event_format(JsonLines)`.

use super::fields::{render, Rendered};
use serde_json::Value;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
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
        ctx: &FmtContext<'_, S, N>,
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
        for (name, value) in span_fields(ctx) {
            if !fields.0.iter().any(|(own, _)| *own == name) {
                entry(&mut line, &name, &value);
            }
        }
        for (name, value) in &fields.0 {
            entry(&mut line, name, value);
        }
        entry(&mut line, "target", &Value::from(meta.target()));
        line.push('}');
        writeln!(writer, "{line}")
    }
}

impl<'writer> FormatFields<'writer> for JsonLines {
    /// A span's fields as one JSON object's text, which
    /// [`JsonLines::format_event`] reads back.
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut recorded = Fields::default();
        fields.record(&mut recorded);
        let mut object = String::with_capacity(64);
        object.push('{');
        for (name, value) in &recorded.0 {
            entry(&mut object, name, value);
        }
        object.push('}');
        writer.write_str(&object)
    }

    /// Fields recorded on a span after its creation join its object.
    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut recorded = Fields::default();
        fields.record(&mut recorded);
        let mut object = parse_object(&current.fields).unwrap_or_default();
        for (name, value) in recorded.0 {
            object.insert(name.to_string(), value);
        }
        current.fields = Value::Object(object).to_string();
        Ok(())
    }
}

/// The fields of the spans an event happens in, outermost first. A span
/// formatted by another `FormatFields` (whose text is not a JSON object)
/// contributes nothing rather than a malformed line.
fn span_fields<S, N>(ctx: &FmtContext<'_, S, N>) -> Vec<(String, Value)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let mut out = Vec::new();
    let Some(scope) = ctx.event_scope() else {
        return out;
    };
    for span in scope.from_root() {
        let extensions = span.extensions();
        let Some(formatted) = extensions.get::<FormattedFields<N>>() else {
            continue;
        };
        for (name, value) in parse_object(&formatted.fields).unwrap_or_default() {
            match out.iter_mut().find(|(seen, _)| *seen == name) {
                Some(inner) => inner.1 = value,
                None => out.push((name, value)),
            }
        }
    }
    out
}

/// A JSON object's text as a map; `None` for anything else.
fn parse_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
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

    /// An event inside spans carries their fields, the outer first and the
    /// event's own winning a clash; the span's name is not a field.
    #[test]
    fn flt01_an_event_inside_a_member_span_names_the_database() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonLines)
            .event_format(JsonLines)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let member = tracing::info_span!("fleet_member", database = "t01");
            let _member = member.enter();
            let inner = tracing::info_span!("inner", attempt = 1u64, step = tracing::field::Empty);
            inner.record("step", "claim");
            let _inner = inner.enter();
            tracing::info!(event = "claim_acquired", attempt = 2u64);
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: Value = serde_json::from_str(text.trim_end()).expect("one JSON object");
        assert_eq!(line["event"], "claim_acquired");
        assert_eq!(line["database"], "t01", "{text}");
        assert_eq!(line["step"], "claim", "{text}");
        assert_eq!(line["attempt"], 2, "the event's own field wins: {text}");
        assert!(line.get("fleet_member").is_none(), "{text}");
        assert_eq!(text.matches("\"attempt\"").count(), 1, "{text}");
    }
}
