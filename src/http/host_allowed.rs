//! The Host allow-list of trusted-network mode on the routes outside the
//! admin API (AUTH-3): `/metrics`, the web client and `/openapi.json`
//! answer only a `Host` the admin boundary answers for, as the admin API
//! does, so a DNS-rebinding page reads none of them.
//!
//! The check is the admin boundary's own ([`Admin`], found in the app data
//! the admin routes mount); a listener without one (a fleet's, or routes
//! mounted without the admin API) has no trusted-network mode to apply.

use super::admin::{error, Meta};
use crate::admin::Admin;
use actix_web::{web, HttpRequest, HttpResponse};

/// The refusal of `req`, named `action` in the audit, when its `Host` is
/// not one the boundary answers for; `None` to serve it.
pub(super) async fn refusal(req: &HttpRequest, action: &str) -> Option<HttpResponse> {
    let admin = req.app_data::<web::Data<Admin>>()?;
    let meta = Meta::from(req);
    admin
        .refuse_misdirected(&meta.as_meta(), action)
        .await
        .err()
        .map(|e| error(&e))
}
