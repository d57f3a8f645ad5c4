//! The claim a worker holds, and what it carries from one batch to the
//! next: the open batch transaction and the state of its pacing.

use super::error::EngineError;
use super::latency::LatencyPace;
use crate::key::render_json;
use crate::repair::{BodyError, DynRepair, Registry, RepairError, SelectedBatch};
use crate::store::{self, PooledConn};
use crate::throttle::settings::Settings;
use crate::throttle::sizing::{Policy, Sizing};
use std::time::{Duration, Instant};

/// What a claim is for.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `running`: execute batches.
    Execute,
    /// `validating`: run lifecycle validation.
    Validate,
}

/// A claim held by one worker: the fencing token every fenced write
/// presents. A cache of PostgreSQL state with a trust window, never an
/// authority.
#[doc(hidden)]
#[derive(Debug)]
pub struct Claim {
    pub id: String,
    pub worker: String,
    pub generation: i64,
    pub phase: Phase,
    /// The partition this claim advances (PAR-2); `None` for a claim of
    /// the backfill's own row (a backfill without partitions, or any
    /// backfill's validation). A partition claim's `bound` is the
    /// partition's upper end and its checkpoint the partition's.
    pub partition: Option<u32>,
    /// The previous owner whose expired claim this one took over (CLM-4).
    pub takeover_from: Option<String>,
    pub(crate) bound: Option<Vec<u8>>,
    pub(crate) checkpoint: Option<Vec<u8>>,
    /// The next batch's transaction, opened by the previous batch's commit
    /// message (see the [`engine`](crate::engine) module docs).
    pub(crate) open: OpenBatch,
    /// Settings, sizing and pause of this claim's batches (THR-1..4).
    pub(crate) pacing: Pacing,
    /// The runner budget's permit this claim runs on (FLT-2), given back
    /// when the claim is dropped; `None` without a budget.
    pub(crate) permit: Option<crate::throttle::budget::Permit>,
}

/// What a claim knows of its pacing.
#[derive(Debug, Default)]
pub(crate) struct Pacing {
    /// The live settings as last read, and when.
    pub(super) settings: Settings,
    pub(super) read_at: Option<Instant>,
    /// The engine's change count when the settings were read.
    pub(super) seen_changes: u64,
    /// The size in force the row had when the claim first read it.
    pub(super) stored_size: Option<u32>,
    sizing: Option<Sizing>,
    /// When the last batch committed (the pause counts from there).
    pub(super) last_commit: Option<Instant>,
    /// The throttle condition last recorded on the row as holding this
    /// claim back, and when it was written.
    pub(super) throttled: Option<(serde_json::Value, Instant)>,
    /// The checked signals that were unknown when a batch last went ahead
    /// without them (logged once per change, THR-2).
    pub(super) unknown: Vec<&'static str>,
    /// The size and duration of the last committed batch.
    pub(crate) last: (u32, Duration),
    /// The size the last step gave a body it sent ahead.
    pub(super) sent_ahead: u32,
    /// The latency budget's controller and last reading (THR-6).
    pub(super) latency: LatencyPace,
}

impl Pacing {
    /// The size the next batch runs with under the settings as last read
    /// and the definition's limit and target, asked again every batch.
    pub(super) fn size(&mut self, def: &dyn DynRepair) -> u32 {
        let policy = Policy::new(&self.settings, def.batch_limit(), def.batch_target());
        let stored = self.stored_size;
        let sizing = self
            .sizing
            .get_or_insert_with(|| Sizing::new(policy, stored));
        sizing.set_policy(policy);
        self.latency.size(sizing.size())
    }

    /// A batch whose body ran with `size` committed in a step that ran
    /// with `limit`; `ran` keys were selected and changed in this step's
    /// statements, which took `took`.
    pub(super) fn committed(&mut self, size: u32, limit: u32, ran: usize, took: Duration) {
        if let Some(sizing) = self.sizing.as_mut() {
            sizing.observe(ran, took);
        }
        self.last = (size, took);
        self.sent_ahead = limit;
        self.last_commit = Some(Instant::now());
    }

