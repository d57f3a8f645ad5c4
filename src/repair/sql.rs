//! [`SqlRepair`]: a repair declared as SQL fragments over one table with
//! one integer key column (EMB-4).
//!
//! It writes the statements a hand-written repair of that shape would: the
//! one-statement batch form (keys collected into one array, the update by
//! `key = ANY(array)`, the summary read off the array), the batch size as
//! a literal in the text, and every statement a cached prepared statement
//! ([`store::cached`]), so it gets the engine's fastest batch path.
//!
//! # Trusted SQL
//!
//! The table and column names are checked to be plain identifiers, but the
//! SET expression, the filter and the validation predicate are spliced into
//! the statements as written. They are application code, like the SQL of a
//! hand-written repair: never build them from user input, request data or
//! row values.
//!
//! # Scope
//!
//! One table, one integer key column (`bigint`, or `integer`/`smallint`,
//! read as `bigint`) that is unique and not null, such as the primary key:
//! batches are key ranges, and a repeated key could straddle a batch
//! boundary. Composite keys (`(created_at, id)`), joins and several tables
//! need a hand-written [`Repair`].

use super::{
    even_splits, validate_id, Batches, BigIntSummary, DefinitionError, Journal, Mutated, Repair,
    RepairError, RowCount, SelectAndMutate, ServerBatch, SourceSet, Validation,
};
use crate::store::{cached, journal_array_columns, journal_entry_from};
use crate::throttle::sizing::BatchTarget;
use crate::throttle::window::RunWindow;
use async_trait::async_trait;
use diesel::sql_types::{BigInt, Json, Nullable};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1); a longer one is
/// truncated silently, and could then name another table.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// A declarative repair over one table with one integer key column.
///
/// ```
/// use backfill::repair::{DefinitionError, Registry, SqlRepair};
///
/// fn registry() -> Result<Registry, DefinitionError> {
///     let email_norm = SqlRepair::new("items.email-norm.v1", "items")
///         .key("id")
///         .set("email_norm = lower(email)")
///         .filter("email IS NOT NULL")
///         .validate_where("email_norm IS DISTINCT FROM lower(email)")
///         .batch_size(1000)
///         .overlap_commits(true)
///         .build()?;
///     Registry::new().with(email_norm)
/// }
/// # assert!(registry().is_ok());
/// ```
///
/// Each batch is one statement:
///
/// ```sql
/// WITH k AS (SELECT array_agg(id::bigint ORDER BY id) AS a FROM (
///     SELECT id FROM items WHERE id > $1 AND id <= $2 AND (email IS NOT NULL)
///     ORDER BY id LIMIT 1000) AS s),
/// u AS (UPDATE items SET email_norm = lower(email)
///     WHERE id = ANY((SELECT a FROM k)::bigint[]) AND (email IS NOT NULL))
/// SELECT a[1] AS first, a[cardinality(a)] AS last,
///     coalesce(cardinality(a), 0)::bigint AS n FROM k
/// ```
///
/// The filter is applied to the update as well, so a row that a concurrent
/// writer moved out of the filter after the selection is left alone.
/// Validation counts the rows up to the bound that match the filter and the
/// validation predicate (the rows violating the postcondition): success is
/// none (VAL-2).
#[derive(Debug, Clone)]
pub struct SqlRepair {
    id: String,
    description: String,
    batch: u32,
    overlap: bool,
    /// `SELECT max(key) AS max[, count(*) AS n] FROM ..`.
    bound_sql: String,
    count_rows: bool,
    /// The batch statement with the literal `LIMIT <batch>`.
    batch_sql: String,
    /// The same with `LIMIT $3`, for a size in force other than `batch`
    /// (an operator's batch size, or a target duration's sizing).
    batch_sql_bound_limit: String,
    validate_sql: String,
    table: String,
    target: Option<BatchTarget>,
    /// What [`Repair::partitions`] answers.
    partitions: u32,
    /// `SELECT min(key) AS max FROM .. [WHERE filter]`: the lower end
    /// [`even_splits`] divides from, named `max` to read as a [`Bound`].
    min_sql: String,
    /// `SELECT count(*) AS n FROM .. WHERE key > $1 AND key <= $2 [AND
    /// filter]`: the rows a run over a range selects (a dry run's
    /// forecast).
    count_sql: String,
    /// The same range's rows without the count: the planner's estimate,
    /// from `EXPLAIN` of the text around the two keys, which go between
    /// these three parts as literals.
    estimate_sql: [String; 3],
    /// What [`Repair::journal`] answers: the batch statement then writes
    /// the journal itself.
    journal: Option<Journal>,
    /// A journaled repair's batch statements, which take the place of
    /// `batch_sql` and `batch_sql_bound_limit`.
    journaled: Option<JournaledBatch>,
    /// What [`Repair::run_window`] answers.
    window: Option<RunWindow>,
    /// What [`Repair::after`] answers.
    after: Vec<String>,
    /// What [`Repair::priority`] answers.
    priority: i32,
    /// The time slice of [`SqlRepairBuilder::server_loop`].
    server_slice: Option<Duration>,
}

