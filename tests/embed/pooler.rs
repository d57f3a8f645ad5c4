//! EMB-13: a host behind a real PgBouncer. In transaction mode (Debian's
//! 1.18, which does not track prepared statements, with a pool smaller
//! than the runtime's) it refuses to start with one line naming the
//! settings to change, before anything reaches the database; in session
//! mode it runs a backfill to `completed` through the pooler.

use super::support::pgbouncer::Pgbouncer;
use super::support::{engine_config, server_url, test_db, TestDb};
use backfill::host::{Embedded, HostConfig, HostError};
use backfill::repair::Registry;
use backfill::{SqlRepair, State};
use std::time::Duration;

const POOLED: &str = "pooled.n.v1";

async fn seeded() -> TestDb {
    let db = test_db().await;
    db.exec(
        "CREATE TABLE pooled (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0); \
         INSERT INTO pooled (id) SELECT g FROM generate_series(1, 3000) g",
    )
    .await;
    db
}

fn registry() -> Registry {
    let repair = SqlRepair::new(POOLED, "pooled")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .batch_size(200)
        .build()
        .expect("definition");
    Registry::new().with(repair).expect("registers")
}

fn config(url: String) -> HostConfig {
    let mut config = HostConfig::new(url);
    config.migrate = true;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config
}

/// EMB-13: through PgBouncer in transaction mode the host refuses to
/// start, in one line that says what it saw and names `pool_mode` and
/// `max_prepared_statements`; the backfill's row is untouched (nothing
/// was registered). Guard: the pooler probe at startup (without it the
/// host starts and its statements fail one by one later).
#[actix_rt::test]
async fn emb13_a_transaction_pooler_is_refused_at_start_in_one_line() {
    let db = seeded().await;
    let pooler = Pgbouncer::start(server_url(), "transaction", 2);
    let refused = Embedded::spawn(config(pooler.url(&db.name)), registry()).await;
    let message = match refused {
        Err(HostError::Pooler(message)) => message,
        Err(other) => panic!("refused for another reason: {other}\n{}", pooler.log()),
        Ok(_) => panic!("started behind a transaction pooler"),
    };
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains("pooler in transaction mode"), "{message}");
    assert!(
        message.contains("pool_mode = session") && message.contains("max_prepared_statements"),
        "{message}"
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{POOLED}'"
        ))
        .await,
        0,
        "nothing registered"
    );
}

/// EMB-13: through PgBouncer in session mode the probe passes and the
/// host runs a backfill to `completed` through the pooler, every row
/// repaired exactly once. Guard: the probe's finding must come from the
/// pooler's mode, not from the pooler's presence.
#[actix_rt::test]
async fn emb13_a_session_pooler_runs_a_backfill() {
    let db = seeded().await;
    let pooler = Pgbouncer::start(server_url(), "session", 20);
    let spawned = Embedded::spawn(config(pooler.url(&db.name)), registry())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pooler.log()));
    spawned.engine.start(POOLED).await.expect("start");
    spawned.runtime.wake();
    let row = spawned
        .engine
        .wait_for(
            POOLED,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(60),
        )
        .await
        .expect("settled");
    spawned.stop().await;
    assert_eq!(row.state, State::Completed, "{:?}", row.last_error);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM pooled WHERE n <> 1")
            .await,
        0
    );
}
