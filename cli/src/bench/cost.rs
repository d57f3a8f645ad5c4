//! What a run cost, measured from outside the code under test: the CPU
//! time of this process (with the children it waited for, such as
//! `engine-p-procs`' second process), the CPU time of the server's
//! backends connected to the bench's database, the WAL the server wrote,
//! and, where `pg_stat_statements` is loaded (the bench's own throwaway
//! cluster loads it), the statements the clients sent. Per row and per
//! batch, these make the gap between runners a list of items
//! (benches/README.md).
//!
//! This process's CPU time comes from `/proc/self/stat` in clock ticks of
//! 10 ms (Linux's `USER_HZ`; it sums every thread). A backend is one
//! thread, and its time on the CPU comes from `/proc/<pid>/schedstat` in
//! nanoseconds, so even a short run's server time is measured; it is
//! readable only when PostgreSQL runs on this machine, otherwise the
//! server's share is unknown (`None`), never zero. A backend that ends during the run takes
//! its time with it; the runners keep their connections until the clock
//! stops, so none does.

use backfill::__private::store::{Pool, StoreError};
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Clock ticks per second of `/proc/<pid>/stat`.
const TICKS_PER_S: f64 = 100.0;

/// What one run cost; `None` where it could not be measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// CPU seconds (user and system) of this process and its waited-for
    /// children over the run.
    pub client_cpu_s: Option<f64>,
    /// CPU seconds of the backends of the bench's database over the run.
    pub server_cpu_s: Option<f64>,
    /// WAL bytes the server wrote over the run (all of its databases; the
    /// bench's is the only one writing).
    pub wal_bytes: Option<i64>,
    /// Statements the clients sent to the bench's database over the run
    /// (`pg_stat_statements` calls, top level: a procedure's own
    /// statements are not sent and not counted), the bench's measuring
    /// queries left out; `None` without `pg_stat_statements`.
    pub statements: Option<i64>,
}

impl Cost {
    /// Client plus server CPU, in microseconds per row.
    pub(super) fn cpu_us_per_row(&self, rows: u64) -> Option<f64> {
        let cpu = self.client_cpu_s? + self.server_cpu_s?;
        per_row(cpu * 1e6, rows)
    }

    pub(super) fn json(&self, rows: u64, batches: usize) -> Value {
        let us = |s: Option<f64>| s.and_then(|s| per_row(s * 1e6, rows)).map(round2);
        json!({
            "client_cpu_s": self.client_cpu_s.map(round2),
            "server_cpu_s": self.server_cpu_s.map(round2),
            "wal_bytes": self.wal_bytes,
            "client_cpu_us_per_row": us(self.client_cpu_s),
            "server_cpu_us_per_row": us(self.server_cpu_s),
            "cpu_us_per_row": self.cpu_us_per_row(rows).map(round2),
            "wal_bytes_per_row": self.wal_bytes.and_then(|w| per_row(w as f64, rows)).map(round2),
            "statements": self.statements,
            "statements_per_batch": self.statements
                .and_then(|n| per_row(n as f64, batches as u64))
                .map(round2),
        })
    }
}