    /// Whether the operator asked for a pause between batches: the commit
    /// then opens no next transaction, since it would sit idle through
    /// the pause.
    pub(super) fn pausing(&self) -> bool {
        !self.settings.pause().is_zero() || self.latency.cutting()
    }

    /// The pause after the last batch: the operator's, or the latency
    /// budget's when that is longer (THR-6).
    pub(super) fn pause(&self) -> Duration {
        self.settings
            .pause()
            .max(self.latency.controller.pause(self.last.1))
    }

    /// The size to leave in force after a statement timeout: half the
    /// current one within the target's range (THR-3). `None` for a fixed
    /// size, which is the operator's or the definition's to change.
    pub(super) fn after_timeout(&self) -> Option<i32> {
        let mut sizing = self.sizing.clone()?;
        let before = sizing.size();
        let after = sizing.on_timeout();
        (after != before).then(|| i32::try_from(after).unwrap_or(i32::MAX))
    }
}

/// A pooled connection inside a batch transaction that the previous
/// batch's commit opened. It has run `BEGIN` and the `SET LOCAL` timeouts
/// and, for a repair with a one-statement form, that statement of the
/// next batch, sent in the same round trip as the commit (`ahead`).
/// Without it the transaction holds no snapshot, lock or transaction ID;
/// with it, that batch's row locks until the next step commits or rolls
/// back, bounded like any batch by the statement and idle timeouts
/// (EX-5). Only the claim that committed the previous batch uses it,
/// which is why a claim is not `Clone`. Dropped while open (a runner that
/// stops without releasing), the pool sees the open transaction and
/// discards the connection, and PostgreSQL rolls the transaction back
/// with it.
#[derive(Default)]
pub(crate) struct OpenBatch(parking_lot::Mutex<Option<Open>>);

/// The contents of an [`OpenBatch`].
pub(super) struct Open {
    pub(super) conn: PooledConn<'static>,
    /// The next batch's body, already run in this transaction.
    pub(super) ahead: Option<Result<SelectedBatch, BodyError>>,
    /// A repair that overlaps commits (`Repair::overlap_commits`): the
    /// pair's other connection, inside the transaction the previous
    /// batch's commit message opened (`BEGIN` and timeouts, nothing run).
    /// The batch after next runs its body there while the next batch
    /// commits on `conn`.
    pub(super) spare: Option<PooledConn<'static>>,
}

impl OpenBatch {
    pub(super) fn take(&self) -> Option<Open> {
        self.0.lock().take()
    }

    pub(super) fn put(&self, open: Open) {
        *self.0.lock() = Some(open);
    }
}

impl std::fmt::Debug for OpenBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.lock().is_some() {
            "OpenBatch(open)"
        } else {
            "OpenBatch(none)"
        })
    }
}

impl Claim {
    /// The size and duration of the last batch this claim committed.
    pub fn last_batch(&self) -> (u32, std::time::Duration) {
        self.pacing.last
    }

    /// The size a failure leaves in force: a statement timeout halves it
    /// before the retry (THR-3); any other failure leaves it.
    pub(super) fn size_after(&self, error: &RepairError) -> Option<i32> {
        match error {
            RepairError::Retryable(m) if m == "statement timeout" => self.pacing.after_timeout(),
            _ => None,
        }
    }

    /// The committed checkpoint as JSON, as far as this claim knows.
    pub fn checkpoint_json(&self) -> Option<serde_json::Value> {
        self.checkpoint.as_deref().and_then(render_json)
    }
}

/// Roll back a connection's batch transaction and return it to the pool;
/// if the rollback fails, the connection reports itself broken and the
/// pool discards it.
pub(super) async fn rollback_to_pool(mut conn: PooledConn<'static>) {
    let _ = store::batch_rollback(&mut conn).await;
}