/// The batch statements of a journaled [`SqlRepair`]. How the journal
/// entry aggregates a column depends on whether the column holds arrays
/// (see [`journal_entry_from`]), which only the catalog knows, so the
/// texts are built on the first batch, from the catalog read on that
/// batch's connection, and kept for the life of the process (a
/// repair's stable ID names one definition over one table, REG-3).
#[derive(Debug, Clone)]
struct JournaledBatch {
    key: String,
    set: String,
    and_filter: String,
    /// With the literal `LIMIT <batch>`, and with `LIMIT $3`.
    texts: Arc<OnceCell<[String; 2]>>,
    /// The statement that locks the rows a batch is about to select
    /// (`FOR NO KEY UPDATE`), with the literal limit and with `LIMIT $3`:
    /// run first in the batch's transaction while the table is contended.
    lock: [String; 2],
    /// How many more batches lock their rows first: set when a batch met
    /// a row another transaction changed, counted down by each batch that
    /// locks (see [`SqlRepair::select_and_mutate`]).
    contended: Arc<AtomicU32>,
}

/// How many batches after one that met a changed row lock their rows
/// before reading them. A hot row stays hot for a while; after this many
/// the cheap path is tried again, and the next collision sets it anew.
const CONTENDED_BATCHES: u32 = 64;

/// The text PostgreSQL reports, through `backfill_journal_all_written`, for
/// a journaled batch that met a row changed after its snapshot.
const JOURNAL_RACE: &str = "a row of a journaled batch changed after the batch read it";

/// The builder of a [`SqlRepair`], from [`SqlRepair::new`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct SqlRepairBuilder {
    id: String,
    table: String,
    key: Option<String>,
    set: Option<String>,
    filter: Option<String>,
    validate_where: Option<String>,
    description: Option<String>,
    batch: u32,
    overlap: bool,
    count_rows: bool,
    target: Option<BatchTarget>,
    partitions: u32,
    journal: Vec<String>,
    window: Option<(u64, u64)>,
    after: Vec<String>,
    priority: i32,
    server_slice: Option<Duration>,
}

impl SqlRepair {
    /// Start a repair with stable ID `id` (REG-3) over `table` (an
    /// identifier, optionally schema-qualified: `app.items`). Required
    /// before [`SqlRepairBuilder::build`]: [`key`](SqlRepairBuilder::key),
    /// [`set`](SqlRepairBuilder::set) and
    /// [`validate_where`](SqlRepairBuilder::validate_where).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(id: impl Into<String>, table: impl Into<String>) -> SqlRepairBuilder {
        SqlRepairBuilder {
            id: id.into(),
            table: table.into(),
            key: None,
            set: None,
            filter: None,
            validate_where: None,
            description: None,
            batch: 1000,
            overlap: false,
            count_rows: false,
            target: None,
            partitions: 1,
            journal: Vec::new(),
            window: None,
            after: Vec::new(),
            priority: 0,
            server_slice: None,
        }
    }

    /// The batch statement for `limit` (see [`SqlRepair`]).
    fn batch_text(&self, limit: u32) -> &str {
        if limit == self.batch {
            &self.batch_sql
        } else {
            &self.batch_sql_bound_limit
        }
    }

    /// The batch statement for `limit`, a journaled repair's built on its
    /// first call from the catalog, read on `conn` (see
    /// [`JournaledBatch`]).
    async fn batch_statement(
        &self,
        conn: &AsyncPgConnection,
        limit: u32,
    ) -> Result<&str, RepairError> {
        let (Some(journaled), Some(journal)) = (&self.journaled, &self.journal) else {
            return Ok(self.batch_text(limit));
        };
        let [fixed, bound] = journaled
            .texts
            .get_or_try_init(|| async {
                let arrays = journal_array_columns(conn, &journal.table, &journal.columns).await?;
                let text =
                    |limit: &str| journaled_batch_sql(&self.id, journaled, limit, journal, &arrays);
                Ok::<_, RepairError>([text(&self.batch.to_string()), text("$3")])
            })
            .await?;
        Ok(if limit == self.batch { fixed } else { bound })
    }
}

