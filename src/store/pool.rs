//! Connection pool and embedded migrations.

use super::StoreError;
use diesel_async::pooled_connection::bb8::{Pool as Bb8Pool, PooledConnection};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
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
/// with that thread and break the pooled connection.
fn connection_runtime() -> Result<&'static tokio::runtime::Runtime, StoreError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("backfill-pg-driver")
                .enable_all()
                .build()
                .map_err(|e| e.kind().to_string())
        })
        .as_ref()
        .map_err(|e| StoreError::Pool(format!("cannot start the connection runtime: {e}")))
}

/// How long a pooled connection may sit idle before the pool closes it,
/// unless the caller chooses (bb8's own default).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Build a pool of `size` connections to `url`.
///
/// Connections are established on the dedicated connection runtime, so the
/// pool can be used from any runtime or arbiter.
pub async fn build_pool(url: &str, size: u32) -> Result<Pool, StoreError> {
    build_pool_shrinking(url, size, DEFAULT_IDLE_TIMEOUT).await
}

/// [`build_pool`] whose connections idle for longer than `idle_timeout`
/// are closed, so a database without work keeps only the connection its
/// polls reuse (the pool hands out the most recently returned one).
/// No lock, no statement.
pub async fn build_pool_shrinking(
    url: &str,
    size: u32,
    idle_timeout: Duration,
) -> Result<Pool, StoreError> {
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    // Hand out pooled connections without a `SELECT 1` round trip per
    // checkout (the default `Verified` recycling): claims, renewals and a
    // runner's first batch check out a connection each, and that check was
    // a round trip on each of them. The check kept instead costs nothing:
    // a connection whose driver saw the socket close (its server died or
    // was failed over, CLM-6) or whose transaction broke is dropped at
    // checkout and the pool opens a fresh one. `Fast` checks that only
    // when a connection is given back, so one that died while idle was
    // handed out, failed the first statement of whoever took it, and a
    // failure being recorded on it was lost: the runner then left its
    // claim to expire instead of handing the backfill to its retry. A
    // connection that died unnoticed still fails its first statement,
    // which the engine classifies as transient and retries (RT-1, RT-2).
    config.recycling_method = RecyclingMethod::CustomFunction(Box::new(|conn| {
        use diesel_async::pooled_connection::PoolableConnection;
        let broken = conn.is_broken();
        async move {
            if broken {
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::ClosedConnection,
                    Box::new("the pooled connection was closed".to_string()),
                ))
            } else {
                Ok(())
            }
        }
        .boxed()
    }));
    config.custom_setup = Box::new(|url: &str| {
        let url = url.to_string();
        async move {
            connection_runtime()
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?
                .spawn(async move {
                    let mut conn = establish(&url).await?;
                    // A session whose messages cannot be made untranslated
                    // still works; only the classification of its errors
                    // suffers, which `session_messages_untranslated` reports.
                    if let Ok(lc_messages) = session_messages_untranslated(&mut conn).await {
                        warn_if_translated(&lc_messages);
                    }
                    Ok(conn)
                })
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
        // Hand out the most recently returned connection: short calls
        // (claims, renewals, admin reads) check out one each, and LIFO keeps
        // reusing the one whose backend has warm caches and prepared
        // statements instead of cycling through every idle connection
        // (bb8's default FIFO).
        .queue_strategy(bb8::QueueStrategy::Lifo)
        .connection_timeout(Duration::from_secs(10))
        // No floor of idle connections: an idle database's pool may
        // shrink to the one its polls keep warm. The reaper looks a few
        // times per timeout, so a connection goes within about 1.25 of it.
        .min_idle(None)
        .idle_timeout(Some(idle_timeout))
        .reaper_rate((idle_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(30)))
        .build(manager)
        .await
        .map_err(|_| StoreError::Pool("could not build the connection pool".into()))
}

/// Make this session's server messages untranslated (`lc_messages = 'C'`)
/// and return the setting it ends with. No lock, no transaction.
///
/// Why: diesel-async hands errors over without their SQLSTATE, so
/// [`super::classify`] recognises a lost session, a timeout or a deadlock
/// by the server's message text, which `lc_messages` translates. In German
/// a statement timeout would read "Anfrage wurde wegen
/// Zeitüberschreitung abgebrochen" and classify as fatal instead of
/// retryable (RT-1). Only a superuser may set `lc_messages`; for any other
/// role the statement leaves it alone (no error, nothing in the server
/// log) and the caller warns when the setting is not English.
async fn session_messages_untranslated(conn: &mut AsyncPgConnection) -> Result<String, StoreError> {
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        v: String,
    }
    let row: Setting = diesel::sql_query(
        "SELECT CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \
                     THEN set_config('lc_messages', 'C', false) \
                     ELSE current_setting('lc_messages') END AS v",
    )
    .get_result(conn)
    .await?;
    Ok(row.v)
}

/// Whether an `lc_messages` value gives untranslated (English) messages.
/// Empty means the server's environment decides, which this process cannot
/// see; it is not reported.
pub(super) fn messages_untranslated(lc_messages: &str) -> bool {
    let v = lc_messages.trim();
    v.is_empty()
        || v.eq_ignore_ascii_case("C")
        || v.eq_ignore_ascii_case("POSIX")
        || v.starts_with("C.")
        || v.starts_with("en_")
        || v.starts_with("en.")
        || v.eq_ignore_ascii_case("en")
}

/// Warn once per process when a session's messages are translated.
fn warn_if_translated(lc_messages: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if messages_untranslated(lc_messages) || WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        return;
    }
    tracing::warn!(
        event = "translated_server_messages",
        lc_messages = %crate::failure::bounded(lc_messages.to_string()),
        "the server translates its messages and this role may not change lc_messages: \
         lost sessions, timeouts and deadlocks will classify as fatal instead of retryable; \
         have a superuser run ALTER ROLE <this role> SET lc_messages = 'C'"
    );
}

