//! `backfill bench`: same-run throughput of the product path against the
//! server-side limit and a minimal client loop.
//!
//! One invocation, one database (`backfill_bench` on the given server, or a
//! throwaway cluster), the canonical workload: `items(id bigint primary
//! key, email text not null, email_norm text, touched int not null default
//! 0)` with N rows; the repair sets `email_norm = lower(email)` and
//! `touched = touched + 1` by id in batches of B, checkpoint committed with
//! every batch. Every runner does the same statements per batch (select at
//! most B keys after the checkpoint, update them by id, advance the
//! checkpoint, commit), so the differences are round trips and overhead:
//!
//! 1. `plpgsql`: a procedure that loops the batches with `COMMIT` per batch
//!    (no client round trips at all: the server-side limit);
//!    `plpgsql-fenced` is the same procedure advancing the checkpoint of
//!    a backfill the engine started and claimed through the product's
//!    fence: a batch's cost with its loop inside the server;
//! 2. `client`: a minimal hand-written loop on one connection (BEGIN, select,
//!    update, checkpoint, COMMIT), no claims or fencing;
//! 3. `engine`: the product path: registered repair, `start`, the actor
//!    runtime claiming, renewing and running fenced batches through
//!    validation to `completed`, the repair in its one-statement form;
//! 4. `engine-sql`: the same as `engine` with the repair declared as a
//!    `SqlRepair` (the library writes its statements), read against the
//!    hand-written one of `engine`;
//! 5. `engine-journal`: `engine-sql` with the repair's journal on (UNDO-1:
//!    the columns its SET list writes), read against `engine`. Declared, not
//!    hand-written: a hand-written one-statement form cannot be journaled
//!    (the engine journals only around the two-statement form's `mutate`,
//!    and registration refuses the other), while `SqlRepair` writes the
//!    journal inside its one statement;
//! 6. `engine-keys`: the same with the repair's two-statement form (select
//!    the keys, then update them by id);
//! 7. `engine-serial`: the same as `engine` with a repair that does not
//!    overlap commits (`Repair::overlap_commits`), the baseline of that;
//! 8. `engine-k`: K independent backfills over K disjoint tables at once;
//! 9. `plpgsql-k`: K `plpgsql` loops over the same K tables at once, the
//!    machine's own scaling limit that `engine-k` is read against;
//! 10. `engine-health`: the same as `engine` with the health monitor reading
//!     every signal at its defaults while each batch asks it (THR-1): the
//!     cost of throttling when nothing throttles, read against `engine`;
//! 11. `engine-p`: one backfill in P partitions (PAR-1) run by P runners of
//!     one process, once per `--partitions` value (`engine-p<P>`, P = cores
//!     by default; `engine-p1` is the unpartitioned path), read against
//!     `plpgsql`;
//! 12. `engine-p-procs`: one backfill in 2 x cores partitions worked by two
//!     processes of the binary at once, each with its own pool and runtime.
//! 13. `engine-server`, `engine-server-p<P>` (P = cores) and
//!     `engine-server-k`: `engine`, `engine-p` and `engine-k` with the
//!     repair's batches in a loop inside the server (EX-8,
//!     `Repair::server_batch`, calls of 250 ms), read against `plpgsql`
//!     and `plpgsql-k`. Their batch latencies are per call, not per batch.
//!
//! After every run every row must have `email_norm = lower(email)` and
//! `touched = 1` (a 2 is a batch applied twice), and `engine-journal` must
//! have journaled exactly every row (every row changes):
//! otherwise the run is invalid and the command exits non-zero. Extras: `takeover` (latency of a
//! takeover after SIGKILL of the owner process), `rss` (peak RSS of a
//! worker over a long run), `admin-list` (list latency under concurrent
//! clients, after a warm-up) and `adaptive` (batch sizes and durations of
//! one backfill sized toward a target duration from a bad start, THR-3). A benchmark prints numbers; it asserts nothing
//! about timings.
//!
//! The bench's SQL is for its own tables only; the framework's tables are
//! touched only through the engine.

mod adaptive;
mod args;
mod context;
mod cost;
mod entry;
mod extras;
mod fleet;
mod partitioned;
mod repair;
mod report;
mod runners;
mod sql;
mod stats;
mod timed;

pub use args::{BenchArgs, BenchError, Runner};
pub use entry::run;
pub use repair::ItemsRepair;
pub use stats::RunResult;
