//! Smoke test of `backfill bench`: at a tiny N it runs every runner (the
//! engine with both forms of the repair, declared, journaled, partitioned
//! in one process and in two, its batches in a loop inside the server),
//! prints one JSON object of the
//! documented shape, and every run passed the verification (every row
//! repaired exactly once). Timings are not
//! asserted: a benchmark prints numbers.

// `DATABASE_URL` when set, else the tests' shared throwaway cluster.
#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Command;

#[test]
fn emb04_bench_json_shape_and_verification() {
    let server = support::server_url().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "bench",
            "--rows",
            "2000",
            "--batch",
            "100",
            "--reps",
            "1",
            "--json",
            "--database",
            "bft_bench_smoke",
            "--database-url",
            &server,
        ])
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(report["verified"], true, "{report}");
    assert!(report["cores"].as_u64().unwrap() >= 1);
    assert!(report["postgres_version"]
        .as_str()
        .unwrap()
        .starts_with("PostgreSQL"));
    assert!(report["postgres_durability"]
        .as_str()
        .unwrap()
        .starts_with("fsync="));
    for key in [
        "engine_vs_plpgsql",
        "engine_vs_client",
        "engine_k_vs_k_engine",
        "plpgsql_k_vs_k_plpgsql",
        "engine_sql_vs_engine",
        "engine_health_vs_engine",
        "engine_p_vs_plpgsql",
        "engine_k_vs_plpgsql_k",
        "engine_journal_vs_engine",
    ] {
        let v = &report["ratios"][key]["100"];
        assert!(v.as_f64().is_some_and(|r| r > 0.0), "{key}: {v}");
        // One repetition: its range is the ratio itself.
        let range = &report["ratio_ranges_within_reps"][key]["100"];
        assert!(range[0].as_f64().is_some_and(|r| r > 0.0), "{key}: {range}");
        assert_eq!(range[0], range[1], "{key}: {range}");
    }
    // Client and server CPU per row, engine over the server loop.
    let cpu = &report["ratios"]["engine_cpu_per_row_vs_plpgsql"]["100"];
    assert!(cpu.as_f64().is_some_and(|r| r > 0.0), "{cpu}");
    // The same for the loop committing through the product's fence.
    let fenced = &report["ratios"]["plpgsql_fenced_cpu_per_row_vs_plpgsql"]["100"];
    assert!(fenced.as_f64().is_some_and(|r| r > 0.0), "{fenced}");
    // The loop inside the server (EX-8) against the same baselines.
    for key in [
        "engine_server_vs_plpgsql",
        "engine_server_cpu_per_row_vs_plpgsql",
        "engine_server_p_vs_plpgsql",
        "engine_server_k_vs_plpgsql_k",
    ] {
        let v = &report["ratios"][key]["100"];
        assert!(v.as_f64().is_some_and(|r| r > 0.0), "{key}: {v}");
        if key != "engine_server_cpu_per_row_vs_plpgsql" {
            let range = &report["ratio_ranges_within_reps"][key]["100"];
            assert_eq!(range[0], range[1], "{key}: {range}");
            assert!(range[0].as_f64().is_some_and(|r| r > 0.0), "{key}: {range}");
        }
    }
    // `engine-p` runs at P = cores by default.
    let cores = report["cores"].as_u64().unwrap();
    assert_eq!(report["partitions"], serde_json::json!([cores]), "{report}");
    let runs = report["runs"].as_array().unwrap();
    let mut runners: Vec<&str> = runs.iter().map(|r| r["runner"].as_str().unwrap()).collect();
    runners.sort();
    assert_eq!(
        runners,
        [
            "client",
            "engine",
            "engine-health",
            "engine-journal",
            "engine-k",
            "engine-keys",
            "engine-p-procs",
            format!("engine-p{cores}").as_str(),
            "engine-serial",
            "engine-server",
            "engine-server-k",
            format!("engine-server-p{cores}").as_str(),
            "engine-sql",
            "plpgsql",
            "plpgsql-fenced",
            "plpgsql-k"
        ]
    );
    for run in runs {
        assert_eq!(run["batch"], 100);
        assert_eq!(run["rows"], 2000);
        assert!(run["rows_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(run["verified"], true);
        // The machine's CPU use over the run, from /proc/stat (this is Linux).
        let cpu = run["cpu_busy"].as_f64().expect("cpu_busy");
        assert!((0.0..=1.0).contains(&cpu), "cpu_busy {cpu}");
        // What the run cost: the server's backends (on this machine) did
        // work and wrote WAL for every runner; this process's CPU is
        // counted in 10 ms ticks, so a server-side loop's may be zero.
        let cost = &run["cost"];
        for key in [
            "server_cpu_s",
            "server_cpu_us_per_row",
            "wal_bytes",
            "wal_bytes_per_row",
        ] {
            assert!(cost[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {run}");
        }
        for key in ["client_cpu_s", "client_cpu_us_per_row"] {
            assert!(cost[key].as_f64().is_some_and(|v| v >= 0.0), "{key}: {run}");
        }
        let total = cost["cpu_us_per_row"].as_f64().expect("cpu_us_per_row");
        assert!(total >= cost["server_cpu_us_per_row"].as_f64().unwrap_or(f64::MAX) - 0.01);
        // Only the journaled run has a journal: every row changed
        // (every row), each of some bytes.
        let journal = &run["journal"];
        if run["runner"] == "engine-journal" {
            assert_eq!(journal["rows"], 2000, "{run}");
            for key in ["row_bytes_per_row", "disk_bytes_per_row"] {
                assert!(journal[key].as_f64().is_some_and(|b| b > 0.0), "{run}");
            }
        } else {
            assert!(journal.is_null(), "{run}");
        }
    }
}

/// The `adaptive` run (THR-3) reports every committed batch, starting at
/// `--start-batch` keys and growing from there, and verifies its rows.
#[test]
fn thr03_bench_adaptive_traces_every_batch_from_its_start_size() {
    let server = support::server_url().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "bench",
            "--only",
            "adaptive",
            "--rows",
            "3000",
            "--start-batch",
            "10",
            "--target-batch-ms",
            "50",
            "--json",
            "--database",
            "bft_bench_adaptive",
            "--database-url",
            &server,
        ])
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    let adaptive = &report["adaptive"];
    assert_eq!(adaptive["verified"], true, "{adaptive}");
    assert_eq!(adaptive["target_ms"], 50.0);
    assert_eq!(adaptive["start_size"], 10);
    let sizes: Vec<u64> = adaptive["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .map(|b| b["size"].as_u64().expect("size"))
        .collect();
    assert_eq!(sizes.first(), Some(&10), "{sizes:?}");
    // Growth is capped at 1.5x per batch (pace::GROW); 3000 rows at 10
    // keys a batch would take 300 batches, so the size grew.
    assert!(sizes.windows(2).all(|w| w[1] * 2 <= w[0] * 3), "{sizes:?}");
    assert!(sizes.len() < 300, "{sizes:?}");
    assert_eq!(report["verified"], true, "{report}");
}

/// `--partitions` runs `engine-p` once per P, each run named by its P and
/// verified; `engine-p1` is the unpartitioned path.
#[test]
fn par02_bench_engine_p_runs_at_each_partition_count() {
    let server = support::server_url().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "bench",
            "--only",
            "engine-p",
            "--partitions",
            "3,1",
            "--rows",
            "2000",
            "--batch",
            "100",
            "--reps",
            "1",
            "--json",
            "--database",
            "bft_bench_partitions",
            "--database-url",
            &server,
        ])
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["partitions"], serde_json::json!([1, 3]), "{report}");
    let runners: Vec<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runner"].as_str().unwrap())
        .collect();
    assert_eq!(runners, ["engine-p1", "engine-p3"]);
}

