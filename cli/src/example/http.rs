//! The example application's HTTP handlers: `GET /events` and
//! `POST /events`.
//!
//! They read and write correctly with repaired and unrepaired rows side by
//! side (EX-7): reads compute every derived value on read when its column
//! is still NULL, with the very SQL expression the repair uses; writes fill
//! the derived columns themselves, because rows created above a repair's
//! bound are the normal write path's job.

use super::repairs::{normalize_author, tag_count_of};
use actix_web::{web, HttpRequest, HttpResponse};
use backfill::__private::store::{describe, Pool};
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Default page size of `GET /events`.
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size of `GET /events`.
pub const MAX_LIMIT: u32 = 500;
/// Longest accepted author, in characters.
const MAX_AUTHOR_CHARS: usize = 200;
/// Longest accepted content, in characters.
const MAX_CONTENT_CHARS: usize = 10_000;
/// Most tags per event, and the longest tag in characters.
const MAX_TAGS: usize = 32;
const MAX_TAG_CHARS: usize = 64;

/// The columns every response renders, derived values computed on read when
/// the repair has not reached the row yet (EX-7).
macro_rules! event_columns {
    () => {
        concat!(
            "id, created_at, author, coalesce(author_norm, ",
            normalize_author!("author"),
            ") AS author_normalized, kind, content, \
             coalesce(content_len, char_length(content)) AS content_len, tags, \
             coalesce(tag_count, ",
            tag_count_of!("tags"),
            ") AS tag_count"
        )
    };
}

/// Shared state of the handlers.
#[derive(Clone)]
pub struct EventsState {
    /// The pool the handlers use (the host's pool).
    pub pool: Pool,
}

/// An event as the API renders it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, QueryableByName)]
pub struct Event {
    /// Primary key (bigserial).
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// Creation time.
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    /// The author as written.
    #[diesel(sql_type = Text)]
    pub author: String,
    /// `lower(btrim(author))`: the stored `author_norm`, or computed on read
    /// for rows the repair has not reached.
    #[diesel(sql_type = Text)]
    pub author_normalized: String,
    /// Application-defined event kind.
    #[diesel(sql_type = Integer)]
    pub kind: i32,
    /// The event text.
    #[diesel(sql_type = Text)]
    pub content: String,
    /// Length of `content` in characters (stored or computed on read).
    #[diesel(sql_type = Integer)]
    pub content_len: i32,
    /// Tags as stored: a JSON array of strings for every row written
    /// through the API; legacy rows may hold other JSON.
    #[diesel(sql_type = Jsonb)]
    pub tags: Value,
    /// Number of tags; `null` when a legacy row's `tags` is not an array.
    #[diesel(sql_type = Nullable<Integer>)]
    pub tag_count: Option<i32>,
}

/// A validated `POST /events` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// Non-blank, at most 200 characters.
    pub author: String,
    /// Non-negative.
    pub kind: i32,
    /// At most 10,000 characters.
    pub content: String,
    /// At most 32 tags of 1-64 characters (absent = none).
    pub tags: Vec<String>,
}

/// A 400 answer naming the offending field.
fn bad_request(field: &str, message: &str) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({
        "error": "invalid_request",
        "field": field,
        "message": message,
    }))
}

/// A redacted database failure (AUD-2: no raw messages).
fn database_error(error: &diesel::result::Error) -> HttpResponse {
    tracing::warn!(error = %describe(error), "events handler: database error");
    HttpResponse::InternalServerError().json(json!({
        "error": "database",
        "message": describe(error),
    }))
}

fn unavailable() -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(json!({
        "error": "unavailable",
        "message": "no database connection available",
    }))
}

/// Why a body was refused: the field and what is wrong with it.
type Invalid = (&'static str, String);

impl NewEvent {
    /// Validate a JSON body. The error is `(field, message)`.
    pub fn parse(body: &[u8]) -> Result<Self, (&'static str, String)> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|_| ("body", "the body must be a JSON object".to_string()))?;
        let Value::Object(map) = value else {
            return Err(("body", "the body must be a JSON object".into()));
        };
        // Field by field in this order, so the first invalid one is named.
        Ok(NewEvent {
            author: author(&map)?,
            kind: kind(&map)?,
            content: content(&map)?,
            tags: tags(&map)?,
        })
    }
}

/// The required `author`: a string, not blank, of bounded length.
fn author(map: &Map<String, Value>) -> Result<String, Invalid> {
    let author = match map.get("author") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(("author", "must be a string".into())),
        None => return Err(("author", "is required".into())),
    };
    if author.trim().is_empty() {
        return Err(("author", "must not be blank".into()));
    }
    if author.chars().count() > MAX_AUTHOR_CHARS {
        return Err((
            "author",
            format!("must be at most {MAX_AUTHOR_CHARS} characters"),
        ));
    }
    Ok(author)
}

/// The required `kind`: a non-negative 32-bit integer.
fn kind(map: &Map<String, Value>) -> Result<i32, Invalid> {
    match map.get("kind") {
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|k| i32::try_from(k).ok())
            .filter(|k| *k >= 0)
            .ok_or(("kind", "must be a non-negative 32-bit integer".to_string())),
        Some(_) => Err(("kind", "must be an integer".into())),
        None => Err(("kind", "is required".into())),
    }
}

