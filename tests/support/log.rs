//! The log of the current test's thread: one process-wide `tracing`
//! subscriber whose writer appends to the capture of the thread that
//! logged, so a test reads the runtime's events (its actors run on the
//! test's actix thread) without seeing another test's.

use std::sync::Arc;

/// The log lines of the current thread (the actix system's, where the
/// runtime's actors run), as text.
#[derive(Clone, Default)]
pub struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

thread_local! {
    /// Where this thread's log lines go while a test captures them.
    static CAPTURE: std::cell::RefCell<Option<Log>> = const { std::cell::RefCell::new(None) };
}

/// The writer of the one process-wide subscriber: it appends to the
/// current thread's capture, if any, and drops the line otherwise.
struct Routed;

impl std::io::Write for Routed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(log) = &*c.borrow() {
                log.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Ends the current thread's capture when dropped.
pub struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

impl Log {
    /// Capture this thread's events until the guard drops.
    ///
    /// One global subscriber serves every test, rather than one scoped
    /// subscriber per test: tracing caches per call site whether anyone
    /// listens, and a call site first reached on a thread with no scoped
    /// subscriber, while another test registers its own, can stay cached
    /// as unheard, which loses that test's events.
    pub fn capture() -> (Log, CaptureGuard) {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| Routed)
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        let log = Log::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(log.clone()));
        (log, CaptureGuard)
    }

    /// The lines naming `event`.
    pub fn lines(&self, event: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).to_string();
        let needle = format!("event=\"{event}\"");
        text.lines()
            .filter(|l| l.contains(&needle))
            .map(str::to_string)
            .collect()
    }
}
