//! The sender: one per fleet at a time (a session advisory lock), it
//! delivers each queued notification at least once (NTF-2).

use super::post::{self, Endpoint, SIGNATURE_HEADER};
use super::{millis, Body, NotifyConfig, NotifyError, Secret};
use crate::store::{self, OutboxRow, Pool};
use diesel_async::AsyncPgConnection;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Due notifications taken per pass; delivered concurrently, so one
/// hanging receiver delays the others by at most the timeout.
const PER_PASS: i64 = 32;
/// How often the leader renews its subscription and prunes the outbox.
const UPKEEP_EVERY: Duration = Duration::from_secs(60);

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Whether this sender held the fleet's lock (otherwise it did
    /// nothing).
    pub leading: bool,
    /// `throttled` notifications queued by this pass.
    pub throttled: usize,
    /// Notifications delivered (answered 2xx) by this pass.
    pub delivered: usize,
    /// Failed tries that will be tried again.
    pub retried: usize,
    /// Notifications that failed their last try.
    pub dead: usize,
}

/// The lock's session and whether it holds the lock.
struct Leadership {
    conn: AsyncPgConnection,
    leading: bool,
}

/// Delivers the outbox to the configured targets. Build with
/// [`Sender::new`]; [`Sender::run`] loops, [`Sender::run_once`] is one
/// pass. Dropping it ends its lock's session, so another process's sender
/// takes over.
pub struct Sender {
    pool: Pool,
    database_url: String,
    config: NotifyConfig,
    targets: BTreeMap<String, (Endpoint, Secret)>,
    /// The TLS client configuration of the https targets, built once.
    tls: Arc<rustls::ClientConfig>,
    leadership: tokio::sync::Mutex<Option<Leadership>>,
    upkeep_at: parking_lot::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender of `config` (checked here) over `pool`; the lock's session
    /// is a dedicated connection to `database_url`.
    pub fn new(
        pool: Pool,
        database_url: impl Into<String>,
        config: NotifyConfig,
    ) -> Result<Self, NotifyError> {
        config.validate()?;
        let tls = config.tls()?;
        let mut targets = BTreeMap::new();
        for t in &config.targets {
            let endpoint = Endpoint::parse(&t.url).map_err(|reason| NotifyError::Config {
                field: format!("targets[{}].url", t.name),
                reason,
            })?;
            targets.insert(t.name.clone(), (endpoint, t.secret.clone()));
        }
        Ok(Sender {
            pool,
            database_url: database_url.into(),
            config,
            targets,
            tls,
            leadership: tokio::sync::Mutex::new(None),
            upkeep_at: parking_lot::Mutex::new(None),
        })
    }

