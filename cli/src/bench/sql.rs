//! The bench's own SQL: the canonical table, the progress and latency
//! tables, the PL/pgSQL baseline, the rows its queries read back and the
//! row-by-row verification.

use super::args::BenchError;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// A fresh canonical table of `rows` rows. Table names are generated here
/// from fixed prefixes and numbers, never from input, so splicing them
/// into SQL is safe. Autovacuum is off for the table: every
/// run leaves N dead row versions behind, and an autovacuum worker could
/// start on the table in the middle of some runs and not others (the
/// launcher wakes once a minute). Every runner gets the same table; the
/// reset's `VACUUM ANALYZE` still runs.
pub(super) fn table_sql(table: &str, rows: u64) -> String {
    format!(
        "DROP TABLE IF EXISTS {table}; \
         CREATE TABLE {table} (id bigint PRIMARY KEY, email text NOT NULL, email_norm text, \
             touched int NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off); \
         INSERT INTO {table} (id, email) \
             SELECT g, 'User' || g || '@Example.COM' FROM generate_series(1, {rows}) AS g;"
    )
}

pub(super) const SETUP_SQL: &str = "\
CREATE TABLE IF NOT EXISTS bench_progress (runner text PRIMARY KEY, checkpoint bigint NOT NULL, \
    batches bigint NOT NULL);
CREATE TABLE IF NOT EXISTS bench_latency (runner text NOT NULL, micros bigint NOT NULL);";

/// How the PL/pgSQL loop advances its checkpoint with each batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Advance {
    /// A plain progress row of `bench_progress` (`plpgsql`, `plpgsql-k`).
    Plain,
    /// The checkpoint of the backfill `p_id` through the product's fence
    /// (`backfill_checkpoint_advance`) with the claim's owner and
    /// generation, as the engine's batch does (`plpgsql-fenced`). The key
    /// is passed in its stored encoding (`src/key.rs`: the bigint tag,
    /// then the value with its sign bit flipped, big-endian) and as JSON.
    /// The last batch ends at the table's largest key, which is the
    /// backfill's bound, so the fence moves the row on to `validating`.
    Fenced,
}

/// The PL/pgSQL loop as procedure `name` over `table` in batches of
/// `batch`, advancing as `advance` says and recording its latencies under
/// `runner`. Every instance has the same static statements (PL/pgSQL
/// caches their plans), only the names and the batch size differ:
/// `plpgsql-k` runs K of them at once. Names are bench-generated. The
/// batch size is written into the text, as in every runner's select (see
/// [`ItemsRepair`](super::repair::ItemsRepair)). A fenced loop takes the
/// backfill's ID, the claim's owner and its generation as arguments.
pub(super) fn plpgsql_procedure_sql(
    name: &str,
    table: &str,
    runner: &str,
    batch: u32,
    advance: Advance,
) -> String {
    let (params, start, step) = match advance {
        Advance::Plain => (
            "",
            format!(
                "INSERT INTO bench_progress VALUES ('{runner}', 0, 0)
        ON CONFLICT (runner) DO UPDATE SET checkpoint = 0, batches = 0;"
            ),
            format!(
                "UPDATE bench_progress SET checkpoint = v_ckpt, batches = batches + 1
            WHERE runner = '{runner}';"
            ),
        ),
        Advance::Fenced => (
            "p_id text, p_owner text, p_generation bigint",
            "SELECT checkpoint INTO v_expected FROM backfill WHERE id = p_id;".to_string(),
            format!(
                "v_next := '\\x12'::bytea || int8send(v_ckpt # (-9223372036854775808)::bigint);
        PERFORM backfill_checkpoint_advance(p_id, p_owner, p_generation, v_expected, v_next,
            to_jsonb(v_ckpt), cardinality(v_keys)::bigint, {batch});
        v_expected := v_next;"
            ),
        ),
    };
    format!(
        "CREATE OR REPLACE PROCEDURE {name}({params})
LANGUAGE plpgsql AS $$
DECLARE
    v_ckpt bigint := 0;
    v_bound bigint;
    v_keys bigint[];
    v_expected bytea;
    v_next bytea;
    v_t0 timestamptz;
    v_lat bigint[] := '{{}}';
BEGIN
    SELECT coalesce(max(id), 0) INTO v_bound FROM {table};
    {start}
    COMMIT;
    LOOP
        v_t0 := clock_timestamp();
        -- The same statements as the client and the engine, minus the
        -- round trips: select at most B keys, update them by id, advance.
        SELECT array_agg(id ORDER BY id) INTO v_keys FROM (
            SELECT id FROM {table} WHERE id > v_ckpt AND id <= v_bound ORDER BY id LIMIT {batch}
        ) AS k;
        EXIT WHEN v_keys IS NULL;
        UPDATE {table} SET email_norm = lower(email), touched = touched + 1 WHERE id = ANY(v_keys);
        v_ckpt := v_keys[array_upper(v_keys, 1)];
        {step}
        COMMIT;
        v_lat := v_lat || (extract(epoch FROM clock_timestamp() - v_t0) * 1000000)::bigint;
    END LOOP;
    DELETE FROM bench_latency WHERE runner = '{runner}';
    INSERT INTO bench_latency SELECT '{runner}', unnest(v_lat);
    COMMIT;
END $$;"
    )
}

#[derive(QueryableByName)]
pub(super) struct Id {
    #[diesel(sql_type = BigInt)]
    pub(super) id: i64,
}

#[derive(QueryableByName)]
pub(super) struct MaxId {
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(super) max: Option<i64>,
}

#[derive(QueryableByName)]
pub(super) struct MinMax {
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(super) min: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(super) max: Option<i64>,
}

#[derive(QueryableByName)]
pub(super) struct Count {
    #[diesel(sql_type = BigInt)]
    pub(super) n: i64,
}

#[derive(QueryableByName)]
pub(super) struct Micros {
    #[diesel(sql_type = BigInt)]
    pub(super) micros: i64,
}

#[derive(QueryableByName)]
pub(super) struct TextValue {
    #[diesel(sql_type = Text)]
    pub(super) v: String,
}

/// `Ok(true)` when every row of `table` is repaired exactly once.
pub(super) async fn verify(conn: &mut AsyncPgConnection, table: &str) -> Result<bool, BenchError> {
    let bad: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM {table} \
         WHERE email_norm IS DISTINCT FROM lower(email) OR touched <> 1"
    ))
    .get_result(conn)
    .await?;
    Ok(bad.n == 0)
}
