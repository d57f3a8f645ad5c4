//! An actix-web service that already has its own `HttpServer` and `App`:
//! it starts the embedded runtime and mounts the admin boundary and the
//! readiness endpoints into its App, beside its own route. The table
//! `items` is the service's own (see `examples/embed.rs` for a migration).
//!
//! Errors after the start (a busy port, say) leave `main` with `?` and no
//! `stop()`: that is safe. The runtime is dropped without draining, and
//! what it claimed is taken over once its lease expires (EMB-9); a
//! service that wants its claims released at once calls `stop()` first.
//!
//! Run: `DATABASE_URL=... BACKFILL_OPERATOR_TOKEN=... cargo run --example
//! actix_service` (`LISTEN`, default `127.0.0.1:8080`, is where it serves)

use actix_web::{web, App, HttpServer};
use backfill::host::{Embedded, HostConfig};
use backfill::repair::{Registry, SqlRepair};

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    // The runtime's events (claims, a failed start, completion) on stderr;
    // a service with a `tracing` subscriber of its own skips this line.
    backfill::logging::install(backfill::logging::LogFormat::Text)?;
    let repair = SqlRepair::new("items.email-norm.v1", "items")
        .key("id")
        .set("email_norm = lower(email)")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .build()?;
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let mut config = HostConfig::new(std::env::var("DATABASE_URL")?);
    config.migrate = false;
    config.admin_auth = backfill::admin::AuthConfig::from_sources(
        Some(&std::env::var("BACKFILL_OPERATOR_TOKEN")?),
        None,
        false,
    )?;
    // A registry alone is an application: no migrations, no routes.
    let embedded = Embedded::start(config, &Registry::new().with(repair)?).await?;
    let admin = embedded.admin_routes();
    let readiness = embedded.readiness_routes();
    let server = HttpServer::new(move || {
        let admin = admin.clone();
        App::new()
            .configure(move |cfg| admin.configure(cfg))
            .configure(readiness.clone())
            .route(
                "/orders",
                web::get().to(|| async { "the service's own route" }),
            )
    })
    .bind(&listen)?
    .run();
    println!("serving http://{listen} (/orders, /readyz, /admin, /metrics, /ui)");
    server.await?; // Ctrl-C stops the server (actix's own signal handling)
    embedded.stop().await; // then drain: claims are released
    Ok(())
}
