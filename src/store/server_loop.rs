//! The batch loop inside the server (EX-8): the procedure a repair's
//! [`ServerBatch`](crate::repair::ServerBatch) statement runs in, its
//! installation, one call of it, and the checkpoint a failed call leaves.
//!
//! Each batch of the loop is its own transaction and commits the repair's
//! mutations with the same fence function a batch sent by the engine
//! commits with (`backfill_checkpoint_advance`, or
//! `backfill_partition_advance` for a partition), so a stale owner's batch
//! inside a loop fails exactly as it would from the client (CLM-2, CT-5)
//! and the batches committed before it stay committed (EX-6).

use super::StoreError;
use diesel::sql_types::{BigInt, Bool, Bytea, Integer, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use sha2::{Digest, Sha256};

/// The procedure around `statement` with the batch limit `batch`, from its
/// parameter list on (the name goes in front). Its parameters, in the
/// order the statement and [`server_loop_call`] use them: `$1` the
/// checkpoint as a `bigint` key (`i64::MIN` before the first key), `$2`
/// the bound, `$3` the backfill's ID, `$4` the partition (`NULL` for the
/// backfill's own row), `$5` the owner, `$6` the claim's generation, `$7`
/// the stored checkpoint the first batch expects, `$8` the batch size
/// recorded, `$9` the time slice and `$10` the lock timeout, both in
/// milliseconds. It answers the batches and keys it committed and the
/// last checkpoint, encoded as `src/key.rs` encodes a `bigint` (its tag,
/// then the value with the sign bit flipped, big-endian).
///
/// Every batch checks its summary against the batch contract before its
/// fence (EX-3, EX-4: at most `batch` keys, all in `($1, $2]`) and raises
/// `BF002` otherwise. The lock timeout is set per batch transaction; the
/// statement timeout cannot be (it bounds the whole `CALL`), so the
/// caller sets it around the call.
fn procedure_body(statement: &str, batch: u32) -> String {
    format!(
        "(bigint, bigint, text, integer, text, bigint, bytea, integer, integer, integer,
    INOUT __bf_batches bigint DEFAULT 0, INOUT __bf_keys bigint DEFAULT 0,
    INOUT __bf_checkpoint bytea DEFAULT NULL)
LANGUAGE plpgsql AS $__bf_loop$
DECLARE
    __bf_from ALIAS FOR $1;
    __bf_expected ALIAS FOR $7;
    __bf_first bigint;
    __bf_last bigint;
    __bf_n bigint;
    __bf_next bigint;
    __bf_end timestamptz := clock_timestamp() + $9 * interval '1 millisecond';
BEGIN
    __bf_checkpoint := $7;
    LOOP
        PERFORM set_config('lock_timeout', $10::text, true);
        {statement}
            INTO __bf_first, __bf_last, __bf_n;
        IF __bf_n IS NULL OR __bf_n < 0 OR __bf_n > {batch}
            OR (__bf_n = 0) <> (__bf_last IS NULL)
            OR __bf_first > __bf_last OR __bf_first <= __bf_from OR __bf_last > $2 THEN
            RAISE EXCEPTION 'backfill batch broke the batch contract' USING ERRCODE = 'BF002';
        END IF;
        __bf_next := coalesce(__bf_last, $2);
        __bf_checkpoint := '\\x12'::bytea || int8send(__bf_next # (-9223372036854775808)::bigint);
        IF $4 IS NULL THEN
            PERFORM backfill_checkpoint_advance($3, $5, $6, __bf_expected, __bf_checkpoint,
                to_jsonb(__bf_next), __bf_n, $8);
        ELSE
            PERFORM backfill_partition_advance($3, $4, $5, $6, __bf_expected, __bf_checkpoint,
                to_jsonb(__bf_next), __bf_n, $8);
        END IF;
        COMMIT;
        __bf_batches := __bf_batches + 1;
        __bf_keys := __bf_keys + __bf_n;
        __bf_expected := __bf_checkpoint;
        __bf_from := __bf_next;
        EXIT WHEN __bf_next = $2 OR clock_timestamp() >= __bf_end;
    END LOOP;
END
$__bf_loop$"
    )
}

/// The name of the procedure with `body`: `backfill_loop_` and the first
/// 24 hex digits of the body's SHA-256, so every process running the same
/// definition shares one procedure, and a changed definition (or a
/// release that writes the body differently) gets its own.
fn procedure_name(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    format!("backfill_loop_{}", &hex::encode(digest)[..24])
}

/// Install the procedure around `statement` unless the first schema of the
/// search path already has it, and return its name. One transaction under
/// a transaction-scoped advisory lock on the name, so two processes
/// installing the same definition at once take turns instead of failing
/// on the catalog row; `CREATE PROCEDURE` then locks nothing the batches
/// use. The name is hex digits of a hash, never caller text.
pub async fn server_loop_install(
    conn: &mut AsyncPgConnection,
    statement: &str,
    batch: u32,
) -> Result<String, StoreError> {
    #[derive(QueryableByName)]
    struct Present {
        #[diesel(sql_type = Bool)]
        present: bool,
    }
    let body = procedure_body(statement, batch);
    let name = procedure_name(&body);
    conn.transaction::<_, StoreError, _>(async |conn| {
        diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind::<Text, _>(&name)
            .execute(conn)
            .await?;
        let found: Present = diesel::sql_query(
            "SELECT EXISTS (SELECT 1 FROM pg_proc \
             WHERE proname = $1 AND pronamespace = current_schema()::regnamespace) AS present",
        )
        .bind::<Text, _>(&name)
        .get_result(conn)
        .await?;
        if !found.present {
            conn.batch_execute(&format!("CREATE PROCEDURE {name}{body}"))
                .await?;
        }
        Ok(())
    })
    .await?;
    Ok(name)
}

/// One call of an installed loop: what it runs on, and from where.
#[derive(Debug, Clone, Copy)]
pub struct SliceCall<'a> {
    /// The procedure [`server_loop_install`] named.
    pub procedure: &'a str,
    /// The claim's checkpoint as a key (`i64::MIN` before the first).
    pub from: i64,
    /// The claim's bound.
    pub bound: i64,
    /// The backfill every batch's fence advances.
    pub id: &'a str,
    /// Its partition (PAR-2); `None`: the backfill's own row.
    pub part: Option<u32>,
    /// The owner every batch's fence checks (CLM-2).
    pub worker: &'a str,
    /// The claim's generation every batch's fence checks (CLM-2).
    pub generation: i64,
    /// The stored checkpoint the first batch expects.
    pub expected: Option<&'a [u8]>,
    /// The size recorded as in force (THR-3).
    pub batch_size: i32,
    /// How long the loop starts batches, in milliseconds.
    pub slice_ms: i64,
    /// The lock timeout of every batch, in milliseconds (EX-5).
    pub lock_ms: i64,
    /// The statement timeout of the whole call, in milliseconds (EX-5).
    pub call_timeout_ms: i64,
}