impl SqlRepairBuilder {
    /// The key column: unique, not null, of an integer type.
    pub fn key(mut self, column: impl Into<String>) -> Self {
        self.key = Some(column.into());
        self
    }

    /// The SET list of the update (`email_norm = lower(email)`): trusted
    /// SQL from application code, never user input.
    pub fn set(mut self, assignments: impl Into<String>) -> Self {
        self.set = Some(assignments.into());
        self
    }

    /// Only rows matching this predicate (`email IS NOT NULL`) are
    /// selected, updated and validated: trusted SQL, never user input.
    pub fn filter(mut self, predicate: impl Into<String>) -> Self {
        self.filter = Some(predicate.into());
        self
    }

    /// The postcondition, as the predicate of the rows that violate it
    /// (`email_norm IS DISTINCT FROM lower(email)`): validation succeeds
    /// when no row up to the bound (and matching the filter) matches it.
    /// Trusted SQL, never user input.
    pub fn validate_where(mut self, violation: impl Into<String>) -> Self {
        self.validate_where = Some(violation.into());
        self
    }

    /// Keys per batch (default 1000), written into the statement text
    /// (see [`Repair::batch_limit`]). Registration refuses 0.
    pub fn batch_size(mut self, keys: u32) -> Self {
        self.batch = keys;
        self
    }

    /// Size batches toward `duration` within `[min, max]` keys instead of
    /// the fixed [`batch_size`](SqlRepairBuilder::batch_size) (what
    /// [`Repair::batch_target`] answers; THR-3). Registration refuses a
    /// range that is empty or starts at 0.
    pub fn target_batch(mut self, duration: std::time::Duration, min: u32, max: u32) -> Self {
        self.target = Some(BatchTarget { duration, min, max });
        self
    }

    /// Start batches only from `start_hour:00` to `end_hour:00` UTC (what
    /// [`Repair::run_window`] answers; FLT-3); an end not after the start
    /// wraps past midnight. [`SqlRepairBuilder::build`] refuses an hour
    /// past 23 and equal hours (a window that never opens).
    pub fn run_window(mut self, start_hour: u64, end_hour: u64) -> Self {
        self.window = Some((start_hour, end_hour));
        self
    }

    /// Start only after the repairs `ids` (stable IDs registered in the
    /// same process) are `completed` in the same database (what
    /// [`Repair::after`] answers; FLT-4). Registration refuses an unknown
    /// ID and a cycle.
    pub fn after<I>(mut self, ids: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.after.extend(ids.into_iter().map(Into::into));
        self
    }

    /// What [`Repair::priority`] answers (default 0): higher goes first
    /// when runners are scarce (FLT-2).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// What [`Repair::overlap_commits`] answers (default `false`). Say
    /// `true` only when the SET expression and the filter read nothing an
    /// earlier batch of this repair writes on other rows.
    pub fn overlap_commits(mut self, overlap: bool) -> Self {
        self.overlap = overlap;
        self
    }

    /// Run the batches in a loop inside the server (EX-8, what
    /// [`Repair::server_batch`] answers): one call runs batch after batch,
    /// each its own transaction committing the rows with the fenced
    /// checkpoint, and starts none after `slice`; the engine sends one
    /// call per step instead of one message per batch. It costs less CPU
    /// per row, on both sides, than batches sent one by one. Pauses,
    /// throttles and settings act between calls, and a call is bounded by
    /// `slice` plus the engine's statement timeout (EX-5). A batch runs
    /// in the loop only at the declared
    /// [`batch_size`](SqlRepairBuilder::batch_size); one at another size
    /// (an operator's setting) is sent by the engine as usual.
    /// [`build`](SqlRepairBuilder::build) refuses a zero slice and a
    /// [`target_batch`](SqlRepairBuilder::target_batch). The engine's role
    /// needs the right to create procedures in the first schema of its
    /// search path.
    pub fn server_loop(mut self, slice: Duration) -> Self {
        self.server_slice = Some(slice);
        self
    }

