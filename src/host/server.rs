//! [`Host`]: the embedded runtime plus the serving and admin listeners.

use super::{Application, Embedded, HostConfig, HostError};
use crate::engine::Engine;
use crate::http::{self, metrics::MetricsSource, AdminRoutes};
use crate::readiness::Readiness;
use crate::runtime::RuntimeHandle;
use actix_web::dev::{Server, ServerHandle};
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
    /// The runtime the listeners serve: engine, actor runtime and
    /// readiness gate.
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

/// The serving listener at `addr`: the application's routes, `/readyz`
/// and `/livez`, and the admin routes too when they share its address
/// (`admin`). Started; the caller spawns it.
fn serving(
    embedded: &Embedded,
    app: Arc<dyn Application>,
    admin: Option<AdminRoutes>,
    addr: SocketAddr,
    grace: u64,
) -> std::io::Result<(Server, SocketAddr)> {
    let readiness = embedded.readiness_routes();
    let pool = embedded.pool.clone();
    let server = HttpServer::new(move || {
        let app = app.clone();
        let pool = pool.clone();
        let admin = admin.clone();
        App::new()
            .configure(move |cfg| app.configure(cfg, &pool))
            .configure(readiness.clone())
            .configure(move |cfg| {
                if let Some(admin) = &admin {
                    admin.configure(cfg)
                }
            })
    })
    .disable_signals()
    .shutdown_timeout(grace)
    .workers(2)
    .bind(addr)?;
    let bound = server.addrs().first().copied().unwrap_or(addr);
    Ok((server.run(), bound))
}

/// The admin listener of its own at `addr`. Started; the caller spawns it.
fn admin_listener(
    admin: AdminRoutes,
    addr: SocketAddr,
    grace: u64,
) -> std::io::Result<(Server, SocketAddr)> {
    let server = HttpServer::new(move || {
        let admin = admin.clone();
        // The headers on the whole listener too, so an unknown path's
        // answer carries them as well (AUTH-4).
        App::new()
            .wrap(http::security_headers())
            .configure(move |cfg| admin.configure(cfg))
    })
    .disable_signals()
    .shutdown_timeout(grace)
    .workers(1)
    .bind(addr)?;
    let bound = server.addrs().first().copied().unwrap_or(addr);
    Ok((server.run(), bound))
}

impl Host {
    /// Start `app` with everything in the contract's order, then open the
    /// listeners. Must run inside an actix system (`actix_web::main`).
    pub async fn start(config: HostConfig, app: impl Application) -> Result<Self, HostError> {
        config.check_trusted_listen()?;
        let app: Arc<dyn Application> = Arc::new(app);
        let embedded = Embedded::start(config.clone(), &*app).await?;
        let admin = embedded.admin_routes();
        // In-flight requests get the same grace as the runtime's drain on
        // shutdown, not actix's own 30 s (a slow request would hold the
        // process past a supervisor's kill).
        let http_grace = config.runtime.shutdown_grace.as_secs().max(1);
        // Port 0 asks for two fresh ports, so it never means "shared".
        let shared = config.listen == config.admin_listen && config.listen.port() != 0;
        let on_serving = shared.then(|| admin.clone());
        let (serving, serving_addr) =
            match serving(&embedded, app, on_serving, config.listen, http_grace) {
                Ok(started) => started,
                Err(error) => {
                    embedded.stop().await;
                    return Err(listen_error(config.listen, error));
                }
            };
        let mut servers = vec![serving.handle()];
        actix_rt::spawn(serving);
        let admin_addr = if shared {
            serving_addr
        } else {
            // The admin boundary has its own listener so it stays reachable
            // while serving is gated (CFG-3).
            match admin_listener(admin, config.admin_listen, http_grace) {
                Ok((server, addr)) => {
                    servers.push(server.handle());
                    actix_rt::spawn(server);
                    addr
                }
                Err(error) => {
                    for server in &servers {
                        server.stop(false).await;
                    }
                    embedded.stop().await;
                    return Err(listen_error(config.admin_listen, error));
                }
            }
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
