//! `cargo bench`: runs `backfill bench` at a modest N and prints the same
//! report. The numbers that count are in benches/README.md, regenerated
//! on a release build by the command its first line names (every runner
//! and the extras `takeover`, `rss` and `admin-list`, N = 1,000,000,
//! B = 100, 1000, 5000, 3 repetitions); its hand-written section is kept
//! by hand.
//!
//! `BENCH_ROWS`, `BENCH_BATCH` and `BENCH_REPS` override the defaults
//! (100,000 rows, B = 1000, 3 repetitions); `DATABASE_URL` selects the
//! server (else a throwaway cluster).

use clap::Parser;

/// Wraps [`backfill_cli::bench::BenchArgs`] so the harness can parse the same
/// flags the binary takes.
#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: backfill_cli::bench::BenchArgs,
}

fn main() {
    let rows = std::env::var("BENCH_ROWS").unwrap_or_else(|_| "100000".into());
    let batch = std::env::var("BENCH_BATCH").unwrap_or_else(|_| "1000".into());
    let reps = std::env::var("BENCH_REPS").unwrap_or_else(|_| "3".into());
    // `cargo bench` passes `--bench` (and maybe a filter); ignore them.
    let wrapper = match Wrapper::try_parse_from([
        "throughput",
        "--rows",
        &rows,
        "--batch",
        &batch,
        "--reps",
        &reps,
    ]) {
        Ok(w) => w,
        Err(e) => {
            eprintln!(
                "error: {}",
                e.to_string().lines().next().unwrap_or("bad arguments")
            );
            std::process::exit(2);
        }
    };
    let code = actix_rt::System::new().block_on(async move {
        match backfill_cli::bench::run(wrapper.args).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        }
    });
    std::process::exit(code);
}
