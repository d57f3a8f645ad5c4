//! Lifecycle actions over the `backfill` table: `start`, `pause`,
//! `resume`/`retry`, the fenced completion or rejection of lifecycle
//! validation, and the record of an explicit validation.
//!
//! Lifecycle transitions are enforced twice in PostgreSQL: by each UPDATE's
//! WHERE clause (a disallowed source state matches zero rows) and by the
//! `backfill_guard` trigger, which rejects any UPDATE that breaks the
//! lifecycle table, moves the bound or the checkpoint backward, or touches a
//! completed row (LC-1, LC-4, REG-5).

use super::backfill::{BackfillRow, COLUMNS};
use super::outbox::{CHANGED_COLUMNS, OUTBOX_ENQUEUE};
use super::StoreError;
use crate::lifecycle::State;
use diesel::sql_types::{Array, BigInt, Binary, Bool, Jsonb, Nullable, Text};
use diesel::OptionalExtension;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// How many rows a state change with a queued notification changed.
#[derive(diesel::QueryableByName)]
struct Changed {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The captured source set, in stored form.
pub struct StartValues<'a> {
    /// The captured inclusive bound in the key encoding; `None` for an
    /// empty source set (EX-1).
    pub bound: Option<&'a [u8]>,
    /// The bound rendered as JSON for display.
    pub bound_json: Option<&'a Value>,
    /// The name of the definition's key type, recorded with the bound.
    pub key_type: &'a str,
    /// The size of the source set, when the definition could count it;
    /// `None` is unknown.
    pub source_rows: Option<i64>,
}

/// `start`: `pending` -> `running` (or `validating` for an empty source set,
/// EX-1) with the bound captured, in the caller's transaction. Fence: the
/// row must still be `pending`, so a second start matches zero rows and can
/// never recapture the bound. Advances the generation, and clears the
/// diagnostic of a failed automatic start (EMB-8).
pub async fn backfill_start(
    conn: &mut AsyncPgConnection,
    id: &str,
    values: StartValues<'_>,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET \
             state = CASE WHEN $2::bytea IS NULL THEN 'validating' ELSE 'running' END, \
             bound = $2, bound_json = $3, empty_source = ($2::bytea IS NULL), key_type = $4, \
             source_rows = $5, generation = generation + 1, attempts = 0, \
             next_attempt_at = NULL, last_error_kind = NULL, last_error = NULL, \
             last_error_at = NULL, started_at = now(), updated_at = now() \
         WHERE id = $1 AND state = 'pending' \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .bind::<Nullable<Binary>, _>(values.bound)
        .bind::<Nullable<Jsonb>, _>(values.bound_json)
        .bind::<Text, _>(values.key_type)
        .bind::<Nullable<BigInt>, _>(values.source_rows),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Record why an automatic start failed on the row it left `pending`
/// (EMB-8): `kind` (`retryable`, `blocked` or `fatal`) and the bounded
/// `diagnostic`, in their own statement (the start's transaction rolled
/// back). Fence: the row must still be `pending`, so a row another process
/// started meanwhile keeps its own diagnostics; `false` = not pending (or
/// no row). Locks the row for the statement only. No state change, so no
/// notification is queued; [`backfill_start`] clears it.
pub async fn backfill_start_failure_record(
    conn: &mut AsyncPgConnection,
    id: &str,
    kind: &str,
    diagnostic: &str,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET last_error_kind = $2, last_error = $3, \
             last_error_at = now(), updated_at = now() \
         WHERE id = $1 AND state = 'pending'",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(kind)
        .bind::<Text, _>(diagnostic),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Fenced completion (VAL-3): `validating` -> `completed` after successful
/// validation, as the last statement of the validation transaction. Fence:
/// state `validating`, owner, generation and unexpired lease by
/// `clock_timestamp()`; a paused or retried run has a new generation and
/// matches nothing. `false` = stale. Queues the `completed` (or
/// `undo_completed`) notification in the same statement (NTF-1).
pub async fn validation_complete(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
) -> Result<bool, StoreError> {
    let changed: Changed = super::cached(
        diesel::sql_query(format!(
            "WITH changed AS ( \
             UPDATE backfill SET state = 'completed', owner = NULL, lease_expires_at = NULL, \
             validation_outcome = 'success', validation_detail = NULL, validated_at = now(), \
             completed_at = now(), updated_at = now() \
         WHERE id = $1 AND state = 'validating' AND owner = $2 AND generation = $3 \
           AND lease_expires_at > clock_timestamp() \
         RETURNING {CHANGED_COLUMNS}), {OUTBOX_ENQUEUE} \
         SELECT count(*) AS n FROM changed"
        ))
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation),
    )
    .get_result(conn)
    .await?;
    Ok(changed.n == 1)
}

/// Fenced rejection (VAL-3): `validating` -> `failed` (or `blocked` when the
/// validation names an unmet prerequisite) with the bounded diagnostic.
/// Same fence as [`validation_complete`]. `false` = stale. Queues the
/// `validation_failed` (or `blocked`) notification in the same statement.
pub async fn validation_reject(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
    to_state: State,
    detail: &str,
) -> Result<bool, StoreError> {
    let changed: Changed = super::cached(
        diesel::sql_query(format!(
            "WITH changed AS ( \
             UPDATE backfill SET state = $4, owner = NULL, lease_expires_at = NULL, \
             validation_outcome = 'failure', validation_detail = $5, validated_at = now(), \
             last_error_kind = 'validation', last_error = $5, last_error_at = now(), \
             updated_at = now() \
         WHERE id = $1 AND state = 'validating' AND owner = $2 AND generation = $3 \
           AND lease_expires_at > clock_timestamp() AND $4 IN ('failed', 'blocked') \
         RETURNING {CHANGED_COLUMNS}), {OUTBOX_ENQUEUE} \
         SELECT count(*) AS n FROM changed"
        ))
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation)
        .bind::<Text, _>(to_state.as_str())
        .bind::<Text, _>(detail),
    )
    .get_result(conn)
    .await?;
    Ok(changed.n == 1)
}

