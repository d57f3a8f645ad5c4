//! The smallest embed: one declarative repair, the library's host with
//! its admin API, `/metrics`, UI and readiness gate, and the
//! application's own migration and route.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
//! BACKFILL_OPERATOR_TOKEN=... cargo run --example embed` (`LISTEN` and
//! `ADMIN_LISTEN` move the listeners off 127.0.0.1:8080 and :8081).

use backfill::host::{AppError, Application, Host, HostConfig};
use backfill::repair::{DefinitionError, Registry, SqlRepair};
use backfill::{async_trait, Pool};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

struct Items;

#[async_trait]
impl Application for Items {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        let email_norm = SqlRepair::new("items.email-norm.v1", "items")
            .key("id")
            .set("email_norm = lower(email)")
            .validate_where("email_norm IS DISTINCT FROM lower(email)")
            .build()?;
        Registry::new().with(email_norm)
    }

    async fn migrate(&self, url: &str) -> Result<(), AppError> {
        let mut conn = AsyncPgConnection::establish(url).await?;
        conn.batch_execute(
            "CREATE TABLE IF NOT EXISTS items (id bigint PRIMARY KEY, email text, email_norm text);
             INSERT INTO items (id, email) SELECT g, 'User' || g || '@Example.COM'
               FROM generate_series(1, 10000) AS g ON CONFLICT DO NOTHING",
        )
        .await?;
        Ok(())
    }

    fn configure(&self, cfg: &mut actix_web::web::ServiceConfig, _pool: &Pool) {
        cfg.route("/hello", actix_web::web::get().to(|| async { "hello" }));
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    // The runtime's events (claims, a failed start, completion) on stderr;
    // a service with a `tracing` subscriber of its own skips this line.
    backfill::logging::install(backfill::logging::LogFormat::Text)?;
    let mut config = HostConfig::new(std::env::var("DATABASE_URL")?);
    // Where to listen, when not the defaults (127.0.0.1:8080 and :8081).
    if let Ok(addr) = std::env::var("LISTEN") {
        config.listen = addr.parse()?;
    }
    if let Ok(addr) = std::env::var("ADMIN_LISTEN") {
        config.admin_listen = addr.parse()?;
    }
    config.admin_auth = backfill::admin::AuthConfig::from_sources(
        Some(&std::env::var("BACKFILL_OPERATOR_TOKEN")?),
        None,
        false,
    )?;
    let host = Host::start(config, Items).await?;
    println!(
        "serving {} (/hello, /readyz); admin {}",
        host.serving_addr, host.admin_addr
    );
    host.run_until_signal().await; // SIGTERM drains and releases the claim
    Ok(())
}