fn per_row(total: f64, rows: u64) -> Option<f64> {
    (rows > 0).then(|| total / rows as f64)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The readings a run's cost is the difference of.
#[derive(Clone, Debug, Default)]
pub(super) struct CostMark {
    client_ticks: Option<u64>,
    /// Nanoseconds on the CPU of each backend of the database, by PID;
    /// `None` when some backend's `/proc` entry could not be read (a
    /// remote server).
    backends: Option<BTreeMap<i32, u64>>,
    lsn: Option<String>,
    /// Calls of the database's statements so far, per
    /// `pg_stat_statements`.
    calls: Option<i64>,
}

#[derive(QueryableByName)]
struct Backend {
    #[diesel(sql_type = Integer)]
    pid: i32,
}

#[derive(QueryableByName)]
struct Lsn {
    #[diesel(sql_type = Text)]
    lsn: String,
}

#[derive(QueryableByName)]
struct Calls {
    #[diesel(sql_type = BigInt)]
    calls: i64,
}

#[derive(QueryableByName)]
struct Diff {
    #[diesel(sql_type = Nullable<BigInt>)]
    bytes: Option<i64>,
}

impl CostMark {
    /// Read this process's CPU, the database's backends' and the WAL
    /// position now.
    pub(super) async fn now(pool: &Pool) -> Self {
        let client_ticks = read_ticks();
        let Ok(mut conn) = pool.get().await.map_err(StoreError::from) else {
            return Self {
                client_ticks,
                ..Self::default()
            };
        };
        let pids: Option<Vec<Backend>> = diesel::sql_query(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND backend_type = 'client backend'",
        )
        .load(&mut conn)
        .await
        .ok();
        let backends = pids.and_then(|pids| {
            pids.iter()
                .map(|b| Some((b.pid, read_cpu_ns(b.pid)?)))
                .collect::<Option<BTreeMap<_, _>>>()
        });
        let lsn: Option<Lsn> = diesel::sql_query("SELECT pg_current_wal_lsn()::text AS lsn")
            .get_result(&mut conn)
            .await
            .ok();
        // Fails, leaving the count unknown, where the extension is not
        // loaded. The measuring queries (these and the two above) are
        // left out by their text.
        let calls: Option<Calls> = diesel::sql_query(
            "SELECT coalesce(sum(calls), 0)::bigint AS calls FROM pg_stat_statements \
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND query NOT LIKE '%pg_stat_statements%' \
               AND query NOT LIKE '%pg_stat_activity%' \
               AND query NOT LIKE '%pg_current_wal_lsn%' \
               AND query NOT LIKE '%pg_wal_lsn_diff%'",
        )
        .get_result(&mut conn)
        .await
        .ok();
        Self {
            client_ticks,
            backends,
            lsn: lsn.map(|l| l.lsn),
            calls: calls.map(|c| c.calls),
        }
    }

    /// The cost from `self` to `end`: a backend that appeared meanwhile
    /// counts all its time.
    pub(super) async fn cost_until(&self, end: &CostMark, pool: &Pool) -> Cost {
        let client_cpu_s = match (self.client_ticks, end.client_ticks) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / TICKS_PER_S),
            _ => None,
        };
        let server_cpu_s = match (&self.backends, &end.backends) {
            (Some(start), Some(end)) => Some(
                end.iter()
                    .map(|(pid, ticks)| ticks.saturating_sub(*start.get(pid).unwrap_or(&0)))
                    .sum::<u64>() as f64
                    / 1e9,
            ),
            _ => None,
        };
        let wal_bytes = match (&self.lsn, &end.lsn) {
            (Some(a), Some(b)) => match pool.get().await {
                Ok(mut conn) => diesel::sql_query(
                    "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint AS bytes",
                )
                .bind::<Text, _>(b)
                .bind::<Text, _>(a)
                .get_result::<Diff>(&mut conn)
                .await
                .ok()
                .and_then(|d| d.bytes),
                Err(_) => None,
            },
            _ => None,
        };
        let statements = match (self.calls, end.calls) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        Cost {
            client_cpu_s,
            server_cpu_s,
            wal_bytes,
            statements,
        }
    }
}

/// User plus system ticks of this process and its waited-for children.
fn read_ticks() -> Option<u64> {
    parse_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?, true)
}

/// Nanoseconds process `pid` (one thread) spent on a CPU: the first
/// field of `/proc/<pid>/schedstat`.
fn read_cpu_ns(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The fields after the command name (which may hold spaces and
/// parentheses, so the text after its last `)`): utime and stime are the
/// 14th and 15th fields of the line, cutime and cstime the 16th and 17th.
fn parse_ticks(stat: &str, children: bool) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let own = field(11)? + field(12)?;
    Some(if children {
        own + field(13)? + field(14)?
    } else {
        own
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emb04_proc_stat_ticks_are_read_after_the_command_name() {
        let stat = "4711 (postgres: a) b) S 1 2 3 4 5 6 7 8 9 10 120 30 7 3 20 0 1 0";
        assert_eq!(parse_ticks(stat, false), Some(150));
        assert_eq!(parse_ticks(stat, true), Some(160));
        assert_eq!(parse_ticks("4711 (x) S 1 2", false), None);
        assert_eq!(parse_ticks("no parenthesis", false), None);
        let cost = Cost {
            client_cpu_s: Some(1.0),
            server_cpu_s: Some(3.0),
            wal_bytes: Some(2_000_000),
            statements: Some(30),
        };
        assert_eq!(cost.cpu_us_per_row(1_000_000), Some(4.0));
        assert_eq!(cost.json(1_000_000, 10)["wal_bytes_per_row"], 2.0);
        assert_eq!(cost.json(1_000_000, 10)["statements_per_batch"], 3.0);
        assert_eq!(Cost::default().cpu_us_per_row(10), None);
    }
}
