//! Connection pool and embedded migrations.

use super::StoreError;
use diesel_async::pooled_connection::bb8::{Pool as Bb8Pool, PooledConnection};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use futures_util::FutureExt;
use std::sync::OnceLock;
use std::time::Duration;

/// The framework's own migrations (the backfill tables).
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// The pool every layer shares.
pub type Pool = Bb8Pool<AsyncPgConnection>;
/// A connection checked out of [`Pool`].
pub type PooledConn<'a> = PooledConnection<'a, AsyncPgConnection>;

/// One long-lived runtime that owns every pooled connection's driver task.
///
/// A tokio-postgres connection's driver runs on the runtime that created it;
/// created on an actix arbiter or a short-lived test runtime, it would die
/// with that thread and break the pooled connection (DESIGN.md facts).
fn connection_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("backfill-pg-driver")
            .enable_all()
            .build()
            .expect("the connection runtime must start (no I/O has happened yet)")
    })
}

/// Build a pool of `size` connections to `url`.
///
/// Connections are established on the dedicated connection runtime, so the
/// pool can be used from any runtime or arbiter.
pub async fn build_pool(url: &str, size: u32) -> Result<Pool, StoreError> {
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    config.custom_setup = Box::new(|url: &str| {
        let url = url.to_string();
        async move {
            connection_runtime()
                .spawn(async move { AsyncPgConnection::establish(&url).await })
                .await
                .map_err(|_| {
                    diesel::ConnectionError::BadConnection("connection task ended".into())
                })?
        }
        .boxed()
    });
    let manager = AsyncDieselConnectionManager::new_with_config(url, config);
    Bb8Pool::builder()
        .max_size(size.max(1))
        .connection_timeout(Duration::from_secs(10))
        .build(manager)
        .await
        .map_err(|_| StoreError::Pool("could not build the connection pool".into()))
}

/// Run the framework's pending migrations on a dedicated blocking thread
/// (diesel's migration harness is synchronous; `AsyncMigrationHarness`
/// panics on actix-rt, DESIGN.md facts).
pub async fn run_migrations(url: &str) -> Result<(), StoreError> {
    run_embedded(url, MIGRATIONS).await
}

/// Run any set of embedded migrations (the example application uses this
/// for its own schema, kept apart from the framework's tables).
pub async fn run_embedded(url: &str, migrations: EmbeddedMigrations) -> Result<(), StoreError> {
    let url = url.to_string();
    let handle = connection_runtime().handle().clone();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        let mut conn = <diesel_async::async_connection_wrapper::AsyncConnectionWrapper<
            AsyncPgConnection,
        > as diesel::Connection>::establish(&url)
        .map_err(|_| StoreError::Migration("could not connect to run migrations".into()))?;
        conn.run_pending_migrations(migrations)
            .map(|_| ())
            .map_err(|e| StoreError::Migration(crate::repair::bounded(e.to_string())))
    })
    .await
    .map_err(|_| StoreError::Migration("migration task panicked".into()))?
}
