//! The [`Repair`] trait developers implement, and the [`Registry`] of local
//! definitions a process reconciles before it claims anything (REG-4).
//!
//! A repair is application code. It owns its own SQL over its own tables
//! (selection, mutation, validation); the engine owns everything about
//! progress: it hands the repair the transaction's connection, checks what
//! the selection returned against the batch limit and the key range, and
//! commits the mutation together with the checkpoint (EX-6).

pub use crate::failure::{bounded, RepairError, MAX_DIAGNOSTIC_BYTES};
use crate::key::Key;
use async_trait::async_trait;
use diesel_async::AsyncPgConnection;

mod check;
mod dependencies;
mod erased;
mod journal;
mod partition;
mod registry;
mod server;
mod sql;
mod undo;

pub use check::SelectionError;
pub(crate) use erased::{BodyError, DynRepair, EncodedSource, SelectedBatch};
pub use journal::Journal;
pub use partition::{even_splits, plan_partitions, SplitError, MAX_PARTITIONS};
pub use registry::Registry;
pub use server::ServerBatch;
pub use sql::{SqlRepair, SqlRepairBuilder};
pub use undo::{undo_id, UNDO_SUFFIX};

/// What `start` found when it captured the source set (EX-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSet<K> {
    /// Nothing to repair: the backfill goes straight to `validating`.
    Empty,
    /// Work up to and including `upper`. `rows` is the size of the set when
    /// the definition can count it cheaply; `None` shows progress as unknown.
    Bounded {
        /// The inclusive upper bound: the greatest key of the source set.
        upper: K,
        /// The size of the set, when the definition can count it cheaply.
        rows: Option<i64>,
    },
}

/// How many rows a range holds, as a repair could tell (what a dry run's
/// forecast says, DRY-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowCount {
    /// Counted.
    Exact(i64),
    /// The planner's estimate (or another guess): shown labelled as one.
    Estimate(i64),
    /// Not known.
    Unknown,
}

/// The outcome of a repair's validation (VAL-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// The postcondition holds over the whole range up to the bound.
    Success,
    /// The postcondition does not hold; the message is a bounded, redacted
    /// diagnostic for the operator (no row values).
    Failure(String),
    /// The postcondition cannot be checked because a prerequisite is unmet
    /// (e.g. a column is missing); leads to `blocked`, not `failed` (VAL-3).
    Blocked(String),
}

/// What a one-statement batch ([`SelectAndMutate::select_and_mutate`]) selected
/// and mutated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutated<K> {
    /// No key in `(after, bound]`: the rest of the range needs nothing,
    /// and the checkpoint moves to the bound.
    Nothing,
    /// `count` keys from `first` to `last` (both inclusive) were selected
    /// and mutated.
    Keys {
        /// The least key selected.
        first: K,
        /// The greatest key selected: the batch's new checkpoint.
        last: K,
        /// How many keys were selected, at most the batch limit (EX-4).
        count: u32,
    },
    /// A summary whose keys and count disagree: a count of keys without a
    /// first or last key, or only one of the two (say, first and last
    /// read from `UPDATE .. RETURNING` rows that concurrent deletes
    /// removed, and the count from the selected keys). The engine rejects
    /// it and the batch rolls back (EX-3); read as "nothing left" it would
    /// move the checkpoint to the bound past keys nobody repaired.
    Inconsistent,
}

impl<K> Mutated<K> {
    /// The summary from a statement's `min(key)`, `max(key)` and
    /// `count(*)` over the selected keys: no first and no last key with a
    /// count of 0 is [`Mutated::Nothing`]; any other shape without both
    /// keys is [`Mutated::Inconsistent`]. A count that does not fit a
    /// `u32` becomes `u32::MAX`, which the engine's limit check rejects.
    pub fn from_summary(first: Option<K>, last: Option<K>, count: i64) -> Self {
        match (first, last) {
            (Some(first), Some(last)) => Mutated::Keys {
                first,
                last,
                count: u32::try_from(count).unwrap_or(u32::MAX),
            },
            (None, None) if count == 0 => Mutated::Nothing,
            _ => Mutated::Inconsistent,
        }
    }
}

