//! The LISTEN/NOTIFY wake-up listener: a hint only. The poll interval
//! finds the same work if a notification is lost (docs/CONTRACT.md section 0).

use crate::engine::Engine;
use crate::events::Event;
use crate::runtime::RuntimeHandle;
use crate::store;
use std::time::{Duration, Instant};

/// How often a listener that closes while idle looks at the runtime's
/// claims: an atomic read, no statement.
const IDLE_CHECK: Duration = Duration::from_millis(100);

/// LISTEN for wake-ups on a dedicated connection and wake the supervisor on
/// each one (and after every reconnect); each is also an
/// [`Event::Changed`] for the engine's subscribers, so a waiter here sees
/// another process's completion without waiting for its next re-read, and
/// the engine counts it as a change its claims' settings may have seen
/// (THR-4).
///
/// With `idle_close`, the connection is held only while the runtime holds
/// a claim (and for `idle_close` after its last one), so an idle database
/// of a fleet costs no listener; the next claim, found by the poll, opens
/// it again. Every (re)opened listener counts as a change, so a claim
/// re-reads its settings at its next batch after any gap in listening.
pub(super) fn spawn_listener(
    url: String,
    runtime: RuntimeHandle<Engine>,
    engine: Engine,
    idle_close: Option<Duration>,
) -> actix_rt::task::JoinHandle<()> {
    use tracing::Instrument;
    let task = async move {
        loop {
            if idle_close.is_some() {
                while runtime.claims_held() == 0 {
                    actix_rt::time::sleep(IDLE_CHECK).await;
                }
            }
            match store::connect_dedicated(&url).await {
                Ok(mut conn) => {
                    if store::wake_listen(&mut conn).await.is_ok() {
                        runtime.wake();
                        engine.note_changed();
                        if listen(&mut conn, &runtime, &engine, idle_close).await {
                            tracing::debug!(
                                event = "wake_listener_idle",
                                "no claim held; LISTEN closed until the next one"
                            );
                            continue;
                        }
                    }
                    tracing::warn!(
                        event = "wake_listener_lost",
                        "LISTEN connection ended; reconnecting (polling continues)"
                    );
                }
                Err(error) => {
                    tracing::warn!(event = "wake_listener_lost", error = %error, "cannot LISTEN; polling continues");
                }
            }
            actix_rt::time::sleep(Duration::from_secs(1)).await;
        }
    };
    actix_rt::spawn(task.in_current_span())
}

/// Pass on notifications until the connection ends (`false`) or, with
/// `idle_close`, the runtime has held no claim for that long (`true`).
async fn listen(
    conn: &mut diesel_async::AsyncPgConnection,
    runtime: &RuntimeHandle<Engine>,
    engine: &Engine,
    idle_close: Option<Duration>,
) -> bool {
    use futures_util::StreamExt;
    let events = engine.events();
    let mut stream = std::pin::pin!(conn.notifications_stream());
    let mut idle_since: Option<Instant> = None;
    loop {
        let check = async {
            match idle_close {
                Some(_) => actix_rt::time::sleep(IDLE_CHECK).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            notification = stream.next() => match notification {
                Some(Ok(notification)) => {
                    runtime.wake();
                    engine.note_changed();
                    events.publish(|| Event::Changed {
                        id: notification.payload,
                    });
                }
                _ => return false,
            },
            () = check => {
                if runtime.claims_held() > 0 {
                    idle_since = None;
                } else if idle_close.is_some_and(|close| {
                    idle_since.get_or_insert_with(Instant::now).elapsed() >= close
                }) {
                    return true;
                }
            }
        }
    }
}
