//! The undo of a journaled repair (UNDO-2, UNDO-3): a repair the registry
//! derives from every journaled definition, whose keys are the journal's
//! `seq` and whose batches restore the before-images.
//!
//! It is an ordinary definition to the engine and the runtime: its backfill
//! is claimed, leased, fenced, batched, checkpointed, paused, throttled and
//! validated like any other. What sets it apart is only that its row is
//! created by the operator's `undo` action, never by registration.

use super::{
    even_splits, Batches, BigIntSummary, Journal, Mutated, Repair, RepairError, SelectAndMutate,
    SourceSet, Validation,
};
use crate::store::{cached, journal_extent, journal_restore_sql, journal_unresolved};
use async_trait::async_trait;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// What an undo's stable ID adds to its original's (`events.fix.v1` is
/// undone by `events.fix.v1.undo`).
pub const UNDO_SUFFIX: &str = ".undo";

/// The stable ID of the undo of `id`.
pub fn undo_id(id: &str) -> String {
    format!("{id}{UNDO_SUFFIX}")
}

/// Keys per undo batch, written into the statement text.
const UNDO_BATCH: u32 = 1000;

/// The undo of one journaled definition.
pub(super) struct Undo {
    id: String,
    original: String,
    description: String,
    table: String,
    partitions: u32,
    /// The restoring batch with `LIMIT <UNDO_BATCH>`, and with `LIMIT $3`
    /// for another size in force (an operator's batch size).
    batch_sql: String,
    batch_sql_bound_limit: String,
}

impl Undo {
    /// The undo of `original`, which keeps `journal` and runs in up to
    /// `partitions` partitions.
    pub(super) fn new(original: &str, journal: &Journal, partitions: u32) -> Self {
        let sql = |limit: &str| {
            journal_restore_sql(
                original,
                &journal.table,
                &journal.key_columns,
                &journal.columns,
                limit,
            )
        };
        Self {
            id: undo_id(original),
            original: original.to_string(),
            description: format!(
                "undo of {original}: restores the journaled columns of {} where they still hold what it wrote",
                journal.table
            ),
            table: journal.table.clone(),
            partitions,
            batch_sql: sql(&UNDO_BATCH.to_string()),
            batch_sql_bound_limit: sql("$3"),
        }
    }

    /// The backfill this undo takes back.
    pub(super) fn original(&self) -> &str {
        &self.original
    }
}

#[async_trait]
impl Repair for Undo {
    type Key = i64;

    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn batch_limit(&self) -> u32 {
        UNDO_BATCH
    }

    fn tables(&self) -> Vec<String> {
        vec![self.table.clone()]
    }

    /// As many as the original allows: an undo runs partitioned like it
    /// (PAR-1), over even ranges of the journal's `seq`.
    fn partitions(&self) -> u32 {
        self.partitions
    }

    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &i64,
        partitions: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let (min, _, _) = journal_extent(conn, &self.original).await?;
        Ok(even_splits(min.unwrap_or(*bound), *bound, partitions))
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let (_, max, rows) = journal_extent(conn, &self.original).await?;
        Ok(match max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded {
                upper,
                rows: Some(rows),
            },
        })
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::OneStatement(self)
    }

    /// Every journaled row up to the bound was restored or recorded as a
    /// conflict (UNDO-3).
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let Some(bound) = bound else {
            return Ok(Validation::Success);
        };
        let open = journal_unresolved(conn, &self.original, *bound).await?;
        Ok(if open == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "{open} journaled rows up to the bound were neither restored nor recorded as conflicts"
            ))
        })
    }
}

#[async_trait]
impl SelectAndMutate<i64> for Undo {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let text = if limit == UNDO_BATCH {
            &self.batch_sql
        } else {
            &self.batch_sql_bound_limit
        };
        let query = diesel::sql_query(text.as_str())
            .into_boxed()
            .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
            .bind::<BigInt, _>(*bound);
        let query = if limit == UNDO_BATCH {
            query
        } else {
            query.bind::<BigInt, _>(i64::from(limit))
        };
        let row: BigIntSummary = cached(query).get_result(conn).await?;
        Ok(row.into())
    }
}