/// The answer row of a one-statement batch over a `bigint` key: the
/// statement ends in `SELECT min(id) AS first, max(id) AS last, count(*) AS
/// n FROM ..` over the keys it selected. Load it with diesel and convert it
/// with `Mutated::from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
pub struct BigIntSummary {
    /// The smallest key selected; `NULL` when none was.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub first: Option<i64>,
    /// The greatest key selected; `NULL` when none was.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub last: Option<i64>,
    /// How many keys were selected.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub n: i64,
}

impl From<BigIntSummary> for Mutated<i64> {
    fn from(row: BigIntSummary) -> Self {
        Mutated::from_summary(row.first, row.last, row.n)
    }
}

/// A data repair, defined in application code.
///
/// Implementations must be deterministic functions of the database: every
/// process that registers the same [`Repair::id`] runs the same behaviour
/// (REG-3). Different behaviour needs a new stable ID.
///
/// # Example
///
/// A repair that fills `email_norm` for every existing row of `items`, keyed
/// by the bigint primary key, in the one-statement form. (For this shape of
/// repair, one table and one integer key, [`SqlRepair`] writes the same
/// statements from a few lines of builder.)
///
/// ```
/// use backfill::repair::{
///     Batches, BigIntSummary, Mutated, Repair, RepairError, SelectAndMutate, SourceSet,
///     Validation,
/// };
/// use backfill::{async_trait, AsyncPgConnection};
/// use diesel::sql_types::{BigInt, Nullable};
/// use diesel::QueryableByName;
/// use diesel_async::RunQueryDsl;
///
/// /// Parametrized by table: each table's repair has its own stable ID
/// /// (EMB-2). The table name comes from code, never from input.
/// pub struct NormalizeEmail {
///     id: String,
///     table: &'static str,
/// }
///
/// impl NormalizeEmail {
///     pub fn for_table(table: &'static str) -> Self {
///         Self { id: format!("{table}.normalize-email.v1"), table }
///     }
/// }
///
/// #[derive(QueryableByName)]
/// struct MaxId {
///     #[diesel(sql_type = Nullable<BigInt>)]
///     max: Option<i64>,
/// }
///
/// #[derive(QueryableByName)]
/// struct Count {
///     #[diesel(sql_type = BigInt)]
///     n: i64,
/// }
///
/// #[async_trait]
/// impl Repair for NormalizeEmail {
///     type Key = i64;
///
///     fn id(&self) -> &str {
///         &self.id
///     }
///
///     fn batch_limit(&self) -> u32 {
///         1000
///     }
///
///     async fn capture_bound(
///         &self,
///         conn: &mut AsyncPgConnection,
///     ) -> Result<SourceSet<i64>, RepairError> {
///         let row: MaxId = diesel::sql_query(format!("SELECT max(id) AS max FROM {}", self.table))
///             .get_result(conn)
///             .await?;
///         Ok(match row.max {
///             None => SourceSet::Empty,
///             Some(upper) => SourceSet::Bounded { upper, rows: None },
///         })
///     }
///
///     // The one batch form this repair implements; the compiler checks
///     // that `SelectAndMutate<i64>` is implemented below.
///     fn batches(&self) -> Batches<'_, i64> {
///         Batches::OneStatement(self)
///     }
///
///     async fn validate(
///         &self,
///         conn: &mut AsyncPgConnection,
///         bound: Option<&i64>,
///     ) -> Result<Validation, RepairError> {
///         let bad: Count = diesel::sql_query(format!(
///             "SELECT count(*) AS n FROM {} \
///              WHERE id <= $1 AND email_norm IS DISTINCT FROM lower(email)",
///             self.table
///         ))
///         .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
///         .get_result(conn)
///         .await?;
///         Ok(if bad.n == 0 {
///             Validation::Success
///         } else {
///             Validation::Failure(format!("{} rows up to the bound are not normalized", bad.n))
///         })
///     }
/// }
///
/// // One statement per batch, which the engine pipelines behind the
/// // previous batch's commit (one round trip per batch). It reports what
/// // it selected: first key, last key, count.
/// #[async_trait]
/// impl SelectAndMutate<i64> for NormalizeEmail {
///     async fn select_and_mutate(
///         &self,
///         conn: &mut &AsyncPgConnection,
///         after: Option<&i64>,
///         bound: &i64,
///         _limit: u32,
///     ) -> Result<Mutated<i64>, RepairError> {
///         // The engine always passes `batch_limit()` as the limit; written
///         // into the text, it lets PostgreSQL cache one generic plan. The
///         // keys go into one array; the update and the summary read it.
///         let row: BigIntSummary = diesel::sql_query(format!(
///             "WITH k AS (SELECT array_agg(id ORDER BY id) AS a FROM ( \
///                  SELECT id FROM {t} WHERE id > $1 AND id <= $2 \
///                  ORDER BY id LIMIT 1000) AS s), \
///              u AS (UPDATE {t} SET email_norm = lower(email) \
///                  WHERE id = ANY((SELECT a FROM k)::bigint[])) \
///              SELECT a[1] AS first, a[cardinality(a)] AS last, \
///                  coalesce(cardinality(a), 0)::bigint AS n FROM k",
///             t = self.table
///         ))
///         .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
///         .bind::<BigInt, _>(*bound)
///         .get_result(conn)
///         .await?;
///         Ok(row.into())
///     }
/// }
/// ```
///
/// The two-statement form is the same with `Batches::TwoStatements(self)`
/// and an implementation of [`SelectThenMutate`] (`select_keys`, then
/// `mutate` with exactly those keys).
#[async_trait]
pub trait Repair: Send + Sync + 'static {
    /// The ordering key: checkpoint and bound are values of this type (EX-2).
    type Key: Key;

    /// The stable ID: 1-128 characters of `[a-z0-9._-]`, never reused for
    /// different behaviour (REG-3).
    ///
    /// The repair value owns it, so a parametrized repair computes its own
    /// (`items.email-norm.v1` and `orders.email-norm.v1` from one type,
    /// EMB-2). [`Registry::register`] reads and checks it once; the
    /// process uses that ID from then on, so it must not depend on
    /// anything but the repair's parameters.
    fn id(&self) -> &str;

    /// Diagnostic description (REG-2: last write wins, never a fence).
    fn description(&self) -> &str {
        ""
    }

    /// Maximum keys per batch (EX-4). The engine rejects a selection that
    /// returns more.
    ///
    /// The engine passes the size in force as the `limit` of every
    /// [`SelectThenMutate::select_keys`] and
    /// [`SelectAndMutate::select_and_mutate`] call: this value, unless an
    /// operator set a batch size or a target batch duration applies
    /// ([`Repair::batch_target`], THR-3). A repair may write this value
    /// into its statement text (`LIMIT 500`) and bind only other limits
    /// (`LIMIT $3`). That is worth doing: PostgreSQL's
    /// generic plan for a bound limit cannot know how many rows the
    /// statement reads, so the plan cache may keep choosing a custom plan
    /// and plan the statement anew for every batch; a literal limit lets
    /// the cached generic plan serve every batch of that size.
    fn batch_limit(&self) -> u32;

    /// A target batch duration in place of the fixed [`Repair::batch_limit`]
    /// (THR-3): the engine sizes each batch within the target's range
    /// toward the duration, from the measured cost of the batches before.
    /// An operator's settings override it. Default: none, a fixed size.
    fn batch_target(&self) -> Option<crate::throttle::sizing::BatchTarget> {
        None
    }

    /// The UTC hours in which the repair's batches may start (FLT-3):
    /// outside them its runners hold back, shown as the throttle condition
    /// `outside_window` with the next opening. An operator's
    /// `window_start_hour` and `window_end_hour` settings override it.
    /// Default: none, any hour.
    fn run_window(&self) -> Option<crate::throttle::window::RunWindow> {
        None
    }

    /// The stable IDs of the repairs this one starts after (FLT-4): while
    /// any of them is not `completed` in the same database, this backfill
    /// is not claimed. A `start` before then is accepted and the backfill
    /// waits, shown as `waiting_for` in the admin view; automatic mode
    /// starts it and it waits the same way. Every ID must be registered in
    /// the same process, and the dependencies must not form a cycle:
    /// both are registration errors naming the IDs. Default: none.
    fn after(&self) -> Vec<String> {
        Vec::new()
    }

    /// Which work goes first when runners are scarce (FLT-2): a claim
    /// takes the highest-priority claimable backfill of its database,
    /// and in a fleet with a runner budget a database with
    /// higher-priority work waiting gets the next free runner before
    /// one with lower. Equal priorities keep the usual order. Default 0.
    fn priority(&self) -> i32 {
        0
    }

    /// The tables the repair writes, as PostgreSQL names them
    /// (`events`, `app.events`): sessions waiting for a lock on one of
    /// them hold this repair's batches back when the lock-waiter
    /// threshold is set (THR-1). Default: none.
    fn tables(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many rows a batch run over `(after, bound]` would select (`after`
    /// `None`: from the start), for a dry run's forecast (DRY-2). The
    /// engine first asks with `exact` true, inside a savepoint under a
    /// short statement timeout, so a count that takes too long is
    /// cancelled and rolled back; it then asks again with `exact` false,
    /// where a cheap estimate (the planner's) is the answer. Must be
    /// read-only. Default: [`RowCount::Unknown`], which the forecast
    /// shows as unknown.
    async fn remaining_rows(
        &self,
        _conn: &mut AsyncPgConnection,
        _after: Option<&Self::Key>,
        _bound: &Self::Key,
        _exact: bool,
    ) -> Result<RowCount, RepairError> {
        Ok(RowCount::Unknown)
    }

    /// A sample of the keys in `(after, bound]` (`after` `None`: from the
    /// start) that hold this repair back, at most `limit`, in key order:
    /// the rows an operator must fix before `retry` (RT-4). The engine
    /// asks after a batch or the lifecycle validation blocked, in a
    /// read-only transaction under the batch timeouts, and shows the keys
    /// (never the rows' values) with the blocked backfill. Must be
    /// read-only. Default: none, and the diagnostic alone says what
    /// blocks.
    async fn blocking_keys(
        &self,
        _conn: &mut AsyncPgConnection,
        _after: Option<&Self::Key>,
        _bound: &Self::Key,
        _limit: u32,
    ) -> Result<Vec<Self::Key>, RepairError> {
        Ok(Vec::new())
    }

    /// Whether the engine may run a batch's statements before the previous
    /// batch has committed. It then keeps two connections per claim and
    /// runs batch N+1's body on one while batch N's fence and `COMMIT` run
    /// on the other, so the commit (its WAL flush above all) leaves the
    /// critical path. Nothing else changes: each batch commits its mutation
    /// with its own fenced checkpoint advance, in key order; batch N+1's
    /// fence is sent only after batch N committed and expects batch N's
    /// checkpoint, so if batch N did not commit, batch N+1 rolls back
    /// (EX-6, CLM-2).
    ///
    /// Return `true` only when no batch *reads* what an earlier batch of
    /// this repair wrote. Batch N+1's statements start before batch N
    /// commits, so under READ COMMITTED they see the rows as they were
    /// before batch N. Updating a row that batch N changed is safe: the
    /// UPDATE waits for batch N's commit and applies to the row as batch N
    /// left it, as with any concurrent writer. A repair that derives a row
    /// from its own columns (`SET email_norm = lower(email)`) qualifies; one
    /// that reads a flag an earlier batch set on other rows does not. The
    /// default, `false`, runs batches strictly one after the other.
    ///
    /// The second connection is taken only while at least two more stay
    /// free in the pool (for claims, renewals, validation and the admin
    /// API); without one, the batches of an overlapping repair run one
    /// after the other too.
    fn overlap_commits(&self) -> bool {
        false
    }

    /// How many partitions this backfill may run in (PAR-1): 1 to
    /// [`MAX_PARTITIONS`], checked at registration. Default 1: the
    /// backfill runs on its own row, exactly as the original contract
    /// describes, and [`Repair::split_points`] is never asked.
    fn partitions(&self) -> u32 {
        1
    }

    /// Journal what each batch changes, so the backfill can be undone
    /// (UNDO-1, UNDO-2): the table, its key columns and the columns the
    /// repair sets. Every committed batch then also records, in its own
    /// transaction behind the same fence, the key and the before and after
    /// values of those columns for every row it changed; the operator's
    /// `undo` runs a reverse backfill that restores them where the row
    /// still holds what the repair wrote. Default: `None`, no journal.
    ///
    /// In the two-statement form the engine writes the journal around
    /// [`SelectThenMutate::mutate`]. A hand-written one-statement form
    /// cannot be journaled by the engine (it sees only a summary), so
    /// registration refuses it; [`SqlRepair::journal`](SqlRepairBuilder::journal)
    /// writes the journal inside its own statement.
    fn journal(&self) -> Option<Journal> {
        None
    }

    /// Run this repair's batches in a loop inside the server (EX-8): the
    /// one statement PostgreSQL runs for each batch, and how long one call
    /// may keep starting batches. Asked once per process, on a batch's
    /// connection. Default `None`: every batch is sent by the engine.
    /// Only for a `bigint` key; the engine fails a backfill whose repair
    /// answers it for another key type. [`SqlRepair::server_loop`](SqlRepairBuilder::server_loop)
    /// answers it with its own batch statement.
    async fn server_batch(
        &self,
        _conn: &mut AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, RepairError> {
        Ok(None)
    }

    /// The split points dividing the range up to `bound` into at most
    /// `partitions` contiguous partitions (PAR-1), asked once, at `start`,
    /// inside the transaction that captured the bound. At most
    /// `partitions - 1` keys, strictly increasing and strictly below
    /// `bound`; the engine checks them and refuses the start otherwise
    /// (nothing is written). For a `bigint` key, [`even_splits`] over the
    /// key's `min` and `max`; for any key, a sample (percentiles over
    /// `TABLESAMPLE`, the planner's histogram). No points (the default)
    /// or one range: the backfill runs without partitions.
    async fn split_points(
        &self,
        _conn: &mut AsyncPgConnection,
        _bound: &Self::Key,
        _partitions: u32,
    ) -> Result<Vec<Self::Key>, RepairError> {
        Ok(Vec::new())
    }

    /// Capture the finite source set once, at `start` (EX-1). Runs inside
    /// the transaction that moves the row to `running`.
    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<Self::Key>, RepairError>;

    /// The repair's batch form (EMB-4): `Batches::OneStatement(self)` for
    /// a repair that implements [`SelectAndMutate`],
    /// `Batches::TwoStatements(self)` for one that implements
    /// [`SelectThenMutate`]. A repair implements one form, and the
    /// compiler checks that it implements the one it names.
    ///
    /// The engine asks for every batch, so a repair may decide by its own
    /// parameters, and a wrapper may hand out the form of the repair it
    /// wraps. Prefer the one-statement form: the engine pipelines it
    /// behind the previous batch's commit, one round trip per batch.
    fn batches(&self) -> Batches<'_, Self::Key>;

    /// Check the postcondition over the whole range up to `bound` (`None`
    /// for an empty source set) by reading PostgreSQL (VAL-2). Must be
    /// read-only: explicit validation runs it on `completed` rows (VAL-5).
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&Self::Key>,
    ) -> Result<Validation, RepairError>;
}

/// A repair's batch form, as [`Repair::batches`] hands it to the engine.
pub enum Batches<'a, K> {
    /// Select the keys, then mutate exactly them: three round trips per
    /// batch (select, mutate, fence + COMMIT).
    TwoStatements(&'a dyn SelectThenMutate<K>),
    /// Select and mutate in one statement that reports what it selected:
    /// one round trip per batch, sent behind the previous batch's commit.
    OneStatement(&'a dyn SelectAndMutate<K>),
}

impl<K> Clone for Batches<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Batches<'_, K> {}

impl<K> std::fmt::Debug for Batches<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Batches::TwoStatements(_) => "Batches::TwoStatements",
            Batches::OneStatement(_) => "Batches::OneStatement",
        })
    }
}