/// The required `content`: a string of bounded length.
fn content(map: &Map<String, Value>) -> Result<String, Invalid> {
    let content = match map.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(("content", "must be a string".into())),
        None => return Err(("content", "is required".into())),
    };
    if content.chars().count() > MAX_CONTENT_CHARS {
        return Err((
            "content",
            format!("must be at most {MAX_CONTENT_CHARS} characters"),
        ));
    }
    Ok(content)
}

/// The optional `tags` (default: none). When present they must be an
/// array of short strings: new rows never get the non-array tags that
/// block the tag-count repair.
fn tags(map: &Map<String, Value>) -> Result<Vec<String>, Invalid> {
    let items = match map.get("tags") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(("tags", "must be an array of strings".into())),
    };
    if items.len() > MAX_TAGS {
        return Err(("tags", format!("must have at most {MAX_TAGS} tags")));
    }
    let mut tags = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(t) if !t.is_empty() && t.chars().count() <= MAX_TAG_CHARS => {
                tags.push(t.clone())
            }
            _ => {
                return Err((
                    "tags",
                    format!("every tag must be a string of 1-{MAX_TAG_CHARS} characters"),
                ))
            }
        }
    }
    Ok(tags)
}

/// `GET /events?limit=N`: the newest events first (by `(created_at, id)`),
/// default 50, at most 500.
async fn list_events(req: HttpRequest, state: web::Data<EventsState>) -> HttpResponse {
    let Ok(query) = web::Query::<HashMap<String, String>>::from_query(req.query_string()) else {
        return bad_request("query", "the query string is malformed");
    };
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(raw) => match raw.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return bad_request(
                    "limit",
                    &format!("must be an integer between 1 and {MAX_LIMIT}"),
                )
            }
        },
    };
    let Ok(mut conn) = state.pool.get().await else {
        return unavailable();
    };
    let result: Result<Vec<Event>, _> = diesel::sql_query(concat!(
        "SELECT ",
        event_columns!(),
        " FROM events ORDER BY created_at DESC, id DESC LIMIT $1"
    ))
    .bind::<BigInt, _>(i64::from(limit))
    .load(&mut conn)
    .await;
    match result {
        Ok(events) => HttpResponse::Ok().json(json!({ "events": events })),
        Err(e) => database_error(&e),
    }
}

/// `POST /events`: validate, insert with every derived column filled by the
/// write path itself (the repairs only cover rows up to their bound), and
/// answer 201 with the created event.
async fn create_event(body: web::Bytes, state: web::Data<EventsState>) -> HttpResponse {
    let event = match NewEvent::parse(&body) {
        Ok(event) => event,
        Err((field, message)) => return bad_request(field, &message),
    };
    let Ok(mut conn) = state.pool.get().await else {
        return unavailable();
    };
    let tags = Value::from(event.tags);
    let result: Result<Event, _> = diesel::sql_query(concat!(
        "INSERT INTO events (author, kind, content, tags, author_norm, content_len, tag_count) \
         VALUES ($1, $2, $3, $4, ",
        normalize_author!("$1"),
        ", char_length($3), ",
        tag_count_of!("$4"),
        ") RETURNING ",
        event_columns!()
    ))
    .bind::<Text, _>(&event.author)
    .bind::<Integer, _>(event.kind)
    .bind::<Text, _>(&event.content)
    .bind::<Jsonb, _>(&tags)
    .get_result(&mut conn)
    .await;
    match result {
        Ok(created) => HttpResponse::Created().json(created),
        Err(e) => database_error(&e),
    }
}

/// Mount `GET /events` and `POST /events` on the host's app. The handlers'
/// state is attached to the resource itself, so it cannot collide with the
/// host's own `app_data`.
pub fn configure(cfg: &mut web::ServiceConfig, pool: Pool) {
    let state = web::Data::new(EventsState { pool });
    cfg.service(
        web::resource("/events")
            .app_data(state)
            .route(web::get().to(list_events))
            .route(web::post().to(create_event)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emb01_post_body_validation_names_the_field() {
        let ok = NewEvent::parse(br#"{"author":" Ann ","kind":1,"content":"hi","tags":["a"]}"#);
        assert_eq!(
            ok.map(|e| e.tags),
            Ok(vec!["a".to_string()]),
            "a valid body parses"
        );
        for (body, field) in [
            (&b"not json"[..], "body"),
            (br#"[1]"#, "body"),
            (br#"{"kind":1,"content":"x"}"#, "author"),
            (br#"{"author":"  ","kind":1,"content":"x"}"#, "author"),
            (br#"{"author":"a","kind":"1","content":"x"}"#, "kind"),
            (br#"{"author":"a","kind":-1,"content":"x"}"#, "kind"),
            (br#"{"author":"a","kind":1}"#, "content"),
            (
                br#"{"author":"a","kind":1,"content":"x","tags":{"a":1}}"#,
                "tags",
            ),
            (
                br#"{"author":"a","kind":1,"content":"x","tags":[1]}"#,
                "tags",
            ),
        ] {
            assert_eq!(NewEvent::parse(body).map_err(|e| e.0), Err(field));
        }
    }
}