/// Run the framework's pending migrations on a dedicated blocking thread
/// (diesel's migration harness is synchronous; `AsyncMigrationHarness`
/// panics on actix-rt).
pub async fn run_migrations(url: &str) -> Result<(), StoreError> {
    run_embedded(url, MIGRATIONS).await
}

/// Run any set of embedded migrations (the example application uses this
/// for its own schema, kept apart from the framework's tables).
pub async fn run_embedded(url: &str, migrations: EmbeddedMigrations) -> Result<(), StoreError> {
    // Connected here, under the connection bound, and handed to the
    // blocking thread: the migrations themselves may take as long as they
    // take, but a server that never answers must not hang the start.
    let conn = connect_dedicated(url)
        .await
        .map_err(|e| StoreError::Migration(format!("could not connect to run migrations: {e}")))?;
    let handle = connection_runtime()?.handle().clone();
    tokio::task::spawn_blocking(move || {
        let _guard = handle.enter();
        let mut conn = diesel_async::async_connection_wrapper::AsyncConnectionWrapper::<
            AsyncPgConnection,
        >::from(conn);
        conn.run_pending_migrations(migrations)
            .map(|_| ())
            .map_err(|e| StoreError::Migration(crate::failure::bounded(e.to_string())))
    })
    .await
    .map_err(|_| StoreError::Migration("migration task panicked".into()))?
}

/// Replace the database name of a `postgres://` URL (query kept).
pub fn url_with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..path_start], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Create database `name` on the server of `server_url`, dropping a
/// previous one of that name first (`demo` and tests own their databases
/// by name). Returns the new database's URL. `name` must be a plain
/// lowercase identifier; anything else is rejected before any SQL runs.
pub async fn database_recreate(server_url: &str, name: &str) -> Result<String, StoreError> {
    use diesel_async::SimpleAsyncConnection;
    let plain = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !plain {
        return Err(StoreError::InvalidDatabaseName);
    }
    let mut conn = connect_dedicated(server_url).await?;
    // Two statements: DROP/CREATE DATABASE cannot share an implicit
    // transaction block.
    conn.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    conn.batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    Ok(url_with_database(server_url, name))
}

