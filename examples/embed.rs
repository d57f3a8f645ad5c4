//! Embedding backfill in a host service: the application hands the
//! library its schema and its repair; the library migrates, checks,
//! registers, starts the required backfill, runs it, gates readiness on
//! it and serves the admin API, `/metrics` and the UI.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example embed`

use backfill::host::{AppError, Application, Host, HostConfig};
use backfill::repair::{
    Batches, DefinitionError, Repair, RepairError, SelectThenMutate, SourceSet, Validation,
};
use backfill::{async_trait, AsyncPgConnection, Registry};
use diesel::sql_types::{Array, BigInt, Nullable};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};

/// `items.email_norm = lower(email)` for every existing row.
struct EmailNorm;

#[derive(diesel::QueryableByName)]
struct Key {
    #[diesel(sql_type = Nullable<BigInt>)]
    k: Option<i64>,
}

#[async_trait]
impl Repair for EmailNorm {
    type Key = i64;
    fn id(&self) -> &str {
        "items.email-norm.v1"
    }
    fn batch_limit(&self) -> u32 {
        1000
    }
    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let max: Key = diesel::sql_query("SELECT max(id) AS k FROM items")
            .get_result(conn)
            .await?;
        Ok(max.k.map_or(SourceSet::Empty, |upper| SourceSet::Bounded {
            upper,
            rows: None,
        }))
    }
    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let bad: Key = diesel::sql_query(
            "SELECT count(*) AS k FROM items WHERE id <= $1 \
             AND email_norm IS DISTINCT FROM lower(email)",
        )
        .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
        .get_result(conn)
        .await?;
        Ok(match bad.k {
            Some(0) => Validation::Success,
            _ => Validation::Failure("rows up to the bound are not normalized".into()),
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for EmailNorm {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        _limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let keys: Vec<Key> = diesel::sql_query(
            "SELECT id AS k FROM items WHERE id > $1 AND id <= $2 ORDER BY id LIMIT 1000",
        )
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .load(conn)
        .await?;
        Ok(keys.into_iter().filter_map(|k| k.k).collect())
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query("UPDATE items SET email_norm = lower(email) WHERE id = ANY($1)")
            .bind::<Array<BigInt>, _>(keys)
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// The host service's application: its schema, its repair, its route.
struct Items;

#[async_trait]
impl Application for Items {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        Registry::new().with(EmailNorm)
    }

    async fn migrate(&self, url: &str) -> Result<(), AppError> {
        use diesel_async::AsyncConnection;
        let mut conn = AsyncPgConnection::establish(url).await?;
        conn.batch_execute(
            "CREATE TABLE IF NOT EXISTS items (id bigint PRIMARY KEY, email text, email_norm text);
             INSERT INTO items (id, email) SELECT g, 'User' || g || '@Example.COM'
               FROM generate_series(1, 10000) AS g ON CONFLICT DO NOTHING",
        )
        .await?;
        Ok(())
    }

    fn configure(&self, cfg: &mut actix_web::web::ServiceConfig, _pool: &backfill::store::Pool) {
        cfg.route("/hello", actix_web::web::get().to(|| async { "hello" }));
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let mut config = HostConfig::new(std::env::var("DATABASE_URL")?);
    config.admin_auth =
        backfill::admin::AuthConfig::from_sources(Some("change-me-to-a-long-token"), None, false)?;
    let host = Host::start(config, Items).await?;
    println!(
        "serving on {} (readiness: /readyz); admin on {}",
        host.serving_addr, host.admin_addr
    );
    host.run_until_signal().await; // SIGTERM drains and releases the claim
    Ok(())
}