/// The two-statement batch form: the engine checks the selected keys
/// (EX-3, EX-4) before the repair mutates them.
#[async_trait]
pub trait SelectThenMutate<K: Key>: Send + Sync {
    /// Up to `limit` keys strictly after `after` (or from the start when
    /// `None`) and at most `bound`, in ascending key order (EX-3). The
    /// engine rejects a selection that is not.
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&K>,
        bound: &K,
        limit: u32,
    ) -> Result<Vec<K>, RepairError>;

    /// Apply the repair to exactly `keys`, on the batch's transaction. The
    /// engine commits this together with the checkpoint or not at all (EX-6).
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[K]) -> Result<(), RepairError>;
}

/// The one-statement batch form.
#[async_trait]
pub trait SelectAndMutate<K: Key>: Send + Sync {
    /// Select up to `limit` keys strictly after `after` and at most
    /// `bound`, mutate them, and report what was *selected* (first key,
    /// last key, count), in one statement such as `WITH k AS (SELECT
    /// array_agg(id ORDER BY id) AS a FROM (SELECT .. LIMIT 1000) AS s), u
    /// AS (UPDATE .. WHERE id = ANY((SELECT a FROM k)::bigint[])) SELECT
    /// a[1], a[cardinality(a)], cardinality(a) FROM k`. That saves a round
    /// trip and the keys' transfer both ways per batch. Collecting the keys
    /// into one array costs less than scanning a materialized CTE of them
    /// again for the update and for `min`, `max` and `count`.
    /// [`SqlRepair`] writes this statement for one table with one integer
    /// key.
    ///
    /// The engine checks the summary against the batch contract (EX-3,
    /// EX-4: count at most `limit`, first after `after`, last at most
    /// `bound`) before the commit, and rolls the batch back if it does not
    /// hold; the statement timeout bounds the work the statement can do
    /// before that check (EX-5). The engine sees only the summary: that the
    /// statement selects with the `limit` it is given and changes exactly
    /// the rows it selected is the repair's word, as is `mutate` changing
    /// exactly its keys in the two-statement form.
    ///
    /// The engine sends this statement behind the previous batch's commit,
    /// before the runtime looks at its mailbox again, so it runs (inside
    /// the next batch's transaction, holding that batch's row locks) even
    /// when a pause or a shutdown comes next; it then rolls back.
    ///
    /// Report the selected keys, not the rows the update changed: a key
    /// selected and then deleted by a concurrent transaction still
    /// counts, or the engine would take a batch whose rows all vanished
    /// for the end of the range. The connection is a shared reference
    /// (`RunQueryDsl` runs on `&mut &AsyncPgConnection`), so the engine
    /// can send the statement without waiting on the connection.
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&K>,
        bound: &K,
        limit: u32,
    ) -> Result<Mutated<K>, RepairError>;
}

