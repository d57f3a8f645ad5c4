//! The LISTEN/NOTIFY wake-up listener: a hint only. The poll interval
//! finds the same work if a notification is lost (docs/CONTRACT.md section 0).

use crate::engine::Engine;
use crate::events::Event;
use crate::runtime::RuntimeHandle;
use crate::store;
use std::time::Duration;

/// LISTEN for wake-ups on a dedicated connection and wake the supervisor on
/// each one (and after every reconnect); each is also an
/// [`Event::Changed`] for the engine's subscribers, so a waiter here sees
/// another process's completion without waiting for its next re-read, and
/// the engine counts it as a change its claims' settings may have seen
/// (THR-4).
pub(super) fn spawn_listener(
    url: String,
    runtime: RuntimeHandle<Engine>,
    engine: Engine,
) -> actix_rt::task::JoinHandle<()> {
    let events = engine.events().clone();
    use futures_util::StreamExt;
    use tracing::Instrument;
    let task = async move {
        loop {
            match store::connect_dedicated(&url).await {
                Ok(mut conn) => {
                    if store::wake_listen(&mut conn).await.is_ok() {
                        runtime.wake();
                        let mut stream = std::pin::pin!(conn.notifications_stream());
                        while let Some(Ok(notification)) = stream.next().await {
                            runtime.wake();
                            engine.note_changed();
                            events.publish(|| Event::Changed {
                                id: notification.payload,
                            });
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
