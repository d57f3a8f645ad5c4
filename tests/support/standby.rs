//! A throwaway primary with a streaming standby, for tests of what a
//! primary reports about its standbys.
//!
//! Both clusters come from the machine's PostgreSQL binaries
//! ([`backfill_ephemeral::EphemeralPostgres`]): the primary with
//! `wal_level = replica` and WAL senders, the standby from
//! `pg_basebackup -R -X stream` on a port of its own. Both are stopped and
//! their directories removed when the pair is dropped.
//!
//! A pair can also fail over: [`StandbyPair::crash_primary`] kills the
//! primary as a crash would and [`StandbyPair::promote_standby`] makes the
//! standby the new primary, while a client that connects with
//! [`StandbyPair::multi_host_url`] finds whichever of the two takes writes.

use backfill_ephemeral::EphemeralPostgres;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use std::sync::Arc;

/// A primary and its standby, both running.
pub struct StandbyPair {
    // Declared first so it is dropped (stopped) before its primary. Shared
    // so that the blocking `pg_ctl` calls of a failover run on a blocking
    // thread while the test's runtime (and a host on it) keeps running.
    standby: Arc<EphemeralPostgres>,
    primary: Arc<EphemeralPostgres>,
}

impl StandbyPair {
    /// Start a primary and a standby of it, and wait until the primary
    /// reports the standby streaming. Panics when either cannot start: a
    /// test that needs a standby never silently skips.
    pub async fn start() -> StandbyPair {
        Self::start_with(&[]).await
    }

    /// [`StandbyPair::start`] with `standby` settings for the standby
    /// (e.g. how often it reports its positions).
    pub async fn start_with(standby: &[(&'static str, &'static str)]) -> StandbyPair {
        let standby = standby.to_vec();
        let pair = tokio::task::spawn_blocking(move || {
            let primary = EphemeralPostgres::start_with(
                "primary",
                &[("wal_level", "replica"), ("max_wal_senders", "4")],
            )
            .unwrap_or_else(|e| panic!("cannot start the primary: {e}"));
            let standby = EphemeralPostgres::standby_of(&primary, "standby", &standby)
                .unwrap_or_else(|e| panic!("cannot start the standby: {e}"));
            StandbyPair {
                standby: Arc::new(standby),
                primary: Arc::new(primary),
            }
        })
        .await
        .expect("start the clusters");
        pair.wait_streaming().await;
        pair
    }

    /// The primary's `postgres` database.
    pub fn primary_url(&self) -> String {
        self.primary.url()
    }

    /// The standby's `postgres` database (read-only: it is in recovery).
    pub fn standby_url(&self) -> String {
        self.standby.url()
    }

    /// Both servers in one URL, the primary first, that connects only to
    /// the one that accepts writes (`target_session_attrs=read-write`):
    /// the primary until it dies, the standby once it is promoted.
    pub fn multi_host_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port(),
            self.standby.port()
        )
    }

    /// Kill the primary as a crash would (`pg_ctl stop -m immediate`):
    /// its sessions are cut off mid-transaction and whatever WAL it had
    /// not yet sent is never streamed. Panics when it cannot.
    pub async fn crash_primary(&self) {
        let primary = self.primary.clone();
        tokio::task::spawn_blocking(move || primary.crash())
            .await
            .expect("the crash task")
            .unwrap_or_else(|e| panic!("cannot crash the primary: {e}"));
    }

    /// Promote the standby (`pg_ctl promote`), returning once it has left
    /// recovery and accepts writes. Panics when it cannot.
    pub async fn promote_standby(&self) {
        let standby = self.standby.clone();
        tokio::task::spawn_blocking(move || standby.promote())
            .await
            .expect("the promotion task")
            .unwrap_or_else(|e| panic!("cannot promote the standby: {e}"));
    }

    /// A connection to the primary.
    pub async fn primary(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.primary.url())
            .await
            .expect("connect to the primary")
    }

    /// A connection to the standby.
    pub async fn standby(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.standby.url())
            .await
            .expect("connect to the standby")
    }

    /// Stop applying WAL on the standby (`pg_wal_replay_pause()`); it keeps
    /// receiving it, so the primary sees its replay position stand still.
    pub async fn pause_replay(&self) {
        self.standby()
            .await
            .batch_execute("SELECT pg_wal_replay_pause()")
            .await
            .expect("pause replay");
    }

    /// Apply WAL again (`pg_wal_replay_resume()`).
    pub async fn resume_replay(&self) {
        self.standby()
            .await
            .batch_execute("SELECT pg_wal_replay_resume()")
            .await
            .expect("resume replay");
    }

    /// Wait until the primary reports a standby streaming with a replay
    /// position (the standby connects on its own after it starts).
    pub async fn wait_streaming(&self) {
        let mut primary = self.primary().await;
        let mut wait = super::Deadline::new("the standby streams");
        while super::scalar_on(
            &mut primary,
            "SELECT count(*) AS v FROM pg_stat_replication \
             WHERE state = 'streaming' AND replay_lsn IS NOT NULL",
        )
        .await
            != 1
        {
            wait.tick().await;
        }
    }

    /// Wait until the standby has replayed everything the primary has
    /// written so far.
    pub async fn wait_caught_up(&self) {
        let target = super::scalar_on(
            &mut self.primary().await,
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS v",
        )
        .await;
        let mut standby = self.standby().await;
        let mut wait = super::Deadline::new("the standby catches up");
        while super::scalar_on(
            &mut standby,
            "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint AS v",
        )
        .await
            < target
        {
            wait.tick().await;
        }
    }
}