    /// Count the source set at `start` (`count(*)` with the filter), so
    /// progress shows a total. Off by default: the count scans the table
    /// inside the start transaction, bounded by the validation timeout.
    pub fn count_rows(mut self, count: bool) -> Self {
        self.count_rows = count;
        self
    }

    /// Run in up to `partitions` contiguous key ranges at once (PAR-1,
    /// default 1): `start` divides `[min(key), bound]` into ranges of equal
    /// width ([`even_splits`]). Registration refuses 0 or more than
    /// [`super::MAX_PARTITIONS`].
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// Journal `columns`, the ones the SET list writes, so the backfill can
    /// be undone (what [`Repair::journal`] answers; UNDO-1). Each batch's
    /// statement then reads those columns with the keys it selects,
    /// updates exactly the row versions it read, and inserts one journal
    /// entry of every row it wrote, all in the one statement that commits with the batch's
    /// fenced checkpoint. Registration checks the names.
    pub fn journal<I>(mut self, columns: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.journal = columns.into_iter().map(Into::into).collect();
        self
    }

    /// Operator-facing description (REG-2). Default: the table and the key
    /// column. The SQL itself is never the default: every reader of the
    /// admin API sees the description, and the SET list is application
    /// code that may name what the repair is for.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Check the parts and write the statements. Errors: the stable ID
    /// ([`DefinitionError::InvalidId`]), the table or key name
    /// ([`DefinitionError::InvalidIdentifier`]), a missing key, SET list
    /// or validation predicate ([`DefinitionError::Incomplete`]), a run
    /// window that never opens ([`DefinitionError::InvalidRunWindow`]), or
    /// a loop inside the server that cannot run
    /// ([`DefinitionError::InvalidServerLoop`]).
    pub fn build(self) -> Result<SqlRepair, DefinitionError> {
        validate_id(&self.id)?;
        check_identifier(&self.table, true)?;
        let incomplete = |missing| DefinitionError::Incomplete {
            id: self.id.clone(),
            missing,
        };
        let key = self
            .key
            .as_deref()
            .ok_or_else(|| incomplete("key column"))?;
        check_identifier(key, false)?;
        let set = self.set.as_deref().ok_or_else(|| incomplete("SET list"))?;
        let violation = self
            .validate_where
            .as_deref()
            .ok_or_else(|| incomplete("validation predicate"))?;
        let window =
            match self.window {
                Some((start, end)) => Some(RunWindow::new(start, end).map_err(|e| {
                    DefinitionError::InvalidRunWindow {
                        id: self.id.clone(),
                        reason: e.to_string(),
                    }
                })?),
                None => None,
            };
        if let Some(slice) = self.server_slice {
            let refuse = |reason| DefinitionError::InvalidServerLoop {
                id: self.id.clone(),
                reason,
            };
            if slice.is_zero() {
                return Err(refuse("the time slice is zero"));
            }
            if self.target.is_some() {
                return Err(refuse(
                    "it runs at the declared batch size, not toward a target duration",
                ));
            }
        }
        let table = &self.table;
        let and_filter = match &self.filter {
            Some(filter) => format!(" AND ({filter})"),
            None => String::new(),
        };
        let where_filter = match &self.filter {
            Some(filter) => format!(" WHERE ({filter})"),
            None => String::new(),
        };
        let count = if self.count_rows {
            ", count(*) AS n"
        } else {
            ""
        };
        let journal = (!self.journal.is_empty()).then(|| Journal {
            table: table.clone(),
            key_columns: vec![key.to_string()],
            columns: self.journal.clone(),
            by_statement: true,
        });
        // The keys read as bigint whatever the column's integer type, so
        // the summary decodes as `BigIntSummary`; for a bigint column the
        // cast is no cast at all.
        let batch_sql = |limit: &str| {
            let keys = format!(
                "WITH k AS (SELECT array_agg({key}::bigint ORDER BY {key}) AS a FROM (\
                     SELECT {key} FROM {table} WHERE {key} > $1 AND {key} <= $2{and_filter} \
                     ORDER BY {key} LIMIT {limit}) AS s), "
            );
            let summary = "SELECT a[1] AS first, a[cardinality(a)] AS last, \
                 coalesce(cardinality(a), 0)::bigint AS n FROM k";
            match &journal {
                None => format!(
                    "{keys}u AS (UPDATE {table} SET {set} \
                         WHERE {key} = ANY((SELECT a FROM k)::bigint[]){and_filter}) {summary}"
                ),
                // Built on the first batch; see `JournaledBatch`.
                Some(_) => String::new(),
            }
        };
        let lock_sql = |limit: &str| {
            format!(
                "SELECT 1 FROM {table} WHERE {key} > $1 AND {key} <= $2{and_filter} \
                 ORDER BY {key} LIMIT {limit} FOR NO KEY UPDATE"
            )
        };
        let journaled = journal.as_ref().map(|_| JournaledBatch {
            key: key.to_string(),
            set: set.to_string(),
            and_filter: and_filter.clone(),
            texts: Arc::default(),
            lock: [lock_sql(&self.batch.to_string()), lock_sql("$3")],
            contended: Arc::default(),
        });
        Ok(SqlRepair {
            description: self
                .description
                .clone()
                .unwrap_or_else(|| format!("SQL repair of {table}, by {key}")),
            batch: self.batch,
            overlap: self.overlap,
            bound_sql: format!(
                "SELECT max({key})::bigint AS max{count} FROM {table}{where_filter}"
            ),
            count_rows: self.count_rows,
            batch_sql: batch_sql(&self.batch.to_string()),
            batch_sql_bound_limit: batch_sql("$3"),
            validate_sql: format!(
                "SELECT count(*) AS n FROM {table} \
                 WHERE {key} <= $1{and_filter} AND ({violation})"
            ),
            table: table.clone(),
            target: self.target,
            partitions: self.partitions,
            min_sql: format!("SELECT min({key})::bigint AS max FROM {table}{where_filter}"),
            count_sql: format!(
                "SELECT count(*) AS n FROM {table} WHERE {key} > $1 AND {key} <= $2{and_filter}"
            ),
            estimate_sql: [
                format!("EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {key} > "),
                format!(" AND {key} <= "),
                and_filter.clone(),
            ],
            journal,
            journaled,
            window,
            after: self.after,
            priority: self.priority,
            server_slice: self.server_slice,
            id: self.id,
        })
    }
}