    /// Loop forever: a pass every interval; errors are logged and the
    /// next pass tries again.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(e) = self.run_once().await {
                tracing::warn!(event = "notify_pass_failed", error = %e);
            }
        }
    }

    /// One pass: take (or check) the fleet's lock; as leader, renew the
    /// subscription and prune now and then, queue long throttles, and
    /// deliver what is due. Holds no pooled connection while it waits on a
    /// receiver.
    pub async fn run_once(&self) -> Result<Pass, NotifyError> {
        if !self.lead().await? {
            return Ok(Pass::default());
        }
        let mut pass = Pass {
            leading: true,
            ..Pass::default()
        };
        let due = {
            let mut conn = self.pool.get().await.map_err(store::StoreError::from)?;
            self.upkeep(&mut conn).await?;
            if self.subscribes("throttled") {
                pass.throttled =
                    store::outbox_enqueue_throttled(&mut conn, millis(self.config.throttled_after))
                        .await?;
            }
            let due = store::outbox_due(&mut conn, PER_PASS).await?;
            // Each try is counted before it is sent: a sender that dies
            // after its POST has used it, and a row whose every try ended
            // the sender is dead instead of retried forever (NTF-2). Its
            // receiver may then get it twice, under one event ID.
            let ids: Vec<uuid::Uuid> = due.iter().map(|row| row.event_id).collect();
            let sent = store::outbox_attempt(
                &mut conn,
                &ids,
                i32::try_from(self.config.max_attempts).unwrap_or(i32::MAX),
                millis(self.config.backoff_base),
                millis(self.config.backoff_max),
            )
            .await?;
            pass.dead += due.len() - sent.len();
            due.into_iter()
                .filter(|row| sent.contains(&row.event_id))
                .collect::<Vec<_>>()
        };
        let tries = futures_util::future::join_all(due.iter().map(|row| self.deliver(row))).await;
        let mut conn = self.pool.get().await.map_err(store::StoreError::from)?;
        for (row, outcome) in due.iter().zip(tries) {
            match outcome {
                Ok(()) => {
                    store::outbox_delivered(&mut conn, row.event_id).await?;
                    pass.delivered += 1;
                }
                Err((error, last)) => {
                    let max = if last { 1 } else { self.config.max_attempts };
                    let status = store::outbox_failed(
                        &mut conn,
                        row.event_id,
                        &error,
                        i32::try_from(max).unwrap_or(i32::MAX),
                        millis(self.config.backoff_base),
                        millis(self.config.backoff_max),
                    )
                    .await?;
                    tracing::warn!(
                        event = "notification_failed",
                        event_id = %row.event_id,
                        target = %row.target,
                        attempt = row.attempts + 1,
                        error = %error,
                    );
                    match status.as_deref() {
                        Some("dead") => pass.dead += 1,
                        _ => pass.retried += 1,
                    }
                }
            }
        }
        Ok(pass)
    }

    /// Take the fleet's lock if it is free and, as leader, write the
    /// subscription now, so every change from here on is queued; delivers
    /// nothing. Hosts call it before their runtime starts. Whether this
    /// sender leads (a follower's fleet is subscribed by the leader).
    pub async fn subscribe(&self) -> Result<bool, NotifyError> {
        if !self.lead().await? {
            return Ok(false);
        }
        let mut conn = self.pool.get().await.map_err(store::StoreError::from)?;
        self.upkeep(&mut conn).await?;
        Ok(true)
    }

    fn subscribes(&self, event: &str) -> bool {
        self.config
            .targets
            .iter()
            .any(|t| t.events.iter().any(|e| e == event))
    }

    /// Whether this sender holds the fleet's lock, taking it if free. A
    /// session that died took the lock with it: a new one is made.
    async fn lead(&self) -> Result<bool, NotifyError> {
        let mut held = self.leadership.lock().await;
        if let Some(l) = held.as_mut() {
            if l.leading {
                if store::notify_leader_ping(&mut l.conn).await.is_ok() {
                    return Ok(true);
                }
                tracing::warn!(event = "notify_lock_lost");
                *held = None;
            }
        }
        if held.is_none() {
            let conn = store::connect_dedicated(&self.database_url).await?;
            *held = Some(Leadership {
                conn,
                leading: false,
            });
        }
        let Some(l) = held.as_mut() else {
            return Ok(false);
        };
        match store::notify_leader_try_lock(&mut l.conn).await {
            Ok(leading) => {
                l.leading = leading;
                if leading {
                    // A new leader writes its subscription at once.
                    *self.upkeep_at.lock() = None;
                    tracing::info!(event = "notify_leading");
                }
                Ok(leading)
            }
            Err(e) => {
                *held = None;
                Err(e.into())
            }
        }
    }

    /// Renew the subscription and prune old rows, at most every
    /// [`UPKEEP_EVERY`].
    async fn upkeep(&self, conn: &mut AsyncPgConnection) -> Result<(), NotifyError> {
        let due = self
            .upkeep_at
            .lock()
            .is_none_or(|at| at.elapsed() >= UPKEEP_EVERY);
        if !due {
            return Ok(());
        }
        let (mut names, mut events) = (Vec::new(), Vec::new());
        for t in &self.config.targets {
            for e in &t.events {
                names.push(t.name.clone());
                events.push(e.clone());
            }
        }
        store::outbox_subscribe(conn, &names, &events, millis(self.config.subscription_ttl))
            .await?;
        store::outbox_prune(conn, millis(self.config.retention)).await?;
        *self.upkeep_at.lock() = Some(Instant::now());
        Ok(())
    }

    /// One try of one row: `Err((why, last))`, `last` when no later try
    /// can succeed (its target is no longer configured).
    async fn deliver(&self, row: &OutboxRow) -> Result<(), (String, bool)> {
        let Some((endpoint, secret)) = self.targets.get(&row.target) else {
            return Err(("the target is no longer configured".into(), true));
        };
        let body = serde_json::to_vec(&Body::of(row))
            .map_err(|_| ("the body could not be encoded".to_string(), true))?;
        let headers = [
            ("X-Backfill-Event-Id", row.event_id.to_string()),
            ("X-Backfill-Event", row.event.clone()),
            (SIGNATURE_HEADER, post::sign(secret.bytes(), &body)),
        ];
        match post::post(endpoint, &self.tls, &headers, &body, self.config.timeout).await {
            Ok(code) if (200..300).contains(&code) => Ok(()),
            Ok(code) => Err((format!("the receiver answered {code}"), false)),
            Err(why) => Err((why, false)),
        }
    }
}
