//! The readiness gate (docs/CONTRACT.md section 8).
//!
//! Rebuilt from PostgreSQL on every evaluation (CFG-2): nothing is cached,
//! so a restart can never show a ready interval that PostgreSQL does not
//! justify. The backfill gate is one input; database reachability is
//! another, independent one (CFG-5). Schema compatibility is checked once
//! at startup, before any listener opens.

use crate::failure::bounded;
use crate::lifecycle::State;
use crate::store::{self, Pool};
use serde::Serialize;

/// One required backfill that keeps the gate closed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Gating {
    /// The required backfill's stable ID.
    pub id: String,
    /// Its lifecycle state; `None` (shown as `missing`) when no row
    /// exists, which keeps the gate closed (fail closed).
    #[serde(serialize_with = "state_or_missing")]
    pub state: Option<State>,
    /// For a `pending` row, why its last automatic start failed, as
    /// recorded on the row (EMB-8): `<kind>: <diagnostic>`, bounded.
    /// Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_failed: Option<String>,
}

fn state_or_missing<S: serde::Serializer>(
    state: &Option<State>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.map_or("missing", State::as_str))
}

/// The backfill input of readiness.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GateReport {
    /// `automatic` (the gate applies) or `manual` (it never gates, CFG-4).
    pub mode: &'static str,
    /// `Some(true)` open, `Some(false)` closed, `None` unknown (the state
    /// could not be read: unknown is never shown as open, ADM-3).
    pub open: Option<bool>,
    /// The required IDs that keep it closed.
    pub gating: Vec<Gating>,
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReadinessReport {
    /// Whether the process is ready to serve: PostgreSQL answered and the
    /// backfill gate is open (CFG-1, CFG-5).
    pub ready: bool,
    /// `ok` or `unreachable`.
    pub database: &'static str,
    /// The backfill input of readiness.
    pub backfill_gate: GateReport,
}

/// The readiness policy of one process.
#[derive(Clone)]
pub struct Readiness {
    pool: Pool,
    automatic: bool,
    required: Vec<String>,
}

impl Readiness {
    /// `required` must already be registered (CFG-2): the host evaluates
    /// readiness only after registration.
    pub fn new(pool: Pool, automatic: bool, required: Vec<String>) -> Self {
        Self {
            pool,
            automatic,
            required,
        }
    }

    /// Evaluate from PostgreSQL.
    pub async fn evaluate(&self) -> ReadinessReport {
        let rows = match self.pool.get().await {
            Ok(mut conn) => store::backfill_get_many(&mut conn, &self.required)
                .await
                .ok(),
            Err(_) => None,
        };
        let database = if rows.is_some() { "ok" } else { "unreachable" };
        let gate = if !self.automatic {
            GateReport {
                mode: "manual",
                open: Some(true),
                gating: Vec::new(),
            }
        } else {
            match &rows {
                None => GateReport {
                    mode: "automatic",
                    open: None,
                    gating: Vec::new(),
                },
                Some(rows) => {
                    let gating: Vec<Gating> = self
                        .required
                        .iter()
                        .filter_map(|id| match rows.iter().find(|r| &r.id == id) {
                            Some(row) if row.state == State::Completed => None,
                            Some(row) => Some(Gating {
                                id: id.clone(),
                                state: Some(row.state),
                                start_failed: row.start_failure().map(|(kind, diagnostic)| {
                                    bounded(format!("{kind}: {diagnostic}"))
                                }),
                            }),
                            None => Some(Gating {
                                id: id.clone(),
                                state: None,
                                start_failed: None,
                            }),
                        })
                        .collect();
                    GateReport {
                        mode: "automatic",
                        open: Some(gating.is_empty()),
                        gating,
                    }
                }
            }
        };
        ReadinessReport {
            ready: rows.is_some() && gate.open == Some(true),
            database,
            backfill_gate: gate,
        }
    }
}
