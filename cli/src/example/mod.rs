//! The example application: an `events` table, four repairs over it, a fast
//! seeder, a schema-compatibility check and two HTTP handlers.
//!
//! It exists to exercise the framework end to end (`serve`, `demo`, the
//! conformance and configuration tests). Its schema is kept apart from the
//! framework's tables: [`migrate`] runs `src/example/migrations` only, so the
//! host can switch schema auto-migration off and still check compatibility
//! with [`check_schema`] (docs/CONTRACT.md section 8: a backfill never changes
//! schema).
//!
//! All SQL for the example's own tables lives in this module; `src/store`
//! only ever touches the framework's tables.

mod http;
mod repairs;
mod schema;
mod seed;

pub use http::{configure, Event, EventsState, NewEvent, MAX_LIMIT};
pub use repairs::{
    AuthorNorm, ContentLen, TagCount, TouchCount, AUTHOR_NORM_ID, CONTENT_LEN_ID, DEFAULT_BATCH,
    TAG_COUNT_ID, TOUCH_COUNT_ID,
};
pub use schema::{check_schema, SchemaError, SchemaItem};
pub use seed::{seed, SEED_CHUNK};

use backfill::__private::store::{self, Pool, StoreError};
use backfill::host::{AppError, Application};
use backfill::repair::{DefinitionError, Registry};
use backfill::AsyncPgConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations};

/// The example application's migrations (the `events` table), separate from
/// the framework's [`backfill::__private::store::MIGRATIONS`].
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("src/example/migrations");

/// Errors of the example application's setup paths. `Display` is redacted
/// like the store's (AUD-2): no raw database messages.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    /// Migrations, pool or a framework store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// One of the example's own statements failed.
    #[error("example database error: {}", store::describe(.0))]
    Database(#[from] diesel::result::Error),
    /// An argument is out of range (e.g. a seed size beyond `i64`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for ExampleError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        ExampleError::Store(StoreError::from(error))
    }
}

/// Apply the example application's pending migrations to the database at
/// `url`. Independent of the framework's own migrations, which the host runs
/// with [`backfill::__private::store::run_migrations`].
pub async fn migrate(url: &str) -> Result<(), ExampleError> {
    store::run_embedded(url, MIGRATIONS).await?;
    Ok(())
}

/// The stable IDs of the example repairs, in registration order.
pub fn repair_ids() -> Vec<&'static str> {
    vec![AUTHOR_NORM_ID, CONTENT_LEN_ID, TAG_COUNT_ID, TOUCH_COUNT_ID]
}

/// A registry with all four example repairs, each with `batch` keys per
/// batch (EX-4). A `batch` of 0 is rejected by the registry.
pub fn registry(batch: u32) -> Result<Registry, DefinitionError> {
    Registry::new()
        .with(AuthorNorm::new(batch))?
        .with(ContentLen::new(batch))?
        .with(TagCount::new(batch))?
        .with(TouchCount::new(batch))
}

/// The example application as the library's host sees it: its
/// migrations, its schema check, its four repairs and its `/events`
/// routes.
#[derive(Debug, Clone, Copy)]
pub struct ExampleApp {
    /// Keys per batch of every repair.
    pub batch_size: u32,
}

impl Default for ExampleApp {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH,
        }
    }
}

#[async_trait::async_trait]
impl Application for ExampleApp {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        registry(self.batch_size)
    }

    async fn migrate(&self, database_url: &str) -> Result<(), AppError> {
        Ok(migrate(database_url).await?)
    }

    async fn check_schema(&self, conn: &mut AsyncPgConnection) -> Result<(), AppError> {
        Ok(check_schema(conn).await?)
    }

    fn configure(&self, cfg: &mut actix_web::web::ServiceConfig, pool: &Pool) {
        configure(cfg, pool.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emb01_registry_holds_every_repair_id() {
        let all = registry(DEFAULT_BATCH).expect("valid definitions");
        let mut ids = repair_ids();
        ids.sort_unstable();
        assert_eq!(all.ids(), ids);
        assert!(matches!(
            registry(0),
            Err(DefinitionError::ZeroBatchLimit(_))
        ));
    }
}
