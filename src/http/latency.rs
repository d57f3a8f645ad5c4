//! The host-latency middleware (THR-7): every request's duration recorded
//! on a [`LatencyHandle`], so the service's own percentile paces the
//! backfills it runs.
//!
//! Mount it on the application's own routes (not the admin listener):
//! `App::new().wrap(backfill::http::RecordLatency::new(handle.clone()))`.
//! The duration runs from the request's arrival at the middleware to the
//! response being ready; streaming bodies are not waited for.

use crate::throttle::latency::LatencyHandle;
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use futures_util::future::{ready, LocalBoxFuture, Ready};
use std::time::Instant;

/// Middleware that records each request's duration on a handle.
#[derive(Debug, Clone)]
pub struct RecordLatency {
    handle: LatencyHandle,
}

impl RecordLatency {
    /// Record on `handle`.
    pub fn new(handle: LatencyHandle) -> RecordLatency {
        RecordLatency { handle }
    }
}

impl<S, B> Transform<S, ServiceRequest> for RecordLatency
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Transform = RecordLatencyService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RecordLatencyService {
            service,
            handle: self.handle.clone(),
        }))
    }
}

/// The service [`RecordLatency`] wraps around the application's.
#[derive(Debug)]
pub struct RecordLatencyService<S> {
    service: S,
    handle: LatencyHandle,
}

impl<S, B> Service<ServiceRequest> for RecordLatencyService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let started = Instant::now();
        let handle = self.handle.clone();
        let fut = self.service.call(req);
        Box::pin(async move {
            let res = fut.await;
            handle.record(started.elapsed());
            res
        })
    }
}
