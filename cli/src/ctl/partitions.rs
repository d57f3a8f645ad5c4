//! The partitions of a partitioned backfill as `backfill ctl show` prints
//! them (PAR-5): one line each, after the backfill's own lines, with the
//! range, the checkpoint, the owner and the progress the API reported.

use backfill::admin::{BackfillView, PartitionView};
use serde_json::Value;

/// One line per partition; empty for a backfill without partitions.
pub(super) fn partition_lines(b: &BackfillView) -> String {
    b.partitions.iter().map(partition_line).collect()
}

fn partition_line(p: &PartitionView) -> String {
    let key = |v: &Option<Value>, absent: &str| {
        v.as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| absent.into())
    };
    let at = if p.ended {
        "ended".to_string()
    } else {
        format!("at {}", key(&p.checkpoint, "its start"))
    };
    let owner = match (p.owner.disposition.as_str(), &p.owner.worker) {
        ("none", _) => "unclaimed".to_string(),
        (d, worker) => format!("{d} by {}", worker.as_deref().unwrap_or("?")),
    };
    let error = p
        .last_error
        .as_deref()
        .map(|e| format!(", last error: {}", crate::screen::one_line(e)))
        .unwrap_or_default();
    let throttle = p
        .throttle
        .as_ref()
        .map(|t| format!(", throttled: {}", crate::screen::one_line(&t.text)))
        .unwrap_or_default();
    let rate = p
        .rows_per_second
        .map(|r| format!(", {r:.1} rows/s"))
        .unwrap_or_default();
    let label = format!("partition {}", p.part);
    format!(
        "{label:<13} ({}, {}] {at}, {} rows in {} batches{rate}, {owner}{throttle}{error}\n",
        key(&p.lower, "start"),
        key(&p.upper, "?"),
        p.rows_done,
        p.batches_done,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use backfill::admin::Ownership;

    fn part(part: i32, lower: Option<i64>, checkpoint: Option<i64>, ended: bool) -> PartitionView {
        PartitionView {
            part,
            lower: lower.map(Value::from),
            upper: Some(Value::from(lower.unwrap_or(0) + 100)),
            checkpoint: checkpoint.map(Value::from),
            ended,
            owner: Ownership {
                disposition: if ended { "none" } else { "held" }.into(),
                worker: (!ended).then(|| "w1".to_string()),
                until: None,
            },
            rows_done: 30,
            batches_done: 3,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            batch_size: None,
            throttle: None,
            rows_per_second: None,
        }
    }

    /// PAR-5: each partition's range, checkpoint, progress and owner.
    #[test]
    fn par05_a_line_per_partition() {
        assert_eq!(
            partition_line(&part(0, None, Some(30), false)),
            "partition 0   (start, 100] at 30, 30 rows in 3 batches, held by w1\n"
        );
        assert_eq!(
            partition_line(&part(1, Some(100), Some(200), true)),
            "partition 1   (100, 200] ended, 30 rows in 3 batches, unclaimed\n"
        );
        assert_eq!(
            partition_line(&part(2, Some(200), None, false)),
            "partition 2   (200, 300] at its start, 30 rows in 3 batches, held by w1\n"
        );
        let mut throttled = part(3, Some(300), Some(310), false);
        throttled.throttle = Some(backfill::admin::Throttle {
            signal: "lock_waiters".into(),
            value: Some(3.0),
            threshold: Some(0.0),
            text: "lock waiters 3 > 0".into(),
            since: None,
        });
        assert_eq!(
            partition_line(&throttled),
            "partition 3   (300, 400] at 310, 30 rows in 3 batches, held by w1, \
             throttled: lock waiters 3 > 0\n"
        );
    }
}
