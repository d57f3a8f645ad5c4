//! [`Host`]: the embedded runtime plus the serving and admin listeners.

use super::{Application, Embedded, HostConfig, HostError};
use crate::engine::Engine;
use crate::http::{self, metrics::MetricsSource, AdminRoutes};
use crate::readiness::Readiness;
use crate::runtime::RuntimeHandle;
use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpServer};
use std::net::SocketAddr;
use std::sync::Arc;

impl Embedded {
    /// The admin boundary over this runtime, to mount into an `App` of
    /// the embedder's own.
    pub fn admin_routes(&self) -> AdminRoutes {
        AdminRoutes::new(
            self.admin(),
            MetricsSource {
                pool: self.pool.clone(),
                engine: self.engine.clone(),
                readiness: self.readiness.clone(),
                runtime: self.runtime.metrics().clone(),
            },
        )
    }

    /// `/readyz` and `/livez` over this runtime's gate.
    pub fn readiness_routes(&self) -> impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static {
        let readiness = web::Data::new(self.readiness.clone());
        move |cfg| http::serving::configure(cfg, readiness.clone())
    }
}

/// A started host: the embedded runtime, the serving listener (the
/// application's routes, `/readyz`, `/livez`) and the admin listener.
pub struct Host {
    pub embedded: Embedded,
    /// Bound serving address (useful with port 0).
    pub serving_addr: SocketAddr,
    /// Bound admin address.
    pub admin_addr: SocketAddr,
    servers: Vec<ServerHandle>,
}

fn listen_error(addr: SocketAddr, error: std::io::Error) -> HostError {
    HostError::Listen {
        addr,
        reason: error.kind().to_string(),
    }
}

impl Host {
    /// Start `app` with everything in the contract's order, then open the
    /// listeners. Must run inside an actix system (`actix_web::main`).
    pub async fn start(config: HostConfig, app: impl Application) -> Result<Self, HostError> {
        let app: Arc<dyn Application> = Arc::new(app);
        let embedded = Embedded::start(config.clone(), &*app).await?;
        let admin = embedded.admin_routes();
        let readiness = embedded.readiness_routes();
        let pool = embedded.pool.clone();
        // In-flight requests get the same grace as the runtime's drain on
        // shutdown, not actix's own 30 s (a slow request would hold the
        // process past a supervisor's kill).
        let http_grace = config.runtime.shutdown_grace.as_secs().max(1);
        // Port 0 asks for two fresh ports, so it never means "shared".
        let shared = config.listen == config.admin_listen && config.listen.port() != 0;
        let shared_admin = admin.clone();
        let serving = HttpServer::new(move || {
            let app = app.clone();
            let pool = pool.clone();
            let admin = shared_admin.clone();
            App::new()
                .configure(move |cfg| app.configure(cfg, &pool))
                .configure(readiness.clone())
                .configure(move |cfg| {
                    if shared {
                        admin.configure(cfg)
                    }
                })
        })
        .disable_signals()
        .shutdown_timeout(http_grace)
        .workers(2)
        .bind(config.listen)
        .map_err(|e| listen_error(config.listen, e));
        let serving = match serving {
            Ok(serving) => serving,
            Err(error) => {
                embedded.stop().await;
                return Err(error);
            }
        };
        let serving_addr = serving.addrs().first().copied().unwrap_or(config.listen);
        let serving = serving.run();
        let mut servers = vec![serving.handle()];
        actix_rt::spawn(serving);
        let admin_addr = if shared {
            serving_addr
        } else {
            // The admin boundary has its own listener so it stays reachable
            // while serving is gated (CFG-3).
            let server = HttpServer::new(move || {
                let admin = admin.clone();
                App::new().configure(move |cfg| admin.configure(cfg))
            })
            .disable_signals()
            .shutdown_timeout(http_grace)
            .workers(1)
            .bind(config.admin_listen);
            let server = match server {
                Ok(server) => server,
                Err(error) => {
                    for server in &servers {
                        server.stop(false).await;
                    }
                    embedded.stop().await;
                    return Err(listen_error(config.admin_listen, error));
                }
            };
            let addr = server
                .addrs()
                .first()
                .copied()
                .unwrap_or(config.admin_listen);
            let server = server.run();
            servers.push(server.handle());
            actix_rt::spawn(server);
            addr
        };
        Ok(Self {
            embedded,
            serving_addr,
            admin_addr,
            servers,
        })
    }

    /// The engine (actions, reads, waits).
    pub fn engine(&self) -> &Engine {
        &self.embedded.engine
    }

    /// The actor runtime.
    pub fn runtime(&self) -> &RuntimeHandle<Engine> {
        &self.embedded.runtime
    }

    /// The readiness gate.
    pub fn readiness(&self) -> &Readiness {
        &self.embedded.readiness
    }

    /// The required (gating) IDs.
    pub fn required(&self) -> &[String] {
        &self.embedded.required
    }

    /// Stop the listeners and drain the runtime (claims are released so
    /// another process continues at once), at the same time: the drain
    /// does not wait for slow HTTP requests, and both are bounded by the
    /// shutdown grace.
    pub async fn stop(self) {
        let servers =
            futures_util::future::join_all(self.servers.iter().map(|server| server.stop(true)));
        futures_util::join!(servers, self.embedded.stop());
    }

    /// Run until SIGINT or SIGTERM, then stop gracefully.
    pub async fn run_until_signal(self) {
        super::wait_for_signal().await;
        tracing::info!(event = "shutdown_requested");
        self.stop().await;
    }
}