/// Why a definition or a stored key is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    /// The stable ID is empty, too long, or has characters outside
    /// `[a-z0-9._-]`.
    #[error("invalid stable ID {0:?}: use 1-128 characters of [a-z0-9._-]")]
    InvalidId(String),
    /// Two definitions in one process claim the same stable ID.
    #[error("stable ID {0:?} is registered twice in this process")]
    DuplicateId(String),
    /// A target batch duration of zero, or a size range that is empty or
    /// starts at 0 (THR-3).
    #[error("repair {0:?} declares a batch target with an empty size range or no duration")]
    InvalidBatchTarget(String),
    /// A number of partitions of 0 or above [`MAX_PARTITIONS`] (PAR-1).
    #[error("repair {id:?} allows {partitions} partitions: use 1 to {MAX_PARTITIONS}")]
    InvalidPartitions {
        /// The repair's stable ID.
        id: String,
        /// The number of partitions it declared.
        partitions: u32,
    },
    /// A batch limit of zero cannot make progress.
    #[error("repair {0:?} declares a batch limit of 0")]
    ZeroBatchLimit(String),
    /// A table or column name of a [`SqlRepair`] that is not a plain SQL
    /// identifier: it would be spliced into the statements.
    #[error(
        "invalid SQL identifier {0:?}: use [a-z_][a-z0-9_]* in lower case, as PostgreSQL \
         folds it (at most 63 bytes), \
         a table optionally as schema.table"
    )]
    InvalidIdentifier(String),
    /// A journal that cannot be kept (UNDO-1): a name that is not a plain
    /// identifier, no key or journaled column, a hand-written one-statement
    /// form, or a stable ID too long to derive its undo's.
    #[error("repair {id:?} declares a journal that cannot be kept: {reason}")]
    InvalidJournal {
        /// The repair's stable ID.
        id: String,
        /// What makes the journal unusable.
        reason: &'static str,
    },
    /// A loop inside the server (EX-8) with a zero time slice, or
    /// combined with sizing toward a target duration.
    #[error("repair {id:?} declares a loop inside the server that cannot run: {reason}")]
    InvalidServerLoop {
        /// The repair's stable ID.
        id: String,
        /// What makes the loop unusable.
        reason: &'static str,
    },
    /// A run window with an hour past 23 or equal hours, which would
    /// never open (FLT-3).
    #[error("repair {id:?} declares a run window that cannot be used: {reason}")]
    InvalidRunWindow {
        /// The repair's stable ID.
        id: String,
        /// What is wrong with the window.
        reason: String,
    },
    /// A dependency ([`Repair::after`]) on a stable ID that no
    /// definition of the process registers (FLT-4).
    #[error("repair {id:?} starts after {dependency:?}, which no definition registers")]
    UnknownDependency {
        /// The dependent repair's stable ID.
        id: String,
        /// The ID it depends on.
        dependency: String,
    },
    /// Dependencies ([`Repair::after`]) that form a cycle, so none of its
    /// repairs could ever start (FLT-4); the IDs in order, the first
    /// repeated at the end.
    #[error("repairs start after each other in a cycle: {}", .0.join(" -> "))]
    DependencyCycle(Vec<String>),
    /// A [`SqlRepair`] built without a part it needs.
    #[error("SQL repair {id:?} has no {missing}")]
    Incomplete {
        /// The repair's stable ID.
        id: String,
        /// The part it lacks: `key column`, `SET list` or `validation
        /// predicate`.
        missing: &'static str,
    },
}

