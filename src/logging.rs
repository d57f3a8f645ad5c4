//! The library's log fields and format: structured (list-valued) fields
//! that a JSON log writes as JSON values ([`Json`], [`render`]), the JSON
//! lines formatter ([`JsonLines`]), and [`install`], the one line an
//! embedder without a `tracing` subscriber of its own calls.

mod fields;
#[doc(hidden)]
pub use fields::{render, Json, Rendered};

#[cfg(feature = "logs")]
mod json_lines;
#[cfg(feature = "logs")]
#[doc(hidden)]
pub use json_lines::JsonLines;

/// How [`install`] writes events.
#[cfg(feature = "logs")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One line of text per event, `tracing-subscriber`'s format, with
    /// colour only on a terminal.
    #[default]
    Text,
    /// One JSON object per event and line ([`JsonLines`]), list-valued
    /// fields as arrays.
    Json,
}

/// Why [`install`] did not install the log format.
#[cfg(feature = "logs")]
#[derive(Debug, thiserror::Error)]
#[error("cannot install the backfill log format: {0}")]
pub struct InstallError(String);

/// Install the library's log format as this process's `tracing`
/// subscriber, writing to standard error: the one line an embedder
/// without a subscriber of its own calls first, so that the runtime's
/// events (registration, claims, a failed automatic start, throttling,
/// completion) reach the service's log. The level comes from `RUST_LOG`
/// when it is set and valid, else `info`.
///
/// ```no_run
/// backfill::logging::install(backfill::logging::LogFormat::Text)?;
/// # Ok::<(), backfill::logging::InstallError>(())
/// ```
///
/// An embedder with its own subscriber does not call it: the library
/// only emits `tracing` events, and any subscriber receives them. Fails
/// when a global subscriber is already installed.
#[cfg(feature = "logs")]
pub fn install(format: LogFormat) -> Result<(), InstallError> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Json => builder
            .fmt_fields(JsonLines)
            .event_format(JsonLines)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    installed.map_err(|e| InstallError(e.to_string()))
}