/// The one-statement batch of a journaled declared repair (UNDO-1): it
/// selects the next keys with their rows' journaled columns, updates
/// exactly the row versions it read, and inserts one journal entry of
/// them, answering the summary.
///
/// The rows are not locked ahead of the update. Instead the update finds
/// each row by the `ctid` (and table, for a partitioned or inherited
/// table) of the version the selection read: when another transaction
/// changed the row after the statement's snapshot, PostgreSQL re-checks
/// the update's conditions on the newest version, whose `ctid` differs,
/// and leaves the row out. The summary then passes the selected and written
/// counts through `backfill_journal_all_written`, which fails the whole
/// batch with a serialization failure (retryable) when they differ, so a
/// before-image is always the version the batch changed and no selected
/// row goes unwritten. The selection reads the keys from the snapshot, as
/// the unjournaled batch does, so the checkpoint never passes a row that
/// was not selected. Without the lock and the second index probe per key
/// a batch costs about a third less server time.
///
/// Every row the update wrote is journaled, also one its SET list left
/// with equal values (its undo writes those same values back): comparing
/// the images would need an equality operator of every journaled type
/// (`json` has none) or a JSON image per row.
fn journaled_batch_sql(
    id: &str,
    batch: &JournaledBatch,
    limit: &str,
    journal: &Journal,
    array_columns: &[String],
) -> String {
    let (table, key, set, and_filter) = (&journal.table, &batch.key, &batch.set, &batch.and_filter);
    let before: Vec<String> = journal
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(", {c} AS __bf_b{i}"))
        .collect();
    let returning: Vec<String> = journal
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(", __bf_o.__bf_b{i}, {table}.{c} AS __bf_a{i}"))
        .collect();
    format!(
        "WITH __bf_o AS (SELECT ctid AS __bf_ctid, tableoid AS __bf_rel, \
             {key}::bigint AS __bf_k0{before} \
             FROM {table} WHERE {key} > $1 AND {key} <= $2{and_filter} \
             ORDER BY {key} LIMIT {limit}), \
         u AS (UPDATE {table} SET {set} FROM __bf_o \
             WHERE {table}.ctid = __bf_o.__bf_ctid AND {table}.tableoid = __bf_o.__bf_rel \
             RETURNING __bf_o.__bf_k0{returning}), \
         __bf_w AS ({insert}) \
         SELECT min(__bf_k0) AS first, max(__bf_k0) AS last, \
             backfill_journal_all_written(count(*), (SELECT count(*) FROM u)) AS n FROM __bf_o",
        before = before.concat(),
        returning = returning.concat(),
        insert = journal_entry_from(
            id,
            "u",
            &journal.key_columns,
            &journal.columns,
            array_columns
        ),
    )
}

