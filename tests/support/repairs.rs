//! Repairs used by the conformance tests, with barriers ("gates") between
//! mutation and commit and inside validation, so races are forced by
//! channels, never by sleeps.

use backfill::repair::{
    Batches, BigIntSummary, Mutated, Repair, RepairError, SelectAndMutate, SelectThenMutate,
    SourceSet, Validation,
};
use backfill::{async_trait, AsyncPgConnection};
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Double, Nullable, Timestamptz};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};

/// A barrier the code under test reaches and waits at until the test
/// releases it.
pub struct Gate {
    reached: mpsc::UnboundedSender<()>,
    go: Arc<Semaphore>,
}

/// The test's side of a [`Gate`].
pub struct GateHandle {
    reached: mpsc::UnboundedReceiver<()>,
    go: Arc<Semaphore>,
}

impl GateHandle {
    /// Wait until the code under test is at the gate.
    pub async fn reached(&mut self) {
        tokio::time::timeout(std::time::Duration::from_secs(30), self.reached.recv())
            .await
            .expect("the code under test never reached the gate")
            .expect("gate dropped");
    }
    /// Let it continue.
    pub fn release(&self) {
        self.go.add_permits(1);
    }
}

pub fn gate() -> (Gate, GateHandle) {
    let (tx, rx) = mpsc::unbounded_channel();
    let go = Arc::new(Semaphore::new(0));
    (
        Gate {
            reached: tx,
            go: go.clone(),
        },
        GateHandle { reached: rx, go },
    )
}

impl Gate {
    async fn pass(&self) {
        let _ = self.reached.send(());
        self.go
            .acquire()
            .await
            .expect("gate semaphore closed")
            .forget();
    }
}

/// How the selection misbehaves (to prove the engine's EX-3/EX-4 checks).
pub const SELECT_NORMAL: u8 = 0;
pub const SELECT_OVER_LIMIT: u8 = 1;
pub const SELECT_IGNORE_BOUND: u8 = 2;
pub const SELECT_REPEAT_CHECKPOINT: u8 = 3;
/// The one-statement form reports its count but no first or last key.
pub const SELECT_SUMMARY_WITHOUT_KEYS: u8 = 4;
/// The selection takes the definition's own limit, whatever limit the
/// engine passes (a repair that ignores the size in force).
pub const SELECT_DEFINITION_LIMIT: u8 = 5;

/// Knobs shared between a test and its repair.
#[derive(Default)]
pub struct Hooks {
    /// Passed after the mutation ran, before the checkpoint advance.
    pub after_mutate: Mutex<Option<Arc<Gate>>>,
    /// Passed inside validation, before the verdict.
    pub in_validate: Mutex<Option<Arc<Gate>>>,
    /// Returned after every mutation (persistent error) when set.
    pub fail_after_mutate: Mutex<Option<RepairError>>,
    /// Returned by validation when set.
    pub fail_validate: Mutex<Option<RepairError>>,
    /// The mutation panics (a bug in a repair's code) when set.
    pub panic_in_mutate: std::sync::atomic::AtomicBool,
    /// Validation panics when set.
    pub panic_in_validate: std::sync::atomic::AtomicBool,
    /// `batch_limit` answers 0 when set (registration saw the real one).
    pub zero_limit: std::sync::atomic::AtomicBool,
    /// One of the `SELECT_*` modes.
    pub select_mode: AtomicU8,
    /// Milliseconds the one-statement form sleeps in PostgreSQL
    /// (`pg_sleep`) in every batch but a claim's first (the batches sent
    /// ahead), to hold a step in flight.
    pub sleep_ms: AtomicU64,
}