/// Check a claimed row (a backfill's or a partition's) against this
/// process's definition of `id` before anything runs (REG-4: fail
/// closed): a definition must exist, and every stored key (`keys`: its
/// bound or upper end, its checkpoint) must be of the definition's key
/// type. Either miss is a typed error and the caller's claim transaction
/// rolls back.
pub(super) fn check_claimed(
    registry: &Registry,
    id: &str,
    keys: [Option<&[u8]>; 2],
) -> Result<(), EngineError> {
    let def = registry
        .get(id)
        .ok_or_else(|| EngineError::NoDefinition(id.to_string()))?;
    for stored in keys.into_iter().flatten() {
        def.check_key(stored)
            .map_err(|error| EngineError::KeyMismatch {
                id: id.to_string(),
                error,
            })?;
    }
    Ok(())
}

#[cfg(test)]
pub(in crate::engine) mod tests {
    use super::{check_claimed, Claim, OpenBatch, Pacing, Phase};
    use crate::engine::error::EngineError;
    use crate::key::Key;
    use crate::repair::{Registry, RepairError, SqlRepair, SqlRepairBuilder};
    use crate::throttle::settings::Settings;
    use crate::throttle::sizing::{BatchTarget, Policy, Sizing};
    use std::time::Duration;

    /// A complete SQL definition `t.v1` over `t`, keyed by a bigint.
    fn sql() -> SqlRepairBuilder {
        SqlRepair::new("t.v1", "t")
            .key("id")
            .set("n = 0")
            .validate_where("n <> 0")
    }

    fn registry(repair: SqlRepairBuilder) -> Registry {
        Registry::new()
            .with(repair.build().expect("a complete definition"))
            .expect("registers")
    }

    /// A claim of `t.v1` with `checkpoint` and `pacing`, holding no open
    /// batch.
    fn claim(checkpoint: Option<Vec<u8>>, pacing: Pacing) -> Claim {
        Claim {
            checkpoint,
            pacing,
            ..idle_claim()
        }
    }

    /// An execution claim of `t.v1` with no bound, checkpoint or open
    /// batch and default pacing: the engine's tests change what they need.
    pub(in crate::engine) fn idle_claim() -> Claim {
        Claim {
            id: "t.v1".into(),
            worker: "w".into(),
            generation: 1,
            phase: Phase::Execute,
            partition: None,
            takeover_from: None,
            bound: None,
            checkpoint: None,
            open: OpenBatch::default(),
            pacing: Pacing::default(),
            permit: None,
        }
    }

    /// Pacing that sizes adaptively toward 50 ms within [1, 100], starting
    /// from `size`.
    fn adaptive(size: u32) -> Pacing {
        let target = BatchTarget {
            duration: Duration::from_millis(50),
            min: 1,
            max: 100,
        };
        Pacing {
            sizing: Some(Sizing::new(Policy::Adaptive(target), Some(size))),
            ..Pacing::default()
        }
    }

    /// THR-3: the size in force is the one the definition and the settings
    /// give: a fixed limit as declared, a target resumed from the size the
    /// row left in force.
    #[test]
    fn thr03_the_size_in_force_follows_the_definition_and_the_stored_size() {
        let fixed = registry(sql().batch_size(40));
        let def = fixed.get("t.v1").expect("registered");
        assert_eq!(Pacing::default().size(&**def), 40);
        let target = registry(sql().target_batch(Duration::from_millis(50), 1, 100));
        let def = target.get("t.v1").expect("registered");
        let mut resumed = Pacing {
            stored_size: Some(64),
            ..Pacing::default()
        };
        assert_eq!(resumed.size(&**def), 64);
    }

    /// THR-3: a committed batch is what the next size is learnt from, and
    /// the claim reports its size and duration: 64 keys in 64 ms cost 1 ms
    /// each, so a 50 ms target sizes the next batch at 50.
    #[test]
    fn thr03_a_committed_batch_is_measured_and_reported() {
        let target = registry(sql().target_batch(Duration::from_millis(50), 1, 100));
        let def = target.get("t.v1").expect("registered");
        let mut claim = claim(
            None,
            Pacing {
                stored_size: Some(64),
                ..Pacing::default()
            },
        );
        assert_eq!(claim.pacing.size(&**def), 64);
        assert_eq!(claim.last_batch(), (0, Duration::ZERO));
        let took = Duration::from_millis(64);
        claim.pacing.committed(64, 70, 64, took);
        assert_eq!(claim.last_batch(), (64, took));
        assert_eq!(claim.pacing.sent_ahead, 70);
        assert!(claim.pacing.last_commit.is_some());
        assert_eq!(claim.pacing.size(&**def), 50);
    }