/// A plain SQL identifier, `[a-z_][a-z0-9_]*` of at most 63 bytes; with
/// `qualified`, optionally `schema.name`. Anything else could carry SQL
/// into the statement text, or name another relation. Upper case is
/// refused rather than quoted: PostgreSQL folds an unquoted `Items` to
/// `items`, so the name written would not be the one used, and a table
/// created quoted as `"Items"` would not be the one repaired.
pub(super) fn check_identifier(name: &str, qualified: bool) -> Result<(), DefinitionError> {
    let plain = |part: &str| {
        let mut bytes = part.bytes();
        part.len() <= MAX_IDENTIFIER_BYTES
            && bytes
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    let ok = match name.split_once('.') {
        Some((schema, table)) => qualified && plain(schema) && plain(table),
        None => plain(name),
    };
    if ok {
        Ok(())
    } else {
        Err(DefinitionError::InvalidIdentifier(super::bounded(
            name.chars().take(140).collect::<String>(),
        )))
    }
}

#[derive(QueryableByName)]
struct Bound {
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
}

#[derive(QueryableByName)]
struct BoundAndCount {
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// `EXPLAIN (FORMAT JSON)`'s one row.
#[derive(QueryableByName)]
struct Plan {
    #[diesel(sql_type = Json, column_name = "QUERY PLAN")]
    plan: serde_json::Value,
}

#[async_trait]
impl Repair for SqlRepair {
    type Key = i64;

    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    fn overlap_commits(&self) -> bool {
        self.overlap
    }

    fn batch_target(&self) -> Option<BatchTarget> {
        self.target
    }

    fn run_window(&self) -> Option<RunWindow> {
        self.window
    }

    fn after(&self) -> Vec<String> {
        self.after.clone()
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn tables(&self) -> Vec<String> {
        vec![self.table.clone()]
    }

    fn partitions(&self) -> u32 {
        self.partitions
    }

    fn journal(&self) -> Option<Journal> {
        self.journal.clone()
    }

    async fn server_batch(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, RepairError> {
        let Some(slice) = self.server_slice else {
            return Ok(None);
        };
        Ok(Some(ServerBatch {
            statement: self.batch_statement(conn, self.batch).await?.to_string(),
            slice,
        }))
    }

    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &i64,
        partitions: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let row: Bound = cached(diesel::sql_query(self.min_sql.as_str()))
            .get_result(conn)
            .await?;
        Ok(even_splits(row.max.unwrap_or(*bound), *bound, partitions))
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let query = cached(diesel::sql_query(self.bound_sql.as_str()));
        let (max, rows) = if self.count_rows {
            let row: BoundAndCount = query.get_result(conn).await?;
            (row.max, Some(row.n))
        } else {
            let row: Bound = query.get_result(conn).await?;
            (row.max, None)
        };
        Ok(match max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded { upper, rows },
        })
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::OneStatement(self)
    }

    async fn remaining_rows(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        exact: bool,
    ) -> Result<RowCount, RepairError> {
        let after = after.copied().unwrap_or(i64::MIN);
        if exact {
            let rows: Count = cached(
                diesel::sql_query(self.count_sql.as_str())
                    .bind::<BigInt, _>(after)
                    .bind::<BigInt, _>(*bound),
            )
            .get_result(conn)
            .await?;
            return Ok(RowCount::Exact(rows.n));
        }
        // The keys are integers formatted here, never caller text; as
        // literals they let the planner use the column's histogram, which
        // a generic plan of `$1` would not.
        let [head, middle, tail] = &self.estimate_sql;
        let text = format!("{head}{after}{middle}{bound}{tail}");
        let plan: Plan = diesel::sql_query(text).get_result(conn).await?;
        Ok(plan.plan[0]["Plan"]["Plan Rows"]
            .as_f64()
            .map_or(RowCount::Unknown, |rows| RowCount::Estimate(rows as i64)))
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        // No bound (an empty source set): `key <= NULL` holds for no row,
        // and the statement still runs, so a missing column still shows.
        let bad: Count = cached(
            diesel::sql_query(self.validate_sql.as_str())
                .bind::<Nullable<BigInt>, _>(bound.copied()),
        )
        .get_result(conn)
        .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "{} rows up to the bound violate the validation predicate",
                bad.n
            ))
        })
    }
}

