//! A plain tokio service (no actix system of its own, as in an axum or
//! tonic service): `Embedded::spawn` runs the actor runtime on a thread of
//! its own; the service starts a backfill, awaits its completion by state
//! (re-read from PostgreSQL, never inferred from events) and follows its
//! events meanwhile.
//!
//! Run: `DATABASE_URL=... cargo run --example tokio_service` (the table
//! `items` must exist; `examples/embed.rs` creates it)

use backfill::events::Event;
use backfill::host::{Embedded, HostConfig};
use backfill::repair::{Registry, SqlRepair};
use backfill::{Started, State};
use std::time::Duration;

const ID: &str = "items.email-norm.v1";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The runtime's events (claims, a failed start, completion) on stderr;
    // a service with a `tracing` subscriber of its own skips this line.
    backfill::logging::install(backfill::logging::LogFormat::Text)?;
    let repair = SqlRepair::new(ID, "items")
        .key("id")
        .set("email_norm = lower(email)")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .build()?;
    let mut config = HostConfig::new(std::env::var("DATABASE_URL")?);
    config.migrate = false;
    config.auto_backfills = false;
    let spawned = Embedded::spawn(config, Registry::new().with(repair)?).await?;
    let mut events = spawned.engine.events().subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::State { id, state } = event {
                println!("{id} is {state}");
            }
        }
    });
    match spawned.engine.start(ID).await? {
        Started::Started(_) => println!("started {ID}"),
        Started::AlreadyStarted { state, .. } => println!("{ID} was already {state}"),
    }
    spawned.runtime.wake();
    let row = spawned
        .engine
        .wait_for(
            ID,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(600),
        )
        .await?;
    println!("{ID} ended {}", row.state);
    spawned.stop().await;
    Ok(())
}
