//! What `backfill bench` takes and how it fails: the runners, the flags,
//! the repair shapes of the engine runs and the bench's error.

use backfill::__private::store::StoreError;
use backfill::engine::EngineError;
use std::path::PathBuf;

/// What `backfill bench` can measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Runner {
    /// PL/pgSQL procedure, COMMIT per batch: the server-side limit.
    Plpgsql,
    /// The same procedure committing every batch through the product's
    /// fence on a backfill the engine started and claimed: what a batch
    /// costs with its loop inside the server, fence and checkpoint
    /// included.
    PlpgsqlFenced,
    /// Minimal hand-written client loop on one connection.
    Client,
    /// The product path: one backfill through the actor runtime, the
    /// repair in its one-statement form (`SelectAndMutate`).
    Engine,
    /// The same as `engine`, the repair declared as a `SqlRepair` instead
    /// of written by hand.
    EngineSql,
    /// The same as `engine-sql` with the repair's journal on (every
    /// column its SET list writes): what journaling the before-images
    /// costs, read against `engine`.
    EngineJournal,
    /// The same, the repair in its two-statement form (`select_keys`, then
    /// `mutate` with the keys).
    EngineKeys,
    /// The same as `engine`, the repair declaring that it does not overlap
    /// commits (`Repair::overlap_commits` false): each batch's body runs
    /// after the previous batch committed, on the same connection.
    EngineSerial,
    /// The same as `engine`, with the process's health monitor reading
    /// every signal at its default interval and limits while the batches
    /// ask it (THR-1): what throttling costs when nothing throttles.
    EngineHealth,
    /// One backfill in P partitions in this process (PAR-1), one run per
    /// `--partitions` value (P = cores by default), named `engine-p<P>`.
    EngineP,
    /// One backfill in 2 x cores partitions worked by two processes of
    /// this binary at once (this one and a child), each with its own pool
    /// and runtime running half the partitions.
    EnginePProcs,
    /// K backfills over K disjoint tables at once (K = cores by default).
    EngineK,
    /// `engine` with the repair's batches in a loop inside the server
    /// (EX-8, `Repair::server_batch`): one call per step of the runtime.
    EngineServer,
    /// `engine-server` in as many partitions as cores, named
    /// `engine-server-p<P>`.
    EngineServerP,
    /// `engine-k` with every backfill's batches in a loop inside the
    /// server.
    EngineServerK,
    /// K `plpgsql` loops over the same K tables at once: how far the
    /// server itself scales on this machine, the reference for `engine-k`.
    PlpgsqlK,
    /// Takeover latency after SIGKILL of the owning process.
    Takeover,
    /// Peak RSS of the worker over a long engine run (`--rss-rows`).
    Rss,
    /// Admin API list latency (p50/p99) with 10,000 registered backfills
    /// under 32 concurrent clients.
    AdminList,
    /// The N rows over D databases served by one fleet (FLT-1), for each
    /// D of `--fleet-databases`, and an idle database's connections and
    /// transactions afterwards.
    Fleet,
    /// Adaptive batch sizing (THR-3) from a bad start: one backfill sized
    /// toward `--target-batch-ms` from `--start-batch` keys, every batch's
    /// size and duration over time.
    Adaptive,
}

/// How the engine runs' repair is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// One-statement form, overlapping commits (`engine`, `engine-k`).
    OneStatement,
    /// Two-statement form, overlapping commits (`engine-keys`).
    TwoStatement,
    /// One-statement form, batches one after the other (`engine-serial`).
    Serial,
    /// The declarative `SqlRepair` of the same update (`engine-sql`).
    Sql,
    /// The same `SqlRepair` with its journal on (`engine-journal`).
    Journaled,
    /// One-statement form with a health monitor attached (`engine-health`).
    Monitored,
    /// One-statement form in this many partitions (`engine-p`).
    Partitioned(u32),
    /// The loop inside the server, in this many partitions
    /// (`engine-server`, `engine-server-p`, `engine-server-k`).
    InServer(u32),
}

/// Flags of `backfill bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// PostgreSQL server URL; the bench (re)creates its own database on it
    /// and drops it at the end. Unset: a throwaway cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Name of the bench database created on that server.
    #[arg(long, default_value = "backfill_bench")]
    pub database: String,
    /// Rows of the canonical table (N).
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Batch sizes (B), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub batch: Vec<u32>,
    /// Repetitions per runner and batch size; the report shows medians.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// What to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "plpgsql,plpgsql-fenced,client,engine,engine-sql,engine-journal,engine-keys,engine-serial,engine-health,engine-p,engine-p-procs,engine-k,plpgsql-k,engine-server,engine-server-p,engine-server-k"
    )]
    pub only: Vec<Runner>,
    /// Backfills of `engine-k` and loops of `plpgsql-k` (default: the
    /// number of cores). The N rows are split evenly over K tables.
    #[arg(long)]
    pub k: Option<usize>,
    /// Partitions of the `engine-p` runs, comma-separated: one run of
    /// each per repetition (default: the number of cores).
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<u32>,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the report as Markdown to this file (benches/README.md).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Lease TTL of the engine runs and of the takeover measurement, ms.
    #[arg(long, default_value_t = 5_000)]
    pub lease_ttl_ms: u64,
    /// Supervisor poll interval of the engine runs and takeover, ms.
    #[arg(long, default_value_t = 250)]
    pub poll_interval_ms: u64,
    /// Target batch duration of the `adaptive` run, ms.
    #[arg(long, default_value_t = 50)]
    pub target_batch_ms: u64,
    /// The size the `adaptive` run starts from (its smallest size).
    #[arg(long, default_value_t = 10)]
    pub start_batch: u32,
    /// Databases of the `fleet` runs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub fleet_databases: Vec<usize>,
    /// Rows of the `rss` run.
    #[arg(long, default_value_t = 10_000_000)]
    pub rss_rows: u64,
    /// Keep the bench database afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Internal: run as the owner process of the takeover measurement on
    /// this database URL until killed.
    #[arg(long, hide = true)]
    pub takeover_owner: Option<String>,
    /// Internal: run as the second process of `engine-p-procs` on this
    /// database URL until its backfill is `completed`.
    #[arg(long, hide = true)]
    pub partition_worker: Option<String>,
}

/// Errors of the bench.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Invalid flags.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// A run did not finish as it must.
    #[error("{0}")]
    Run(String),
}

impl From<diesel::result::Error> for BenchError {
    fn from(e: diesel::result::Error) -> Self {
        BenchError::Store(StoreError::Database(e))
    }
}
