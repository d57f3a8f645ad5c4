//! The HTTP side of `backfill ctl`: requests to the admin API, its
//! statuses mapped to `CtlError`, actions re-sent with one idempotency key
//! on network and server errors, and the list read page by page.

use super::error::{one_line, CtlError};
use backfill::admin::{ConflictBody, ErrorBody};
use serde_json::Value;
use std::time::Duration;

/// The admin API at one base URL, with the operator's token.
pub(super) struct Client {
    base: String,
    token: Option<String>,
    /// The operator's reason, percent-encoded, sent with every action.
    reason: Option<String>,
    http: awc::Client,
}

/// One response: status and body.
struct Response {
    status: u16,
    body: Value,
}

impl Client {
    /// A client of the API at `base` that sends `token` as its bearer
    /// token, each request bounded to 30 s.
    pub(super) fn new(base: String, token: Option<String>) -> Self {
        Client {
            base,
            token,
            reason: None,
            http: awc::Client::builder()
                .timeout(Duration::from_secs(30))
                .finish(),
        }
    }

    /// Send `reason` with every action (a request with an idempotency
    /// key) as the `Backfill-Reason` header.
    pub(super) fn with_reason(mut self, reason: Option<&str>) -> Self {
        self.reason = reason.map(backfill::admin::encode_reason);
        self
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Response, CtlError> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let mut req = match method {
            "POST" => self.http.post(url),
            "PATCH" => self.http.patch(url),
            "PUT" => self.http.put(url),
            _ => self.http.get(url),
        };
        if let Some(token) = &self.token {
            req = req.insert_header(("Authorization", format!("Bearer {token}")));
        }
        if let Some(key) = key {
            req = req.insert_header(("Idempotency-Key", key));
            if let Some(reason) = &self.reason {
                req = req.insert_header((backfill::admin::REASON_HEADER, reason.as_str()));
            }
        }
        let sent = match body {
            Some(body) => {
                let kind = if method == "PUT" {
                    "application/json"
                } else {
                    "application/merge-patch+json"
                };
                req.insert_header(("Content-Type", kind))
                    .send_body(body.to_string())
                    .await
            }
            None => req.send().await,
        };
        // Network errors carry no secrets but can be long; keep one line.
        let mut res = sent
            .map_err(|e| CtlError::Server(one_line(&format!("cannot reach {}: {e}", self.base))))?;
        let bytes = res
            .body()
            .limit(8 << 20)
            .await
            .map_err(|e| CtlError::Server(one_line(&format!("incomplete response: {e}"))))?;
        let status = res.status().as_u16();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Response { status, body })
    }

    /// Map non-2xx statuses (other than a 409 conflict body the caller
    /// renders) to errors; a 404 on a backfill's path names its ID, a 401
    /// says whether a token was given at all.
    fn check(&self, response: Response, path: &str) -> Result<Response, CtlError> {
        let message = || {
            serde_json::from_value::<ErrorBody>(response.body.clone())
                .map(|e| format!("{}: {}", e.error, e.message))
                .unwrap_or_else(|_| format!("HTTP {}", response.status))
        };
        match response.status {
            200..=299 => Ok(response),
            401 => Err(CtlError::Unauthorized(self.unauthorized_line())),
            403 => Err(CtlError::Unauthorized(message())),
            409 => Err(CtlError::Conflict(conflict_line(&response.body))),
            // A fleet's listener answers 404 for a database it does not
            // serve (under `/databases/NAME`): that, not the ID, is wrong.
            404 if response.body["error"] == "unknown_database" => {
                Err(CtlError::NotFound(message()))
            }
            404 => Err(CtlError::NotFound(not_found_line(
                path,
                message(),
                &response.body,
            ))),
            400..=499 => Err(CtlError::Usage(message())),
            _ => Err(CtlError::Server(message())),
        }
    }

    /// The line of a 401: whether this command sent a token, and where
    /// `ctl` takes one from; never the token itself.
    fn unauthorized_line(&self) -> String {
        if self.token.as_deref().is_some_and(|t| !t.is_empty()) {
            "unauthorized: the server refused the token given (it matches no principal); \
             check the token in BACKFILL_TOKEN or the file named by --token-file"
                .into()
        } else {
            "unauthorized: no token given; pass one in BACKFILL_TOKEN or in a file named by \
             --token-file"
                .into()
        }
    }

    /// [`Client::check`], and for a 404 without an error body on a
    /// backfill path (no such route at all) a look whether the URL is a
    /// fleet's listener, whose one-database routes live under
    /// `/databases/NAME`: a bare "HTTP 404" would not tell the operator
    /// that the URL, not the ID, is wrong.
    async fn checked(&self, response: Response, path: &str) -> Result<Response, CtlError> {
        let no_route = response.status == 404 && response.body.is_null();
        match self.check(response, path) {
            Err(CtlError::NotFound(line)) if no_route && path.starts_with("/admin/backfills") => {
                Err(self.fleet_hint().await.unwrap_or(CtlError::NotFound(line)))
            }
            other => other,
        }
    }

    /// The usage error for a fleet's listener, if `GET /admin/fleet`
    /// answers as one: its overview, or a JSON 401/403 of the route
    /// (a single database's listener answers that path 404).
    async fn fleet_hint(&self) -> Option<CtlError> {
        let probe = self.send("GET", "/admin/fleet", None, None).await.ok()?;
        let fleet = match probe.status {
            200 => probe.body.get("databases").is_some_and(Value::is_array),
            401 | 403 => probe.body.get("error").is_some_and(Value::is_string),
            _ => false,
        };
        let base = self.base.trim_end_matches('/');
        fleet.then(|| {
            CtlError::Usage(one_line(&format!(
                "{base} is a fleet listener, not one database's admin API: use `backfill ctl \
                 fleet ...` for the fleet, or --url {base}/databases/<name> for one database"
            )))
        })
    }

    pub(super) async fn get(&self, path: &str) -> Result<Value, CtlError> {
        let response = self.send("GET", path, None, None).await?;
        Ok(self.checked(response, path).await?.body)
    }

    /// POST a request that changes nothing (a dry run): sent once, without
    /// an idempotency key, since repeating it repeats no change.
    pub(super) async fn post(&self, path: &str) -> Result<Value, CtlError> {
        let response = self.send("POST", path, None, None).await?;
        Ok(self.checked(response, path).await?.body)
    }

    /// PUT `body` as JSON: a value set whole, which sending again sets
    /// again, so it needs no idempotency key.
    pub(super) async fn put_json(&self, path: &str, body: &Value) -> Result<Value, CtlError> {
        let response = self.send("PUT", path, None, Some(body)).await?;
        Ok(self.checked(response, path).await?.body)
    }

    /// POST an action with one idempotency key (see [`Client::idempotent`]).
    pub(super) async fn act(&self, path: &str) -> Result<Value, CtlError> {
        self.idempotent("POST", path, None).await
    }

    /// Send a request with one idempotency key, re-sending it on network
    /// and server errors: the server replays the first committed response,
    /// so a retry never duplicates the transition or the change (ADM-4).
    pub(super) async fn idempotent(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CtlError> {
        let key = uuid::Uuid::new_v4().to_string();
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match self.send(method, path, Some(&key), body).await {
                Ok(r) => self.checked(r, path).await,
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.retryable() && attempt < 5 => {
                    actix_rt::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other.map(|r| r.body),
            }
        }
    }
}