#[async_trait]
impl SelectAndMutate<i64> for SqlRepair {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let text = self.batch_statement(conn, limit).await?;
        let bind = |text: &str| {
            let query = diesel::sql_query(text)
                .into_boxed()
                .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
                .bind::<BigInt, _>(*bound);
            if limit == self.batch {
                query
            } else {
                query.bind::<BigInt, _>(i64::from(limit))
            }
        };
        let Some(journaled) = &self.journaled else {
            let row: BigIntSummary = cached(bind(text)).get_result(conn).await?;
            return Ok(row.into());
        };
        // A journaled batch reads its rows without locks and fails when one
        // changed before its update (see `journaled_batch_sql`). Where that
        // happened, the next batches (the retry first) lock the rows they
        // will select before the batch statement runs: under READ
        // COMMITTED that statement's snapshot is taken after the locks are
        // held, so the versions it reads are the ones it updates, and a
        // hot row waits for the batch instead of failing it.
        let contended = &journaled.contended;
        if AtomicU32::load(contended, Ordering::Relaxed) > 0 {
            let [fixed, bound_limit] = &journaled.lock;
            let lock = if limit == self.batch {
                fixed
            } else {
                bound_limit
            };
            cached(bind(lock)).execute(conn).await?;
            let _ =
                contended.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        match cached(bind(text)).get_result::<BigIntSummary>(conn).await {
            Ok(row) => Ok(row.into()),
            Err(error) => {
                if matches!(&error, diesel::result::Error::DatabaseError(_, info)
                    if info.message() == JOURNAL_RACE)
                {
                    contended.store(CONTENDED_BATCHES, Ordering::Relaxed);
                }
                Err(error.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> SqlRepairBuilder {
        SqlRepair::new("items.email-norm.v1", "items")
            .key("id")
            .set("email_norm = lower(email)")
            .validate_where("email_norm IS DISTINCT FROM lower(email)")
    }

    /// EX-8: a loop inside the server needs a time slice and runs at the
    /// declared batch size; its declaration answers `server_batch` with
    /// the repair's own batch statement (checked against PostgreSQL by
    /// the conformance suite).
    #[test]
    fn ex08_server_loop_refuses_a_zero_slice_and_a_target() {
        let refused = |b: SqlRepairBuilder| match b.build() {
            Err(DefinitionError::InvalidServerLoop { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            refused(items().server_loop(Duration::ZERO)),
            "the time slice is zero"
        );
        let target = items()
            .server_loop(Duration::from_millis(200))
            .target_batch(Duration::from_millis(100), 10, 1000);
        assert!(refused(target).contains("target duration"));
        let built = items().server_loop(Duration::from_millis(200)).build();
        assert_eq!(
            built.expect("valid").server_slice,
            Some(Duration::from_millis(200))
        );
    }

    #[test]
    fn emb04_identifiers_are_plain_or_schema_qualified() {
        for good in ["items", "_t1", "app.items", &"a".repeat(63)] {
            assert!(check_identifier(good, true).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1items",
            "items; DROP TABLE x",
            "\"items\"",
            "a.b.c",
            ".items",
            "items.",
            "it-ems",
            "Items",
            "app.Items",
            "ITEMS",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(
                    check_identifier(bad, true),
                    Err(DefinitionError::InvalidIdentifier(_))
                ),
                "{bad}"
            );
        }
        assert!(check_identifier("app.id", false).is_err());
    }

    #[test]
    fn emb04_statements_carry_the_batch_size_and_the_filter() {
        let repair = items()
            .filter("email IS NOT NULL")
            .batch_size(250)
            .build()
            .expect("valid");
        assert!(
            repair.batch_sql.contains("LIMIT 250)"),
            "{}",
            repair.batch_sql
        );
        assert_eq!(repair.batch_text(250), repair.batch_sql);
        assert!(repair.batch_text(10).contains("LIMIT $3)"));
        // The filter guards the selection and the update alike.
        assert_eq!(
            repair.batch_sql.matches("AND (email IS NOT NULL)").count(),
            2
        );
        assert!(repair
            .bound_sql
            .ends_with("FROM items WHERE (email IS NOT NULL)"));
        assert!(repair
            .validate_sql
            .ends_with("AND (email IS NOT NULL) AND (email_norm IS DISTINCT FROM lower(email))"));
        let plain = items().build().expect("valid");
        assert!(!plain.batch_sql.contains("AND ("), "{}", plain.batch_sql);
        assert_eq!(plain.bound_sql, "SELECT max(id)::bigint AS max FROM items");
    }

    #[test]
    fn flt03_a_declared_run_window_is_checked_at_build() {
        let night = items().run_window(22, 6).build().expect("valid");
        assert_eq!(night.run_window(), Some(RunWindow::new(22, 6).unwrap()));
        assert_eq!(items().build().expect("valid").run_window(), None);
        for (start, end) in [(5, 5), (24, 1), (0, 30)] {
            match items().run_window(start, end).build() {
                Err(DefinitionError::InvalidRunWindow { id, .. }) => {
                    assert_eq!(id, "items.email-norm.v1")
                }
                Err(other) => panic!("{start}-{end}: {other:?}"),
                Ok(_) => panic!("{start}-{end} accepted"),
            }
        }
    }

    #[test]
    fn emb04_missing_parts_are_typed_errors() {
        let missing = |builder: SqlRepairBuilder| match builder.build() {
            Err(DefinitionError::Incomplete { missing, .. }) => missing,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            missing(
                SqlRepair::new("t.v1", "t")
                    .set("a = 1")
                    .validate_where("false")
            ),
            "key column"
        );
        assert_eq!(
            missing(
                SqlRepair::new("t.v1", "t")
                    .key("id")
                    .validate_where("false")
            ),
            "SET list"
        );
        assert_eq!(
            missing(SqlRepair::new("t.v1", "t").key("id").set("a = 1")),
            "validation predicate"
        );
    }

    /// EMB-4: what the built repair answers through the `Repair` trait is
    /// what its builder was told, and the defaults are the documented ones:
    /// the engine reads the batch size, target, overlap, tables and
    /// partitions from these answers only, so a setter whose value never
    /// reaches them would change nothing the engine does.
    #[test]
    fn emb04_built_repair_answers_with_its_builder_settings() {
        let plain = items().build().expect("valid");
        assert_eq!(plain.id(), "items.email-norm.v1");
        assert_eq!(plain.description(), "SQL repair of items, by id");
        assert!(!plain.description().contains("lower"), "no SQL shown");
        assert_eq!(plain.batch_limit(), 1000);
        assert!(!plain.overlap_commits());
        assert_eq!(plain.batch_target(), None);
        assert_eq!(plain.tables(), vec!["items".to_string()]);
        assert_eq!(plain.partitions(), 1);

        let target = BatchTarget {
            duration: std::time::Duration::from_millis(80),
            min: 5,
            max: 500,
        };
        let tuned = SqlRepair::new("events.fix.v1", "app.events")
            .key("id")
            .set("n = 0")
            .validate_where("n <> 0")
            .description("reset n on every event")
            .batch_size(250)
            .target_batch(target.duration, target.min, target.max)
            .overlap_commits(true)
            .partitions(4)
            .build()
            .expect("valid");
        assert_eq!(tuned.id(), "events.fix.v1");
        assert_eq!(tuned.description(), "reset n on every event");
        assert_eq!(tuned.batch_limit(), 250);
        assert!(tuned.overlap_commits());
        assert_eq!(tuned.batch_target(), Some(target));
        assert_eq!(tuned.tables(), vec!["app.events".to_string()]);
        assert_eq!(tuned.partitions(), 4);
    }

    /// EMB-4: a SQL definition's batch form reads as its name in logs and
    /// assertions.
    #[test]
    fn emb04_sql_batch_form_debugs_as_its_name() {
        let sql = SqlRepair::new("t.v1", "t")
            .key("id")
            .set("a = 1")
            .validate_where("a <> 1")
            .build()
            .expect("valid");
        assert_eq!(format!("{:?}", sql.batches()), "Batches::OneStatement");
    }
}