/// A connection outside the pool (LISTEN, database administration),
/// established on the connection runtime like pooled ones, within
/// [`CONNECT_TIMEOUT`].
pub async fn connect_dedicated(url: &str) -> Result<AsyncPgConnection, StoreError> {
    let url = url.to_string();
    connection_runtime()?
        .spawn(async move { establish(&url).await })
        .await
        .map_err(|_| StoreError::Pool("connection task ended".into()))?
        .map_err(|e| match e {
            diesel::ConnectionError::BadConnection(why) if why == NO_ANSWER => {
                StoreError::Pool(NO_ANSWER.into())
            }
            _ => StoreError::Pool("could not connect to the database server".into()),
        })
}

/// How long one connection attempt may take, from the TCP connect through
/// the startup and authentication exchange, before it counts as failed.
/// tokio-postgres bounds only the socket's connect (`connect_timeout` in
/// the URL), so a server that accepts the connection and never answers (a
/// stuck proxy, a half-dead host) would otherwise hang every caller: a
/// start, a fleet's join, a pooled checkout's background connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection attempt that ran out of [`CONNECT_TIMEOUT`] reports.
pub(crate) const NO_ANSWER: &str =
    "the database server did not answer within 10 s (connect, startup and authentication)";

/// Establish one session within [`CONNECT_TIMEOUT`].
async fn establish(url: &str) -> Result<AsyncPgConnection, diesel::ConnectionError> {
    tokio::time::timeout(CONNECT_TIMEOUT, AsyncPgConnection::establish(url))
        .await
        .map_err(|_| diesel::ConnectionError::BadConnection(NO_ANSWER.into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database name is checked before any connection is tried: one
    /// outside `[a-z0-9_]{1,63}` is refused as such, and a plain one gets
    /// as far as connecting (here to a port nothing listens on).
    #[tokio::test]
    async fn emb01_database_names_are_checked_before_connecting() {
        let nowhere = "postgres://postgres@127.0.0.1:1/postgres";
        for bad in [
            "",
            "Upper",
            "has-dash",
            "semi;colon",
            "quote'",
            "é",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(
                    database_recreate(nowhere, bad).await,
                    Err(StoreError::InvalidDatabaseName)
                ),
                "{bad:?}"
            );
        }
        for plain in ["a", "bft_0_9", &"z".repeat(63)] {
            assert!(
                matches!(
                    database_recreate(nowhere, plain).await,
                    Err(StoreError::Pool(_))
                ),
                "{plain:?}"
            );
        }
    }

    /// The database name of a URL is replaced; user, host, port and query
    /// are kept.
    #[test]
    fn emb01_url_with_database_keeps_everything_but_the_name() {
        for (url, expected) in [
            ("postgres://u@h:5/old", "postgres://u@h:5/new"),
            (
                "postgres://u@h:5/old?sslmode=disable",
                "postgres://u@h:5/new?sslmode=disable",
            ),
            ("postgres://u@h:5", "postgres://u@h:5/new"),
            ("postgres://u@h:5?a=b", "postgres://u@h:5/new?a=b"),
        ] {
            assert_eq!(url_with_database(url, "new"), expected, "{url}");
        }
    }

    /// A `Write` into a shared buffer, for reading what a subscriber logged.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An operator is told once per process that the server translates
    /// its messages (errors would then classify as fatal instead of
    /// retryable, RT-1; OBS-1): never for an untranslated setting, once
    /// for the first translated one, and not again after.
    #[test]
    fn rt01_translated_server_messages_are_warned_about_once() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let warnings = || {
            let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
            text.matches("translated_server_messages").count()
        };
        tracing::subscriber::with_default(subscriber, || {
            warn_if_translated("C");
            warn_if_translated("en_US.UTF-8");
            assert_eq!(warnings(), 0, "an untranslated setting is not reported");
            warn_if_translated("de_DE.UTF-8");
            assert_eq!(warnings(), 1, "the first translated setting is reported");
            warn_if_translated("fr_FR.UTF-8");
            assert_eq!(warnings(), 1, "and only the first");
        });
    }
}
