//! A backfill view as the admin API sends it, for the tests of the
//! renderings: one fixture, so that the table and the detail are checked
//! against the same row.

use backfill::admin::BackfillView;
use serde_json::json;

/// A running backfill whose runner is throttled.
pub(super) fn throttled() -> BackfillView {
    serde_json::from_value(json!({
        "id": "events.content-len.v1", "description": null, "state": "running",
        "key_type": "bigint", "bound": 20000, "checkpoint": 5000, "empty_source": false,
        "progress": {"rows_done": 5000, "total_rows": 20000, "fraction": 0.25,
                     "batches_done": 10},
        "owner": {"disposition": "held", "worker": "w1",
                  "until": "2026-12-01T10:00:30Z"},
        "generation": 7, "attempts": 0, "next_attempt_at": null, "last_error": null,
        "validation": null, "readiness": {"required": false, "gating": false},
        "registered_at": "2026-12-01T09:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
        "started_at": "2026-12-01T09:30:00Z", "completed_at": null,
        "observed_at": "2026-12-01T10:00:01Z",
        "settings": {"pause_ms": 250, "batch_size": 500}, "batch_size": 500,
        "throttle": {"signal": "replication_lag_bytes", "value": 5.0e7,
                     "threshold": 1.6e7, "text": "replication lag 47.7 MiB > 15.3 MiB",
                     "since": "2026-12-01T09:59:00Z"}
    }))
    .expect("a view")
}