/// The line of a 404: the ID the path names, so a typo is visible in the
/// answer, with the server's nearest known IDs if it sent any, or the
/// server's message for any other path.
fn not_found_line(path: &str, message: String, body: &Value) -> String {
    match path
        .strip_prefix("/admin/backfills/")
        .and_then(|rest| rest.split(['/', '?']).next())
        .filter(|id| !id.is_empty())
    {
        Some(id) => {
            // Only what parses as a stable ID is printed, and only a few:
            // the server's text reaches the operator's terminal.
            let near: Vec<&str> = body["did_you_mean"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|s| backfill::repair::validate_id(s).is_ok())
                .take(3)
                .collect();
            if near.is_empty() {
                format!("not_found: no backfill {id}")
            } else {
                format!(
                    "not_found: no backfill {id}; did you mean {}?",
                    near.join(", ")
                )
            }
        }
        None => message,
    }
}

fn conflict_line(body: &Value) -> String {
    match serde_json::from_value::<ConflictBody>(body.clone()) {
        Ok(c) => format!(
            "conflict: {} (current state {}, generation {})",
            c.message, c.current.state, c.current.generation
        ),
        Err(_) => "conflict".into(),
    }
}

/// Every backfill, following `next_after` page by page, so that a long
/// list is never cut at one page (ADM-2). Items stay as the server sent
/// them, for `--json`.
pub(super) async fn list_all(client: &Client) -> Result<Vec<Value>, CtlError> {
    #[derive(serde::Deserialize)]
    struct Page {
        items: Vec<Value>,
        next_after: Option<String>,
    }
    let mut items = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            None => "/admin/backfills?limit=500".to_string(),
            Some(after) => format!("/admin/backfills?limit=500&after={after}"),
        };
        let page: Page = decode(client.get(&path).await?)?;
        items.extend(page.items);
        match page.next_after {
            // IDs are URL-safe; a cursor that is not an ID would inject,
            // one that repeats would loop. (Whether it moves forward is the
            // server's collation's to say, not byte order's.)
            Some(next)
                if backfill::repair::validate_id(&next).is_ok()
                    && after.as_deref() != Some(next.as_str()) =>
            {
                after = Some(next)
            }
            Some(_) => {
                return Err(CtlError::Server(
                    "the server's next_after does not continue the list".into(),
                ))
            }
            None => return Ok(items),
        }
    }
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, CtlError> {
    serde_json::from_value(value)
        .map_err(|_| CtlError::Server("the server's response has an unexpected shape".into()))
}
