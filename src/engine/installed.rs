//! What this process installed of the repairs' loops inside the server
//! (EX-8), kept apart from the engine that installs and calls them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// An installed loop: the procedure's name and the time slice of one call.
#[derive(Debug, Clone)]
pub(super) struct Installed {
    pub(super) procedure: Arc<str>,
    pub(super) slice: Duration,
}

/// What this process knows of each repair's loop, by stable ID: installed
/// (`Some`), or the repair has none (`None`). Asked once per repair and
/// process; an installation that failed is asked again at the next batch.
#[derive(Debug, Default)]
pub(super) struct Loops(parking_lot::Mutex<HashMap<String, Option<Installed>>>);

impl Loops {
    /// What is known of `id`'s loop: `Some(None)` for a repair without one.
    pub(super) fn get(&self, id: &str) -> Option<Option<Installed>> {
        self.0.lock().get(id).cloned()
    }

    /// Whether `id` has a loop inside the server, as far as this process
    /// knows.
    pub(super) fn installed(&self, id: &str) -> bool {
        matches!(self.0.lock().get(id), Some(Some(_)))
    }

    /// Remember what `id`'s loop is.
    pub(super) fn insert(&self, id: &str, installed: Option<Installed>) {
        self.0.lock().insert(id.to_string(), installed);
    }
}
