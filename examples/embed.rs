//! Embedding backfill in a host service: build a pool, register repairs,
//! start the runtime, and drain it on shutdown. Register before claiming
//! (the supervisor does it for you), and start only what your deployment
//! wants started: everything else is an operator's decision.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example embed`

use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use backfill::{example, store, Engine, EngineConfig, Registry};
use std::sync::Arc;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")?;
    store::run_migrations(&url).await?; // the framework's tables
    example::migrate(&url).await?; // your application's schema, your way
    let pool = store::build_pool(&url, 8).await?;

    let registry = Registry::new().with(example::AuthorNorm::new(1000))?;
    let engine = Engine::new(pool, registry, EngineConfig::default())?;
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), RuntimeConfig::default())?;

    engine.register().await?;
    engine.start(example::AUTHOR_NORM_ID).await?; // captures the bound once
    println!("running; Ctrl-C drains and releases the claim");
    backfill::host::wait_for_signal().await;
    runtime.shutdown().await;
    Ok(())
}
