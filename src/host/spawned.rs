//! The runtime started from a plain tokio service (EMB-7): the actor
//! runtime needs an actix system, so [`Embedded::spawn`] runs one on a
//! thread of its own and hands back what the service uses.

use super::{Application, Embedded, HostConfig, HostError};
use crate::engine::Engine;
use crate::readiness::Readiness;
use crate::runtime::RuntimeHandle;
use crate::store::Pool;
use tokio::sync::oneshot;

/// [`Embedded`] running on its own actix system thread. Its engine (for
/// actions, reads and [`Engine::wait_for`]), readiness gate and runtime
/// handle work from any tokio runtime.
pub struct Spawned {
    /// The connection pool the engine and the admin API share.
    pub pool: Pool,
    /// The engine: actions, reads, [`Engine::wait_for`] and events.
    pub engine: Engine,
    /// The handle of the actor runtime that claims and runs backfills.
    pub runtime: RuntimeHandle<Engine>,
    /// The readiness gate (section 8 of the contract), evaluated from
    /// PostgreSQL on every read.
    pub readiness: Readiness,
    /// The required (gating) IDs.
    pub required: Vec<String>,
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
}

impl Embedded {
    /// Start `app` like [`Embedded::start`], from any async context: the
    /// actix system the runtime needs runs on a thread of its own until
    /// [`Spawned::stop`].
    pub async fn spawn(config: HostConfig, app: impl Application) -> Result<Spawned, HostError> {
        let (started_tx, started_rx) = oneshot::channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let (stopped_tx, stopped) = oneshot::channel();
        std::thread::Builder::new()
            .name("backfill-runtime".into())
            .spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let embedded = match Embedded::start(config, &app).await {
                        Ok(embedded) => embedded,
                        Err(error) => {
                            let _ = started_tx.send(Err(error));
                            return;
                        }
                    };
                    let parts = (
                        embedded.pool.clone(),
                        embedded.engine.clone(),
                        embedded.runtime.clone(),
                        embedded.readiness.clone(),
                        embedded.required.clone(),
                    );
                    if started_tx.send(Ok(parts)).is_err() {
                        embedded.stop().await;
                        return;
                    }
                    // A dropped `Spawned` stops the runtime as well.
                    let _ = stop_rx.await;
                    embedded.stop().await;
                    let _ = stopped_tx.send(());
                });
            })
            .map_err(|e| HostError::Config(format!("cannot start the runtime thread: {e}")))?;
        let (pool, engine, runtime, readiness, required) = started_rx
            .await
            .map_err(|_| HostError::Config("the runtime thread ended during startup".into()))??;
        Ok(Spawned {
            pool,
            engine,
            runtime,
            readiness,
            required,
            stop,
            stopped,
        })
    }
}

impl Spawned {
    /// Drain the runtime (claims released) and end its thread.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.stopped.await;
    }
}