/// What one call committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceOutcome {
    /// Every batch of the call committed.
    Committed {
        /// How many batches committed.
        batches: i64,
        /// The keys they changed, in all.
        keys: i64,
        /// The claim's checkpoint now, in the stored encoding.
        checkpoint: Vec<u8>,
    },
    /// A batch's fence did not match (`BF001`): that batch rolled back;
    /// the ones before it in this call committed.
    Stale,
}

/// Call the loop (EX-8): `CALL` the procedure outside any transaction
/// block, so that each batch inside commits on its own. The statement
/// timeout bounds the whole call, so it is set for the session before the
/// call and restored after it, each in a statement of its own (a `CALL`
/// that commits cannot share a message with other statements). Any error
/// but the fence's leaves the batches before the failing one committed;
/// read the checkpoint back with [`claim_checkpoint_get`].
pub async fn server_loop_call(
    conn: &mut AsyncPgConnection,
    call: &SliceCall<'_>,
) -> Result<SliceOutcome, StoreError> {
    #[derive(QueryableByName)]
    struct Previous {
        #[diesel(sql_type = Text)]
        previous: String,
    }
    #[derive(QueryableByName)]
    struct Answer {
        #[diesel(sql_type = BigInt)]
        __bf_batches: i64,
        #[diesel(sql_type = BigInt)]
        __bf_keys: i64,
        #[diesel(sql_type = Nullable<Bytea>)]
        __bf_checkpoint: Option<Vec<u8>>,
    }
    let previous: Previous = super::cached(
        diesel::sql_query(
            "SELECT current_setting('statement_timeout') AS previous, \
                    set_config('statement_timeout', $1, false) AS set",
        )
        .bind::<Text, _>(call.call_timeout_ms.to_string()),
    )
    .get_result(conn)
    .await?;
    let answer = diesel::sql_query(format!(
        "CALL {}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        call.procedure
    ))
    .bind::<BigInt, _>(call.from)
    .bind::<BigInt, _>(call.bound)
    .bind::<Text, _>(call.id)
    .bind::<Nullable<Integer>, _>(call.part.map(|p| p as i32))
    .bind::<Text, _>(call.worker)
    .bind::<BigInt, _>(call.generation)
    .bind::<Nullable<Bytea>, _>(call.expected)
    .bind::<Integer, _>(call.batch_size)
    .bind::<Integer, _>(i32::try_from(call.slice_ms).unwrap_or(i32::MAX))
    .bind::<Integer, _>(i32::try_from(call.lock_ms).unwrap_or(i32::MAX))
    .get_result::<Answer>(conn)
    .await;
    let restored = super::cached(
        diesel::sql_query("SELECT set_config('statement_timeout', $1, false) AS set")
            .bind::<Text, _>(&previous.previous),
    )
    .execute(conn)
    .await;
    let outcome = match answer {
        Ok(answer) => SliceOutcome::Committed {
            batches: answer.__bf_batches,
            keys: answer.__bf_keys,
            checkpoint: answer.__bf_checkpoint.unwrap_or_default(),
        },
        Err(error) if super::batch::stale_fence(&error) => SliceOutcome::Stale,
        Err(error) => return Err(error.into()),
    };
    // The call's own error comes first; a failed restore after a
    // successful call is reported, since that session keeps the call's
    // timeout.
    restored?;
    Ok(outcome)
}

/// The committed checkpoint of `id` (`part`: of that partition), read
/// after a call of the loop failed part way. No lock, no fence: the next
/// batch's fence checks it again.
pub async fn claim_checkpoint_get(
    conn: &mut AsyncPgConnection,
    id: &str,
    part: Option<u32>,
) -> Result<Option<Vec<u8>>, StoreError> {
    #[derive(QueryableByName)]
    struct Checkpoint {
        #[diesel(sql_type = Nullable<Bytea>)]
        checkpoint: Option<Vec<u8>>,
    }
    let row: Checkpoint = match part {
        None => {
            super::cached(
                diesel::sql_query("SELECT checkpoint FROM backfill WHERE id = $1")
                    .bind::<Text, _>(id),
            )
            .get_result(conn)
            .await?
        }
        Some(part) => {
            super::cached(
                diesel::sql_query(
                    "SELECT checkpoint FROM backfill_partition \
                     WHERE backfill_id = $1 AND part = $2",
                )
                .bind::<Text, _>(id)
                .bind::<Integer, _>(part as i32),
            )
            .get_result(conn)
            .await?
        }
    };
    Ok(row.checkpoint)
}
