//! The bench's repair ([`ItemsRepair`]) in each of its shapes.

use super::args::BenchError;
use super::sql::{Count, Id, MaxId, MinMax};
use async_trait::async_trait;
use backfill::__private::store::cached;
use backfill::repair::{
    even_splits, Batches, BigIntSummary, Mutated, Repair, RepairError, SelectAndMutate,
    SelectThenMutate, ServerBatch, SourceSet, SqlRepair, SqlRepairBuilder, Validation,
};
use backfill::throttle::sizing::BatchTarget;
use diesel::sql_types::{Array, BigInt};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use std::time::Duration;

/// The columns the bench repair's SET list writes, which its journaled
/// form records.
pub(super) const JOURNALED: [&str; 2] = ["email_norm", "touched"];

/// The canonical repair of the bench, over one `items`-shaped table.
///
/// Its statements are cached prepared statements (see
/// [`store::cached`](cached)): the text is fixed per table and batch size.
///
/// The batch size is written into the text (`LIMIT 1000`), not bound
/// (`LIMIT $3`), as `Repair::batch_limit` advises. With a bound limit
/// PostgreSQL's generic plan cannot know how many rows the statement
/// reads, so the plan cache may keep choosing custom plans and plan the
/// statement anew for every batch; the literal keeps the generic plan.
/// The engine asks for `batch_limit()` keys at a fixed size; a smaller
/// limit (the `adaptive` run's sizes) falls back to the bound form. Every
/// runner uses the same select text, the PL/pgSQL loop included.
pub struct ItemsRepair {
    id: String,
    table: String,
    batch: u32,
    /// Selects with the literal limit `batch`.
    select: String,
    update: String,
    /// The one-statement form with the literal limit.
    fused: String,
    /// Whether [`Repair::batches`] answers the one-statement form.
    one_statement: bool,
    bound: String,
    validate: String,
    /// Extra time each mutation holds its transaction (takeover owner only,
    /// so the run lasts long enough to be killed mid-way).
    pub(super) throttle: Duration,
    /// What [`Repair::overlap_commits`] answers.
    overlap: bool,
    /// What [`Repair::batch_target`] answers: `None` runs every batch at
    /// `batch`.
    target: Option<BatchTarget>,
    /// What [`Repair::partitions`] answers.
    partitions: u32,
    /// The key range [`Repair::split_points`] divides evenly.
    range: String,
    /// The time slice of the loop inside the server that
    /// [`Repair::server_batch`] answers; `None`: the engine sends every
    /// batch.
    server: Option<Duration>,
}

impl ItemsRepair {
    /// A repair of `table` (a bench-generated name) in batches of `batch`,
    /// under a stable ID made per run (EMB-2).
    pub fn new(id: String, table: &str, batch: u32) -> Self {
        Self {
            id,
            table: table.to_string(),
            batch,
            select: Self::select_sql(table, batch),
            update: format!(
                "UPDATE {table} SET email_norm = lower(email), touched = touched + 1 \
                 WHERE id = ANY($1)"
            ),
            fused: Self::fused_sql(table, batch),
            one_statement: true,
            bound: format!("SELECT max(id) AS max FROM {table}"),
            validate: format!(
                "SELECT count(*) AS n FROM {table} \
                 WHERE id <= $1 AND email_norm IS DISTINCT FROM lower(email)"
            ),
            throttle: Duration::ZERO,
            overlap: true,
            target: None,
            partitions: 1,
            range: format!("SELECT min(id) AS min, max(id) AS max FROM {table} WHERE id <= $1"),
            server: None,
        }
    }