/// FLT-1: the `fleet` run spreads the rows over each D of
/// `--fleet-databases`, verifies every database, and reports an idle
/// database's connections and transactions; a D whose connections the
/// server cannot hold is reported as skipped, not run. No timing is
/// asserted.
#[test]
fn flt01_bench_fleet_reports_each_database_count_and_the_idle_cost() {
    let server = support::server_url().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "bench",
            "--only",
            "fleet",
            "--fleet-databases",
            "1,3,100000",
            "--rows",
            "3000",
            "--batch",
            "100",
            "--json",
            "--database",
            "bft_bench_fleet",
            "--database-url",
            &server,
        ])
        .output()
        .expect("run the bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    let runs = report["fleet"]["runs"].as_array().expect("fleet runs");
    assert_eq!(runs.len(), 3, "{report}");
    for (run, d) in runs.iter().take(2).zip([1, 3]) {
        assert_eq!(run["databases"], d, "{run}");
        assert_eq!(run["verified"], true, "{run}");
        assert!(run["rows_per_s"].as_f64().unwrap() > 0.0, "{run}");
        assert!(
            run["idle_connections_per_db"].as_f64().unwrap() >= 0.0,
            "{run}"
        );
        assert!(
            run["idle_xacts_per_db_per_poll"].as_f64().unwrap() >= 0.0,
            "{run}"
        );
        // Counted where pg_stat_statements is loaded, null elsewhere.
        let statements = &run["idle_statements_per_db_per_poll"];
        assert!(
            statements.is_null() || statements.as_f64().unwrap() >= 0.0,
            "{run}"
        );
        assert!(
            run.get("idle_statements_per_db_per_poll").is_some(),
            "{run}"
        );
    }
    assert!(
        runs[2]["skipped"].as_str().unwrap().contains("connections"),
        "{report}"
    );
}

#[test]
fn emb04_bench_rejects_bad_input_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "bench",
            "--rows",
            "0",
            "--database-url",
            "postgres://unused",
        ])
        .output()
        .expect("run the bench binary");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