    /// THR-4: only a pause the operator set keeps the commit from opening
    /// the next batch's transaction.
    #[test]
    fn thr04_a_claim_is_pausing_only_under_a_set_pause() {
        let paused = Pacing {
            settings: Settings::from_stored(&serde_json::json!({ "pause_ms": 250 })),
            ..Pacing::default()
        };
        assert!(paused.pausing());
        assert!(!Pacing::default().pausing());
    }

    /// THR-3: a statement timeout halves an adaptive size and leaves the
    /// half in force; a size already at the range's minimum, a fixed
    /// size and a claim that has not sized a batch yet leave nothing new.
    #[test]
    fn thr03_a_statement_timeout_leaves_half_the_adaptive_size() {
        assert_eq!(adaptive(64).after_timeout(), Some(32));
        assert_eq!(adaptive(1).after_timeout(), None);
        let fixed = Pacing {
            sizing: Some(Sizing::new(Policy::Fixed(40), None)),
            ..Pacing::default()
        };
        assert_eq!(fixed.after_timeout(), None);
        assert_eq!(Pacing::default().after_timeout(), None);
    }

    /// THR-3: only a retryable statement timeout changes the size a
    /// failure leaves in force; any other failure, or a timeout the
    /// repair judged fatal, leaves it.
    #[test]
    fn thr03_only_a_statement_timeout_shrinks_the_size_after_a_failure() {
        let claim = claim(None, adaptive(64));
        let timeout = RepairError::Retryable("statement timeout".into());
        assert_eq!(claim.size_after(&timeout), Some(32));
        for other in [
            RepairError::Retryable("connection reset".into()),
            RepairError::Fatal("statement timeout".into()),
            RepairError::Blocked("statement timeout".into()),
        ] {
            assert_eq!(claim.size_after(&other), None, "{other:?}");
        }
    }

    /// ADM-3: the claim's checkpoint renders as its key; bytes that are no
    /// key encoding render as unknown, never as a value.
    #[test]
    fn adm03_a_claims_checkpoint_renders_as_its_key_or_unknown() {
        let at = claim(Some(42i64.to_bytes()), Pacing::default());
        assert_eq!(at.checkpoint_json(), Some(serde_json::json!(42)));
        let garbled = claim(Some(vec![0xff]), Pacing::default());
        assert_eq!(garbled.checkpoint_json(), None);
        assert_eq!(claim(None, Pacing::default()).checkpoint_json(), None);
    }

    /// REG-4: a claimed row runs only under a local definition, and only
    /// when every stored key it carries is of the definition's key type.
    #[test]
    fn reg04_a_claimed_row_needs_a_definition_and_keys_of_its_type() {
        let registry = registry(sql());
        let bigint = 7i64.to_bytes();
        let text = "seven".to_string().to_bytes();
        assert!(check_claimed(&registry, "t.v1", [Some(&bigint), None]).is_ok());
        assert!(check_claimed(&registry, "t.v1", [None, None]).is_ok());
        assert!(matches!(
            check_claimed(&registry, "other.v1", [None, None]),
            Err(EngineError::NoDefinition(id)) if id == "other.v1"
        ));
        for keys in [[Some(&text), None], [Some(&bigint), Some(&text)]] {
            let keys = keys.map(|k| k.map(Vec::as_slice));
            assert!(matches!(
                check_claimed(&registry, "t.v1", keys),
                Err(EngineError::KeyMismatch { id, .. }) if id == "t.v1"
            ));
        }
    }

    /// EX-5: a claim's debug output says whether it holds an open batch
    /// transaction.
    #[test]
    fn ex05_a_claim_without_an_open_batch_says_so() {
        assert_eq!(format!("{:?}", OpenBatch::default()), "OpenBatch(none)");
    }
}