impl Hooks {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    pub fn gate_after_mutate(&self) -> GateHandle {
        let (g, h) = gate();
        *self.after_mutate.lock() = Some(Arc::new(g));
        h
    }
    pub fn gate_in_validate(&self) -> GateHandle {
        let (g, h) = gate();
        *self.in_validate.lock() = Some(Arc::new(g));
        h
    }
    pub fn clear_gates(&self) {
        *self.after_mutate.lock() = None;
        *self.in_validate.lock() = None;
    }
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct Span {
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

/// SQL to create and fill the `items` table with ids 1..=rows, n = 0.
pub fn items_sql(rows: i64) -> String {
    format!(
        "CREATE TABLE items (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0); \
         INSERT INTO items (id) SELECT g FROM generate_series(1, {rows}) g"
    )
}

/// The non-idempotent counter repair: `n = n + 1` for every item up to the
/// bound. Its validation requires every `n` to be exactly 1, so a batch
/// applied twice (or a mutation committed without its checkpoint) shows.
pub struct Counter {
    pub id: &'static str,
    pub limit: u32,
    pub hooks: Arc<Hooks>,
    /// The table it repairs (`items` unless set).
    pub table: &'static str,
    /// Whether it has the one-statement form (`select_and_mutate`). The
    /// gates and failure hooks apply to the two-statement form only.
    pub one_statement: bool,
    /// What `Repair::overlap_commits` answers (`n = n + 1` reads only its
    /// own row, so it may).
    pub overlap: bool,
}

impl Counter {
    pub fn new(id: &'static str, limit: u32, hooks: Arc<Hooks>) -> Self {
        Self {
            id,
            limit,
            hooks,
            table: "items",
            one_statement: false,
            overlap: false,
        }
    }

    /// The same repair, overlapping commits (`Repair::overlap_commits`).
    pub fn overlapping(mut self) -> Self {
        self.overlap = true;
        self
    }

    /// The same repair with its one-statement form.
    pub fn one_statement(mut self) -> Self {
        self.one_statement = true;
        self
    }

    /// The same repair over another table with the `items` shape.
    pub fn on_table(mut self, table: &'static str) -> Self {
        self.table = table;
        self
    }
}

#[async_trait]
impl Repair for Counter {
    type Key = i64;

    fn id(&self) -> &str {
        self.id
    }

    fn description(&self) -> &str {
        "test: n = n + 1 on every item"
    }

    fn batch_limit(&self) -> u32 {
        if std::sync::atomic::AtomicBool::load(&self.hooks.zero_limit, Ordering::SeqCst) {
            return 0;
        }
        self.limit
    }

    fn overlap_commits(&self) -> bool {
        self.overlap
    }

    /// Rows with a negative `n` are the ones a block names (RT-4).
    async fn blocking_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        #[derive(QueryableByName)]
        struct Id {
            #[diesel(sql_type = BigInt)]
            id: i64,
        }
        let rows: Vec<Id> = diesel::sql_query(format!(
            "SELECT id FROM {} WHERE id > $1 AND id <= $2 AND n < 0 ORDER BY id LIMIT $3",
            self.table
        ))
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let span: Span = diesel::sql_query(format!(
            "SELECT max(id) AS max, count(*) AS n FROM {}",
            self.table
        ))
        .get_result(conn)
        .await?;
        Ok(match span.max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded {
                upper,
                rows: Some(span.n),
            },
        })
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
        let gate = self.hooks.in_validate.lock().clone();
        if let Some(gate) = gate {
            gate.pass().await;
        }
        if let Some(error) = self.hooks.fail_validate.lock().clone() {
            return Err(error);
        }
        if std::sync::atomic::AtomicBool::load(&self.hooks.panic_in_validate, Ordering::SeqCst) {
            panic!("the test repair's validation panics");
        }
        let bad: Count = diesel::sql_query(format!(
            "SELECT count(*) AS n FROM {} WHERE id <= $1 AND n <> 1",
            self.table
        ))
        .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
        .get_result(conn)
        .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} items up to the bound do not have n = 1", bad.n))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for Counter {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let after = after.copied().unwrap_or(i64::MIN);
        let mode = AtomicU8::load(&self.hooks.select_mode, Ordering::SeqCst);
        let (sql, limit) = match mode {
            SELECT_OVER_LIMIT => (
                "SELECT id FROM items WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
                i64::from(limit) + 1,
            ),
            SELECT_IGNORE_BOUND => (
                "SELECT id FROM items WHERE id > $1 AND $2 = $2 ORDER BY id LIMIT $3",
                i64::from(limit),
            ),
            SELECT_REPEAT_CHECKPOINT => (
                "SELECT id FROM items WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3",
                i64::from(limit),
            ),
            SELECT_DEFINITION_LIMIT => (
                "SELECT id FROM items WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
                i64::from(self.limit),
            ),
            _ => (
                "SELECT id FROM items WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
                i64::from(limit),
            ),
        };
        let rows: Vec<Id> = diesel::sql_query(sql.replace("items", self.table))
            .bind::<BigInt, _>(after)
            .bind::<BigInt, _>(*bound)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query(format!(
            "UPDATE {} SET n = n + 1 WHERE id = ANY($1)",
            self.table
        ))
        .bind::<Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        if std::sync::atomic::AtomicBool::load(&self.hooks.panic_in_mutate, Ordering::SeqCst) {
            panic!("the test repair's mutation panics");
        }
        let gate = self.hooks.after_mutate.lock().clone();
        if let Some(gate) = gate {
            gate.pass().await;
        }
        let fail = self.hooks.fail_after_mutate.lock().clone();
        match fail {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl SelectAndMutate<i64> for Counter {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let mut limit = i64::from(limit);
        if AtomicU8::load(&self.hooks.select_mode, Ordering::SeqCst) == SELECT_OVER_LIMIT {
            limit += 1;
        }
        let row: BigIntSummary = diesel::sql_query(format!(
            "WITH k AS MATERIALIZED (\
                 SELECT id FROM {t} WHERE id > $1 AND id <= $2 \
                     AND (SELECT true FROM pg_sleep($4)) ORDER BY id LIMIT $3), \
             u AS (UPDATE {t} SET n = n + 1 WHERE id = ANY(ARRAY(SELECT id FROM k))) \
             SELECT min(id) AS first, max(id) AS last, count(*) AS n FROM k",
            t = self.table
        ))
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(limit)
        .bind::<Double, _>(match after {
            Some(_) => AtomicU64::load(&self.hooks.sleep_ms, Ordering::SeqCst) as f64 / 1000.0,
            None => 0.0,
        })
        .get_result(conn)
        .await?;
        if AtomicU8::load(&self.hooks.select_mode, Ordering::SeqCst) == SELECT_SUMMARY_WITHOUT_KEYS
        {
            return Ok(Mutated::from_summary(None, None, row.n));
        }
        Ok(row.into())
    }
}

/// Same stable ID as a [`Counter`] but a text key: a process with this
/// definition must fail closed on a row whose bound is a bigint (REG-4).
pub struct TextKeyed {
    pub id: &'static str,
}

#[async_trait]
impl Repair for TextKeyed {
    type Key = String;
    fn id(&self) -> &str {
        self.id
    }
    fn batch_limit(&self) -> u32 {
        10
    }
    async fn capture_bound(
        &self,
        _conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<String>, RepairError> {
        Ok(SourceSet::Bounded {
            upper: "zzz".into(),
            rows: None,
        })
    }
    fn batches(&self) -> Batches<'_, String> {
        Batches::TwoStatements(self)
    }
    async fn validate(
        &self,
        _conn: &mut AsyncPgConnection,
        _bound: Option<&String>,
    ) -> Result<Validation, RepairError> {
        Ok(Validation::Success)
    }
}

#[async_trait]
impl SelectThenMutate<String> for TextKeyed {
    async fn select_keys(
        &self,
        _conn: &mut AsyncPgConnection,
        _after: Option<&String>,
        _bound: &String,
        _limit: u32,
    ) -> Result<Vec<String>, RepairError> {
        Ok(vec![])
    }
    async fn mutate(
        &self,
        _conn: &mut AsyncPgConnection,
        _keys: &[String],
    ) -> Result<(), RepairError> {
        Ok(())
    }
}

/// SQL to create `events` with `rows` rows over few distinct timestamps, so
/// many rows tie on `created_at` (EX-2).
pub fn events_sql(rows: i64) -> String {
    format!(
        "CREATE TABLE events (created_at timestamptz NOT NULL, id bigint NOT NULL, \
             n integer NOT NULL DEFAULT 0, PRIMARY KEY (created_at, id)); \
         INSERT INTO events (created_at, id) \
         SELECT timestamptz '2026-01-01' + ((g % 3) * interval '1 hour'), g \
         FROM generate_series(1, {rows}) g"
    )
}

#[derive(QueryableByName)]
struct EventKey {
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// A non-idempotent repair keyed by the compound `(created_at, id)`.
pub struct CompoundCounter {
    pub limit: u32,
}

#[async_trait]
impl Repair for CompoundCounter {
    type Key = (DateTime<Utc>, i64);