    /// `sql` (written with this repair's batch size) bound to `after` and
    /// `bound`. For a smaller `limit` (an adaptive size), the text's
    /// `LIMIT <batch>` becomes `LIMIT $3` bound to it: a second cached
    /// statement, built only if that ever happens.
    fn query(
        &self,
        sql: &str,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> diesel::query_builder::BoxedSqlQuery<
        'static,
        diesel::pg::Pg,
        diesel::query_builder::SqlQuery,
    > {
        let after = after.copied().unwrap_or(i64::MIN);
        if limit == self.batch {
            return diesel::sql_query(sql.to_string())
                .into_boxed()
                .bind::<BigInt, _>(after)
                .bind::<BigInt, _>(*bound);
        }
        let literal = format!("LIMIT {}", self.batch);
        diesel::sql_query(sql.replace(&literal, "LIMIT $3"))
            .into_boxed()
            .bind::<BigInt, _>(after)
            .bind::<BigInt, _>(*bound)
            .bind::<BigInt, _>(i64::from(limit))
    }

    /// The select of every non-PL/pgSQL runner, the client loop's included.
    pub(super) fn select_sql(table: &str, batch: u32) -> String {
        format!("SELECT id FROM {table} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT {batch}")
    }

    /// The keys stay on the server: the CTE collects them into one array
    /// (`array_agg`, as the PL/pgSQL loop does), the update takes them from
    /// it (an index scan on the primary key whatever the plan cache
    /// decides), and the answer is one row read off the array.
    ///
    /// A materialized CTE of the keys, scanned again for the update and
    /// for `min`, `max` and `count`, costs more per batch than the one
    /// array; benches/README.md has the measurement.
    fn fused_sql(table: &str, batch: u32) -> String {
        format!(
            "WITH k AS (SELECT array_agg(id ORDER BY id) AS a FROM (\
                 SELECT id FROM {table} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT {batch}) AS s), \
             u AS (UPDATE {table} SET email_norm = lower(email), touched = touched + 1 \
                 WHERE id = ANY((SELECT a FROM k)::bigint[])) \
             SELECT a[1] AS first, a[cardinality(a)] AS last, \
                 coalesce(cardinality(a), 0)::bigint AS n FROM k"
        )
    }

    /// The same repair in its two-statement form only.
    pub fn two_statement(mut self) -> Self {
        self.one_statement = false;
        self
    }

    /// The same repair, declaring that it does not overlap commits.
    pub fn serial(mut self) -> Self {
        self.overlap = false;
        self
    }

    /// The same repair, sized toward `target` (THR-3) instead of running
    /// every batch at its batch size, which becomes the largest size.
    pub fn adaptive(mut self, target: BatchTarget) -> Self {
        self.target = Some(target);
        self
    }

    /// The same repair in up to `partitions` partitions of (nearly) equal
    /// key width (PAR-1); 1 is the unpartitioned path unchanged.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// The same repair running its batches in a loop inside the server
    /// (EX-8), calls of `slice`: its one-statement form as the loop's
    /// statement.
    pub fn in_server(mut self, slice: Duration) -> Self {
        self.server = Some(slice);
        self
    }

    /// The same update declared as a [`SqlRepair`], which writes its own
    /// statements (the one-statement form, as `fused_sql`).
    pub fn declared(self) -> Result<SqlRepair, BenchError> {
        self.declaration()
            .build()
            .map_err(|e| BenchError::Run(e.to_string()))
    }

    /// [`declared`](Self::declared) with its journal on: every column the
    /// SET list writes ([`JOURNALED`]).
    ///
    /// Declared rather than hand-written because only the library can say
    /// that a one-statement form writes its own journal: a hand-written
    /// repair's journal is written by the engine around the two-statement
    /// form's `mutate`, and registration refuses it with the one-statement
    /// form, which would make `engine-journal` also pay `engine-keys`'
    /// extra round trips. The unjournaled declaration writes the same
    /// statement as `fused_sql` (`engine-sql / engine` measures that), so
    /// `engine-journal / engine` is the journal's cost.
    pub fn journaled(self) -> Result<SqlRepair, BenchError> {
        self.declaration()
            .journal(JOURNALED)
            .build()
            .map_err(|e| BenchError::Run(e.to_string()))
    }

    fn declaration(self) -> SqlRepairBuilder {
        SqlRepair::new(self.id, self.table)
            .key("id")
            .set("email_norm = lower(email), touched = touched + 1")
            .validate_where("email_norm IS DISTINCT FROM lower(email)")
            .batch_size(self.batch)
            .overlap_commits(self.overlap)
    }
}

#[async_trait]
impl Repair for ItemsRepair {
    type Key = i64;

    fn id(&self) -> &str {
        &self.id
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    fn batch_target(&self) -> Option<BatchTarget> {
        self.target
    }

    /// Each row's repair reads only that row, so a batch never reads what
    /// an earlier one wrote (`serial` says otherwise, for comparison).
    fn overlap_commits(&self) -> bool {
        self.overlap
    }

    fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The bench's ids are dense (`generate_series`), so an even split of
    /// `[min, max]` gives partitions of equal rows.
    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &i64,
        partitions: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let row: MinMax = cached(diesel::sql_query(&self.range).bind::<BigInt, _>(*bound))
            .get_result(conn)
            .await?;
        Ok(match (row.min, row.max) {
            (Some(min), Some(max)) => even_splits(min, max, partitions),
            _ => Vec::new(),
        })
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let row: MaxId = diesel::sql_query(&self.bound).get_result(conn).await?;
        Ok(match row.max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded {
                upper,
                rows: Some(upper),
            },
        })
    }

    async fn server_batch(
        &self,
        _conn: &mut AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, RepairError> {
        Ok(self.server.map(|slice| ServerBatch {
            statement: self.fused.clone(),
            slice,
        }))
    }

    fn batches(&self) -> Batches<'_, i64> {
        if self.one_statement {
            Batches::OneStatement(self)
        } else {
            Batches::TwoStatements(self)
        }
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let bad: Count = diesel::sql_query(&self.validate)
            .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
            .get_result(conn)
            .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} rows are not normalized", bad.n))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for ItemsRepair {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let rows: Vec<Id> = cached(self.query(&self.select, after, bound, limit))
            .load(conn)
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        cached(diesel::sql_query(&self.update).bind::<Array<BigInt>, _>(keys))
            .execute(conn)
            .await?;
        if !self.throttle.is_zero() {
            tokio::time::sleep(self.throttle).await;
        }
        Ok(())
    }
}

#[async_trait]
impl SelectAndMutate<i64> for ItemsRepair {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let row: BigIntSummary = cached(self.query(&self.fused, after, bound, limit))
            .get_result(conn)
            .await?;
        if !self.throttle.is_zero() {
            tokio::time::sleep(self.throttle).await;
        }
        Ok(row.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repair's statements carry the batch size as a literal; a smaller
    /// limit gets the bound form with the limit as its third parameter.
    #[test]
    fn emb04_items_repair_writes_its_batch_size_into_the_text() {
        let repair = ItemsRepair::new("bench.t".into(), "items", 100);
        let text = |limit| {
            let q = repair.query(&repair.select, Some(&7), &9, limit);
            diesel::debug_query::<diesel::pg::Pg, _>(&q).to_string()
        };
        let literal = text(100);
        assert!(literal.contains("LIMIT 100"), "{literal}");
        assert!(literal.contains("binds: [7, 9]"), "{literal}");
        let bound = text(40);
        assert!(bound.contains("LIMIT $3"), "{bound}");
        assert!(bound.contains("binds: [7, 9, 40]"), "{bound}");
    }
}