/// Validate a stable ID: 1-128 characters of `[a-z0-9._-]`.
pub fn validate_id(id: &str) -> Result<(), DefinitionError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_' || b == b'-'
        });
    if ok {
        Ok(())
    } else {
        Err(DefinitionError::InvalidId(bounded(
            id.chars().take(140).collect::<String>(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emb02_stable_ids_are_validated() {
        assert!(validate_id("events.author-norm_v1").is_ok());
        assert!(validate_id(&"a".repeat(128)).is_ok());
        for bad in ["", "Upper", "with space", "semi;colon", &"a".repeat(129)] {
            assert!(matches!(
                validate_id(bad),
                Err(DefinitionError::InvalidId(_))
            ));
        }
    }

    #[test]
    fn aud02_diagnostics_are_bounded_on_char_boundaries() {
        let long = "é".repeat(400);
        let b = bounded(long);
        assert!(b.len() <= MAX_DIAGNOSTIC_BYTES);
        assert!(b.ends_with("..."));
    }

    /// A repair that declares only what the trait requires, so every other
    /// answer is the trait's default. Nothing here ever runs a statement.
    struct Minimal;

    #[async_trait]
    impl Repair for Minimal {
        type Key = i64;

        fn id(&self) -> &str {
            "minimal.v1"
        }

        fn batch_limit(&self) -> u32 {
            10
        }

        async fn capture_bound(
            &self,
            _conn: &mut AsyncPgConnection,
        ) -> Result<SourceSet<i64>, RepairError> {
            Ok(SourceSet::Empty)
        }

        fn batches(&self) -> Batches<'_, i64> {
            Batches::TwoStatements(self)
        }

        async fn validate(
            &self,
            _conn: &mut AsyncPgConnection,
            _bound: Option<&i64>,
        ) -> Result<Validation, RepairError> {
            Ok(Validation::Success)
        }
    }

    #[async_trait]
    impl SelectThenMutate<i64> for Minimal {
        async fn select_keys(
            &self,
            _conn: &mut AsyncPgConnection,
            _after: Option<&i64>,
            _bound: &i64,
            _limit: u32,
        ) -> Result<Vec<i64>, RepairError> {
            Ok(Vec::new())
        }

        async fn mutate(
            &self,
            _conn: &mut AsyncPgConnection,
            _keys: &[i64],
        ) -> Result<(), RepairError> {
            Ok(())
        }
    }

    /// THR-1: a repair that names no tables has none for the health monitor
    /// to watch: a default naming a table would count lock waiters on a
    /// relation the repair never writes.
    #[test]
    fn thr01_a_repair_names_no_tables_by_default() {
        assert!(Minimal.tables().is_empty());
    }

    /// EX-6: a repair that does not ask for overlapped commits runs its
    /// batches one after the other.
    #[test]
    fn ex06_batches_do_not_overlap_commits_by_default() {
        assert!(!Minimal.overlap_commits());
    }

    /// REG-2, PAR-1, THR-3: without a declaration a repair has an empty
    /// description, runs in one partition and keeps its fixed batch size.
    #[test]
    fn reg02_other_trait_defaults_are_the_documented_ones() {
        assert_eq!(Minimal.description(), "");
        assert_eq!(Minimal.partitions(), 1);
        assert_eq!(Minimal.batch_target(), None);
    }

    /// EMB-4: the two-statement batch form reads as its name in logs and
    /// assertions (the one-statement form is checked with `SqlRepair`).
    #[test]
    fn emb04_batch_forms_debug_as_their_names() {
        assert_eq!(format!("{:?}", Minimal.batches()), "Batches::TwoStatements");
    }
}