    fn id(&self) -> &str {
        "events.compound-counter"
    }

    fn batch_limit(&self) -> u32 {
        self.limit
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<Self::Key>, RepairError> {
        let rows: Vec<EventKey> = diesel::sql_query(
            "SELECT created_at, id FROM events ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .load(conn)
        .await?;
        Ok(match rows.into_iter().next() {
            None => SourceSet::Empty,
            Some(k) => SourceSet::Bounded {
                upper: (k.created_at, k.id),
                rows: None,
            },
        })
    }

    fn batches(&self) -> Batches<'_, (DateTime<Utc>, i64)> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        _bound: Option<&Self::Key>,
    ) -> Result<Validation, RepairError> {
        let bad: Count = diesel::sql_query("SELECT count(*) AS n FROM events WHERE n <> 1")
            .get_result(conn)
            .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} events do not have n = 1", bad.n))
        })
    }
}

#[async_trait]
impl SelectThenMutate<(DateTime<Utc>, i64)> for CompoundCounter {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&(DateTime<Utc>, i64)>,
        bound: &(DateTime<Utc>, i64),
        limit: u32,
    ) -> Result<Vec<(DateTime<Utc>, i64)>, RepairError> {
        let rows: Vec<EventKey> = diesel::sql_query(
            "SELECT created_at, id FROM events \
             WHERE ($1 OR (created_at, id) > ($2, $3)) AND (created_at, id) <= ($4, $5) \
             ORDER BY created_at, id LIMIT $6",
        )
        .bind::<diesel::sql_types::Bool, _>(after.is_none())
        .bind::<Timestamptz, _>(after.map(|k| k.0).unwrap_or(bound.0))
        .bind::<BigInt, _>(after.map(|k| k.1).unwrap_or(0))
        .bind::<Timestamptz, _>(bound.0)
        .bind::<BigInt, _>(bound.1)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(rows.into_iter().map(|k| (k.created_at, k.id)).collect())
    }
    async fn mutate(
        &self,
        conn: &mut AsyncPgConnection,
        keys: &[(DateTime<Utc>, i64)],
    ) -> Result<(), RepairError> {
        let ids: Vec<i64> = keys.iter().map(|k| k.1).collect();
        let ts: Vec<DateTime<Utc>> = keys.iter().map(|k| k.0).collect();
        diesel::sql_query(
            "UPDATE events e SET n = n + 1 FROM unnest($1::timestamptz[], $2::bigint[]) AS k(c, i) \
             WHERE e.created_at = k.c AND e.id = k.i",
        )
        .bind::<Array<Timestamptz>, _>(ts)
        .bind::<Array<BigInt>, _>(ids)
        .execute(conn)
        .await?;
        Ok(())
    }
}