/// `pause`: `running`/`validating` -> `paused`, advancing the generation and
/// dropping the claim in one statement, so every in-flight batch or
/// validation of the old generation fails its fence at commit (CT-5).
/// Waits on the row lock of a batch that is committing. `None` = the row was
/// not in a pausable state.
pub async fn backfill_pause(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET state = 'paused', generation = generation + 1, owner = NULL, \
             lease_expires_at = NULL, updated_at = now() \
         WHERE id = $1 AND state IN ('running', 'validating') \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// `resume` (from `paused`) and `retry` (from `blocked`/`failed`): back to
/// `running`, or to `validating` when the checkpoint already reached the
/// bound or the source set was empty. Claims nothing; the bound and the
/// checkpoint are untouched (LC-4, RT-3); retry also clears the attempt
/// count and backoff. Advances the generation so that nothing issued before
/// the action can commit after it. `None` = not in a source state.
pub async fn backfill_reactivate(
    conn: &mut AsyncPgConnection,
    id: &str,
    from_states: &[State],
    reset_attempts: bool,
) -> Result<Option<BackfillRow>, StoreError> {
    let from: Vec<&str> = from_states.iter().map(|s| s.as_str()).collect();
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET \
             state = CASE WHEN empty_source OR checkpoint = bound THEN 'validating' \
                          ELSE 'running' END, \
             generation = generation + 1, next_attempt_at = NULL, \
             attempts = CASE WHEN $3 THEN 0 ELSE attempts END, updated_at = now() \
         WHERE id = $1 AND state = ANY($2) AND state IN ('paused', 'blocked', 'failed') \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .bind::<Array<Text>, _>(from)
        .bind::<Bool, _>(reset_attempts),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Persist the bounded outcome of an explicit validation (VAL-7). Touches
/// only the validation columns: never lifecycle, bound, checkpoint,
/// generation or claim (VAL-5). No fence: it is a record, not a transition.
pub async fn validation_record(
    conn: &mut AsyncPgConnection,
    id: &str,
    outcome: &str,
    detail: Option<&str>,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET validation_outcome = $2, validation_detail = $3, \
             validated_at = now() \
         WHERE id = $1",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(outcome)
        .bind::<Nullable<Text>, _>(detail),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}
