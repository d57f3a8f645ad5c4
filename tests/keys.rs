//! Keys, definitions and diagnostics against a real PostgreSQL, through the
//! production key encoding, registry, store and engine.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - EX-2  every key type a repair may use (`i32`, `i64`, `String`,
//!   `Uuid`, `DateTime<Utc>`, `(DateTime<Utc>, i64)`, a 3-tuple) keeps
//!   its order bytewise in PostgreSQL, round-trips, and renders exactly as
//!   JSON, by itself and as the bound and checkpoints the engine stores and
//!   the admin view shows: `ex02_*`
//! - REG-4 a bound of one key type is refused by a definition of any other,
//!   for every pair; the registry answers for its definitions: `reg04_*`
//! - REG-2 registration stores the description a repair declares:
//!   `reg02_*`
//! - AUD-2 diagnostics are cut at exactly 512 bytes: `aud02_*`
//! - EX-6 a repair that does not declare `overlap_commits` runs its batches
//!   on one connection: `ex06_*`
//!
//! The test repair [`Keyed`] is generic over its key type: it hands out a
//! fixed list of keys, records every mutated key's encoding in PostgreSQL
//! and validates that each was mutated once. It overrides neither
//! `Repair::description` nor `Repair::overlap_commits`, so it also shows
//! their defaults.

mod support;

use backfill::admin::{Admin, AdminConfig, AuthConfig, BackfillView, RequestMeta};
use backfill::engine::FailureOutcome;
use backfill::key::{render_json, KeyError};
use backfill::repair::{bounded, Batches, SelectThenMutate, MAX_DIAGNOSTIC_BYTES};
use backfill::{
    async_trait, AsyncPgConnection, BatchOutcome, Engine, EngineError, Key, Registry, Repair,
    RepairError, SourceSet, State, Validation,
};
use chrono::{DateTime, TimeZone, Utc};
use diesel::sql_types::{Array, BigInt, Binary, Text};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use serde_json::Value;
use std::collections::BTreeSet;
use support::engine_config as config;
use support::repairs::{Counter, Hooks};
use support::{drive, test_db, TestDb};
use uuid::Uuid;

// ------------------------------------------------------------ test repair

/// A repair over a fixed, ascending list of keys of any key type. Its
/// bound is `upper`; `keys` are what the selection hands out (all below the
/// bound, so the last batch finds nothing and moves the checkpoint to the
/// bound). The mutation inserts each key's encoding into `seen`.
struct Keyed<K> {
    id: &'static str,
    keys: Vec<K>,
    upper: K,
}

/// The `seen` table [`Keyed`] writes to.
const SEEN_SQL: &str =
    "CREATE TABLE seen (id text NOT NULL, k bytea NOT NULL, PRIMARY KEY (id, k))";

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[async_trait]
impl<K: Key> Repair for Keyed<K> {
    type Key = K;

    fn id(&self) -> &'static str {
        self.id
    }

    fn batch_limit(&self) -> u32 {
        1
    }

    async fn capture_bound(
        &self,
        _conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<K>, RepairError> {
        Ok(SourceSet::Bounded {
            upper: self.upper.clone(),
            rows: Some(self.keys.len() as i64),
        })
    }

    fn batches(&self) -> Batches<'_, K> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        _bound: Option<&K>,
    ) -> Result<Validation, RepairError> {
        let seen: Count = diesel::sql_query("SELECT count(*) AS n FROM seen WHERE id = $1")
            .bind::<Text, _>(self.id)
            .get_result(conn)
            .await?;
        Ok(if seen.n == self.keys.len() as i64 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} of {} keys mutated", seen.n, self.keys.len()))
        })
    }
}

#[async_trait]
impl<K: Key> SelectThenMutate<K> for Keyed<K> {
    async fn select_keys(
        &self,
        _conn: &mut AsyncPgConnection,
        after: Option<&K>,
        bound: &K,
        limit: u32,
    ) -> Result<Vec<K>, RepairError> {
        Ok(self
            .keys
            .iter()
            .filter(|k| after.is_none_or(|a| *k > a) && *k <= bound)
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[K]) -> Result<(), RepairError> {
        let encoded: Vec<Vec<u8>> = keys.iter().map(Key::to_bytes).collect();
        diesel::sql_query("INSERT INTO seen (id, k) SELECT $1, unnest($2::bytea[])")
            .bind::<Text, _>(self.id)
            .bind::<Array<Binary>, _>(encoded)
            .execute(conn)
            .await?;
        Ok(())
    }
}

// ---------------------------------------------------------------- samples

/// JSON text as a client reads it.
fn j(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn ts(micros: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(micros).single().expect("in range")
}

/// 2026-01-01T00:00:00Z in microseconds.
const NEW_YEAR: i64 = 1_767_225_600_000_000;

fn uuid(text: &str) -> Uuid {
    Uuid::parse_str(text).expect("uuid")
}

const NIL: &str = "00000000-0000-0000-0000-000000000000";
const MAX: &str = "ffffffff-ffff-ffff-ffff-ffffffffffff";

/// Sorted samples of each key type with their exact JSON rendering:
/// edge values (MIN/MAX, sign change, byte carries, empty string, NUL,
/// prefixes, multibyte, nil/max uuid, chrono's range) and ties on the
/// leading components of tuples.
fn integers() -> Vec<(i32, Value)> {
    [
        (i32::MIN, "-2147483648"),
        (i32::MIN + 1, "-2147483647"),
        (-256, "-256"),
        (-255, "-255"),
        (-1, "-1"),
        (0, "0"),
        (1, "1"),
        (255, "255"),
        (256, "256"),
        (i32::MAX - 1, "2147483646"),
        (i32::MAX, "2147483647"),
    ]
    .into_iter()
    .map(|(k, t)| (k, j(t)))
    .collect()
}

fn bigints() -> Vec<(i64, Value)> {
    [
        (i64::MIN, "-9223372036854775808"),
        (i64::MIN + 1, "-9223372036854775807"),
        (-4_294_967_296, "-4294967296"),
        (-1, "-1"),
        (0, "0"),
        (1, "1"),
        (255, "255"),
        (256, "256"),
        (4_294_967_296, "4294967296"),
        (i64::MAX - 1, "9223372036854775806"),
        (i64::MAX, "9223372036854775807"),
    ]
    .into_iter()
    .map(|(k, t)| (k, j(t)))
    .collect()
}

fn texts() -> Vec<(String, Value)> {
    [
        ("", r#""""#),
        ("\0", r#""\u0000""#),
        ("\0\0", r#""\u0000\u0000""#),
        ("\0\x01", r#""\u0000\u0001""#),
        ("\x01", r#""\u0001""#),
        (" ", r#"" ""#),
        ("A", r#""A""#),
        ("a", r#""a""#),
        ("a\0", r#""a\u0000""#),
        ("a\0\0", r#""a\u0000\u0000""#),
        ("a\0b", r#""a\u0000b""#),
        ("a\x01", r#""a\u0001""#),
        ("aa", r#""aa""#),
        ("ab", r#""ab""#),
        ("b", r#""b""#),
        ("z\x7f", r#""z\u007f""#),
        ("\u{e9}", r#""é""#),
        ("\u{e9}a", r#""éa""#),
        ("\u{ffff}", "\"\u{ffff}\""),
        ("\u{10ffff}", "\"\u{10ffff}\""),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), j(t)))
    .collect()
}

fn uuids() -> Vec<(Uuid, Value)> {
    [
        NIL,
        "00000000-0000-0000-0000-000000000001",
        "00000000-0000-0000-0000-000000000100",
        "67e55044-10b1-426f-9247-bb680e5fe0c8",
        "7fffffff-ffff-ffff-ffff-ffffffffffff",
        "80000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-fffffffffffe",
        MAX,
    ]
    .into_iter()
    .map(|t| (uuid(t), Value::String(t.into())))
    .collect()
}

fn timestamps() -> Vec<(DateTime<Utc>, Value)> {
    let max = DateTime::<Utc>::MAX_UTC.timestamp_micros();
    [
        (
            DateTime::<Utc>::MIN_UTC.timestamp_micros(),
            r#""-262143-01-01T00:00:00.000000Z""#,
        ),
        (-1, r#""1969-12-31T23:59:59.999999Z""#),
        (0, r#""1970-01-01T00:00:00.000000Z""#),
        (1, r#""1970-01-01T00:00:00.000001Z""#),
        (NEW_YEAR, r#""2026-01-01T00:00:00.000000Z""#),
        (NEW_YEAR + 1, r#""2026-01-01T00:00:00.000001Z""#),
        (max, r#""+262142-12-31T23:59:59.999999Z""#),
    ]
    .into_iter()
    .map(|(m, t)| (ts(m), j(t)))
    .collect()
}

fn pairs() -> Vec<((DateTime<Utc>, i64), Value)> {
    [
        (
            -1,
            i64::MIN,
            r#"["1969-12-31T23:59:59.999999Z", -9223372036854775808]"#,
        ),
        (
            -1,
            i64::MAX,
            r#"["1969-12-31T23:59:59.999999Z", 9223372036854775807]"#,
        ),
        (
            NEW_YEAR,
            i64::MIN,
            r#"["2026-01-01T00:00:00.000000Z", -9223372036854775808]"#,
        ),
        (NEW_YEAR, -1, r#"["2026-01-01T00:00:00.000000Z", -1]"#),
        (NEW_YEAR, 0, r#"["2026-01-01T00:00:00.000000Z", 0]"#),
        (NEW_YEAR, 1, r#"["2026-01-01T00:00:00.000000Z", 1]"#),
        (
            NEW_YEAR,
            i64::MAX,
            r#"["2026-01-01T00:00:00.000000Z", 9223372036854775807]"#,
        ),
        (
            NEW_YEAR + 1,
            i64::MIN,
            r#"["2026-01-01T00:00:00.000001Z", -9223372036854775808]"#,
        ),
        (NEW_YEAR + 1, 7, r#"["2026-01-01T00:00:00.000001Z", 7]"#),
    ]
    .into_iter()
    .map(|(m, i, t)| ((ts(m), i), j(t)))
    .collect()
}

type Triple = (String, i32, Uuid);

fn triples() -> Vec<(Triple, Value)> {
    let u = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    [
        (
            "",
            i32::MIN,
            NIL,
            r#"["", -2147483648, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "",
            i32::MIN,
            MAX,
            r#"["", -2147483648, "ffffffff-ffff-ffff-ffff-ffffffffffff"]"#,
        ),
        (
            "",
            0,
            NIL,
            r#"["", 0, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "",
            i32::MAX,
            u,
            r#"["", 2147483647, "67e55044-10b1-426f-9247-bb680e5fe0c8"]"#,
        ),
        (
            "\0",
            i32::MIN,
            NIL,
            r#"["\u0000", -2147483648, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "a",
            -1,
            NIL,
            r#"["a", -1, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "a",
            -1,
            u,
            r#"["a", -1, "67e55044-10b1-426f-9247-bb680e5fe0c8"]"#,
        ),
        (
            "a",
            7,
            NIL,
            r#"["a", 7, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "a\0",
            i32::MIN,
            NIL,
            r#"["a\u0000", -2147483648, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "ab",
            i32::MIN,
            NIL,
            r#"["ab", -2147483648, "00000000-0000-0000-0000-000000000000"]"#,
        ),
        (
            "b",
            i32::MAX,
            MAX,
            r#"["b", 2147483647, "ffffffff-ffff-ffff-ffff-ffffffffffff"]"#,
        ),
    ]
    .into_iter()
    .map(|(s, i, id, t)| ((s.to_string(), i, uuid(id)), j(t)))
    .collect()
}

/// The key types under test, for the checks that need every pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    BigInt,
    Text,
    Uuid,
    Timestamp,
    Pair,
    Triple,
}

impl Kind {
    const ALL: [Kind; 7] = [
        Kind::Integer,
        Kind::BigInt,
        Kind::Text,
        Kind::Uuid,
        Kind::Timestamp,
        Kind::Pair,
        Kind::Triple,
    ];

    /// A stable ID per key type.
    fn id(self) -> &'static str {
        match self {
            Kind::Integer => "keys.integer",
            Kind::BigInt => "keys.bigint",
            Kind::Text => "keys.text",
            Kind::Uuid => "keys.uuid",
            Kind::Timestamp => "keys.timestamptz",
            Kind::Pair => "keys.pair",
            Kind::Triple => "keys.triple",
        }
    }

    /// The key type's name as the registry, the row and the admin view
    /// show it.
    fn type_name(self) -> &'static str {
        match self {
            Kind::Integer => "integer",
            Kind::BigInt => "bigint",
            Kind::Text => "text",
            Kind::Uuid => "uuid",
            Kind::Timestamp => "timestamptz",
            Kind::Pair => "(timestamptz, bigint)",
            Kind::Triple => "(text, integer, uuid)",
        }
    }

    /// A registry whose only definition is a [`Keyed`] repair of this key
    /// type under `id`.
    fn registry(self, id: &'static str) -> Registry {
        fn with<K: Key>(id: &'static str, samples: Vec<(K, Value)>) -> Registry {
            Registry::new()
                .with(keyed(id, &samples))
                .expect("valid definition")
        }
        match self {
            Kind::Integer => with(id, integers()),
            Kind::BigInt => with(id, bigints()),
            Kind::Text => with(id, texts()),
            Kind::Uuid => with(id, uuids()),
            Kind::Timestamp => with(id, timestamps()),
            Kind::Pair => with(id, pairs()),
            Kind::Triple => with(id, triples()),
        }
    }
}

/// PostgreSQL's `jsonb` cannot hold U+0000 (and its `text` cannot either,
/// so no key read from a text column has one): the engine stores a key's
/// JSON rendering next to its encoding, so a key with NUL is only ever an
/// encoding here.
fn storable(json: &Value) -> bool {
    !json.to_string().contains("\\u0000")
}

/// A [`Keyed`] repair over the storable samples: every one but the last is
/// selected, the last is the bound.
fn keyed<K: Key>(id: &'static str, samples: &[(K, Value)]) -> Keyed<K> {
    let mut keys: Vec<K> = samples
        .iter()
        .filter(|(_, json)| storable(json))
        .map(|(k, _)| k.clone())
        .collect();
    let upper = keys.pop().expect("samples");
    Keyed { id, keys, upper }
}

// ------------------------------------------------------------------ EX-2

#[derive(QueryableByName)]
struct Mismatches {
    #[diesel(sql_type = Array<Text>)]
    bad: Vec<String>,
}

/// Every check of one key type that needs no engine: strict order in Rust,
/// the same order of the encodings in PostgreSQL for every pair, exact
/// round trips (alone and followed by other bytes) and the exact JSON.
async fn keeps_order_and_round_trips<K: Key>(
    conn: &mut AsyncPgConnection,
    kind: Kind,
    samples: Vec<(K, Value)>,
) {
    assert_eq!(K::type_name(), kind.type_name());
    for pair in samples.windows(2) {
        assert!(pair[0].0 < pair[1].0, "samples sorted: {pair:?}");
    }
    let encoded: Vec<Vec<u8>> = samples.iter().map(|(k, _)| k.to_bytes()).collect();
    // Positions i, j (the Rust order) whose encodings PostgreSQL compares
    // otherwise than i and j.
    let mismatches: Mismatches = diesel::sql_query(
        "SELECT coalesce(array_agg(a.i || ' vs ' || b.i ORDER BY a.i, b.i) FILTER (WHERE \
             (a.k < b.k) IS DISTINCT FROM (a.i < b.i) \
             OR (a.k = b.k) IS DISTINCT FROM (a.i = b.i)), '{}') AS bad \
         FROM unnest($1::bytea[]) WITH ORDINALITY AS a(k, i), \
              unnest($1::bytea[]) WITH ORDINALITY AS b(k, i)",
    )
    .bind::<Array<Binary>, _>(&encoded)
    .get_result(conn)
    .await
    .expect("compare in PostgreSQL");
    assert!(
        mismatches.bad.is_empty(),
        "{kind:?}: PostgreSQL orders these encodings (1-based sample positions) \
         otherwise than the keys: {:?}",
        mismatches.bad
    );
    for ((key, json), bytes) in samples.iter().zip(&encoded) {
        assert_eq!(K::from_bytes(bytes).as_ref(), Ok(key), "{kind:?}");
        let followed = [bytes.as_slice(), &[0x12, 0xff]].concat();
        let mut input = followed.as_slice();
        assert_eq!(K::decode(&mut input).as_ref(), Ok(key), "{kind:?}");
        assert_eq!(
            input,
            &[0x12, 0xff],
            "{kind:?}: decode reads exactly its key"
        );
        assert_eq!(&key.to_json(), json, "{kind:?}: {key:?}");
        assert_eq!(render_json(bytes).as_ref(), Some(json), "{kind:?}: {key:?}");
    }
}

/// EX-2: for every key type a repair may use, sorted samples with edge
/// values keep their order as `bytea` in PostgreSQL (every pair compared
/// by the server), decode to themselves, and render as exactly the JSON a
/// client expects, from the key and from its bytes alone. Guards: each
/// key type's `encode`, `decode`, `type_name` and `to_json`, and every arm
/// of `render_json`.
#[tokio::test]
async fn ex02_every_key_type_keeps_its_order_and_round_trips() {
    let db = test_db().await;
    let mut conn = db.connect().await;
    let c = &mut conn;
    keeps_order_and_round_trips(c, Kind::Integer, integers()).await;
    keeps_order_and_round_trips(c, Kind::BigInt, bigints()).await;
    keeps_order_and_round_trips(c, Kind::Text, texts()).await;
    keeps_order_and_round_trips(c, Kind::Uuid, uuids()).await;
    keeps_order_and_round_trips(c, Kind::Timestamp, timestamps()).await;
    keeps_order_and_round_trips(c, Kind::Pair, pairs()).await;
    keeps_order_and_round_trips(c, Kind::Triple, triples()).await;
}

/// EX-2, ADM-3: `render_json` shows what it cannot read as unknown, never
/// as a guess: no bytes, an unknown tag, a truncated key, a key followed by
/// garbage. Guard: the `0` arm of `render_json` (no component is not an
/// empty array) and its refusal of unknown tags.
#[test]
fn ex02_render_json_never_guesses() {
    assert_eq!(render_json(&[]), None);
    assert_eq!(render_json(&[0x99]), None);
    let five = 5i64.to_bytes();
    assert_eq!(render_json(&five[..five.len() - 1]), None);
    assert_eq!(render_json(&[five.as_slice(), &[0x99]].concat()), None);
    let text = "ab".to_string().to_bytes();
    assert_eq!(render_json(&text[..text.len() - 1]), None);
}

/// The admin view of `id`, as `GET /admin/backfills/{id}` answers.
async fn view(admin: &Admin, id: &str) -> BackfillView {
    let meta = RequestMeta {
        bearer: None,
        idempotency_key: None,
        request_id: None,
        ..Default::default()
    };
    admin.detail(&meta, id).await.expect("detail")
}

fn admin(engine: &Engine) -> Admin {
    Admin::new(
        engine.clone(),
        AdminConfig {
            auth: AuthConfig::TrustedNetwork,
            auto_backfills: false,
            required: BTreeSet::new(),
        },
    )
}

/// Connections of the engine's pool in use (checked out, not idle).
fn busy(engine: &Engine) -> u32 {
    let state = engine.pool().state();
    state.connections - state.idle_connections
}

#[derive(QueryableByName)]
struct Seen {
    #[diesel(sql_type = Binary)]
    k: Vec<u8>,
}

/// One key type through the engine: start, one key per batch, a last
/// empty batch to the bound, validation to `completed`. After every step
/// the stored bound and checkpoint decode to the expected key and their
/// JSON (stored, on the claim and in the admin view) is exact.
async fn through_the_engine<K: Key>(db: &TestDb, kind: Kind, samples: Vec<(K, Value)>) {
    let id = kind.id();
    let samples: Vec<(K, Value)> = samples.into_iter().filter(|(_, j)| storable(j)).collect();
    let (keys, last) = samples.split_at(samples.len() - 1);
    assert!(
        keys.len() >= 2,
        "{kind:?}: at least two batches before the bound"
    );
    let (upper, upper_json) = &last[0];
    let engine = Engine::new(db.pool.clone(), kind.registry(id), config()).expect("engine");
    let admin = admin(&engine);
    assert_eq!(
        engine.registry().key_type(id).as_deref(),
        Some(kind.type_name())
    );
    engine.register().await.expect("register");
    assert!(matches!(
        engine.start(id).await.expect("start"),
        backfill::Started::Started(_)
    ));

    let row = engine.get(id).await.expect("row");
    assert_eq!(row.key_type.as_deref(), Some(kind.type_name()), "{kind:?}");
    let bound = row.bound.expect("bound");
    assert_eq!(K::from_bytes(&bound).as_ref(), Ok(upper), "{kind:?}");
    assert_eq!(row.bound_json.as_ref(), Some(upper_json), "{kind:?}");
    let shown = view(&admin, id).await;
    assert_eq!(shown.key_type.as_deref(), Some(kind.type_name()));
    assert_eq!(shown.bound.as_ref(), Some(upper_json), "{kind:?}");
    assert_eq!(shown.checkpoint, None);

    let mut claim = engine
        .claim_next("w", &[])
        .await
        .expect("claim")
        .expect("claimable");
    for (i, (key, json)) in keys.iter().enumerate() {
        assert_eq!(
            engine.run_batch(&mut claim).await.expect("batch"),
            BatchOutcome::Committed {
                keys: 1,
                reached_bound: false
            },
            "{kind:?}: batch {i}"
        );
        if i == 0 {
            // EX-6: the repair does not declare `overlap_commits`, so the
            // claim holds only its own connection (its next batch's open
            // transaction), never a second one for overlapped commits.
            assert_eq!(busy(&engine), 1, "{kind:?}: connections the claim holds");
        }
        let row = engine.get(id).await.expect("row");
        let checkpoint = row.checkpoint.expect("checkpoint");
        assert_eq!(K::from_bytes(&checkpoint).as_ref(), Ok(key), "{kind:?}");
        assert_eq!(
            row.checkpoint_json.as_ref(),
            Some(json),
            "{kind:?}: {key:?}"
        );
        assert_eq!(
            claim.checkpoint_json().as_ref(),
            Some(json),
            "{kind:?}: {key:?}"
        );
        assert_eq!(view(&admin, id).await.checkpoint.as_ref(), Some(json));
    }
    // Nothing left below the bound: the checkpoint moves to the bound,
    // rendered from its bytes alone.
    assert_eq!(
        engine.run_batch(&mut claim).await.expect("last batch"),
        BatchOutcome::Committed {
            keys: 0,
            reached_bound: true
        },
        "{kind:?}"
    );
    let row = engine.get(id).await.expect("row");
    assert_eq!(row.state, State::Validating);
    assert_eq!(row.checkpoint.as_deref(), Some(bound.as_slice()));
    assert_eq!(row.checkpoint_json.as_ref(), Some(upper_json), "{kind:?}");
    assert_eq!(view(&admin, id).await.checkpoint.as_ref(), Some(upper_json));

    drive(&engine, "w").await;
    let row = engine.get(id).await.expect("row");
    assert_eq!(
        row.state,
        State::Completed,
        "{kind:?}: {:?}",
        row.validation_detail
    );
    // What the mutations wrote, in PostgreSQL's bytea order, is the keys in
    // their own order.
    let mut conn = db.pool.get().await.expect("pool");
    let seen: Vec<Seen> = diesel::sql_query("SELECT k FROM seen WHERE id = $1 ORDER BY k")
        .bind::<Text, _>(id)
        .load(&mut conn)
        .await
        .expect("seen");
    let seen: Vec<K> = seen
        .iter()
        .map(|s| K::from_bytes(&s.k).expect("decodes"))
        .collect();
    let expected: Vec<K> = keys.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(seen, expected, "{kind:?}");
}

/// EX-2, ADM-2: every key type runs through the production engine: the
/// bound captured at start, each checkpoint committed by the fence (which
/// compares the encodings in PostgreSQL: strictly forward, at most the
/// bound), and the final move to the bound; the stored encodings decode to
/// the keys, and the JSON stored, on the claim and in the admin view is
/// exact. Guards: each key type's `encode`, `decode`, `type_name` and
/// `to_json`, `render_json` (the checkpoint at the bound and the claim's
/// rendering), and `Repair::overlap_commits` defaulting to `false`.
#[tokio::test]
async fn ex02_every_key_type_round_trips_through_the_engine() {
    let db = test_db().await;
    db.exec(SEEN_SQL).await;
    through_the_engine(&db, Kind::Integer, integers()).await;
    through_the_engine(&db, Kind::BigInt, bigints()).await;
    through_the_engine(&db, Kind::Text, texts()).await;
    through_the_engine(&db, Kind::Uuid, uuids()).await;
    through_the_engine(&db, Kind::Timestamp, timestamps()).await;
    through_the_engine(&db, Kind::Pair, pairs()).await;
    through_the_engine(&db, Kind::Triple, triples()).await;
}

// ----------------------------------------------------------------- REG-4

/// REG-4: for every pair of key types, a row whose bound and checkpoint
/// were captured with one is refused by a process whose definition of the
/// same ID declares the other: the claim fails closed with a typed key
/// mismatch and changes nothing (no owner, same generation). The same
/// definition type claims the row (the refusal is by type). Guards: the
/// type tags of the encoding and `check_key` in `claim_next`.
#[tokio::test]
async fn reg04_bound_of_another_key_type_is_refused_for_every_pair() {
    let db = test_db().await;
    db.exec(SEEN_SQL).await;
    for stored in Kind::ALL {
        let id = stored.id();
        let owner = Engine::new(db.pool.clone(), stored.registry(id), config()).expect("engine");
        owner.register().await.expect("register");
        owner.start(id).await.expect("start");
        let mut claim = owner
            .claim_next("w", &[])
            .await
            .expect("claim")
            .expect("row");
        owner.run_batch(&mut claim).await.expect("batch");
        assert!(owner.release(&claim).await.expect("release"));
        assert!(owner.get(id).await.expect("row").checkpoint.is_some());

        for local in Kind::ALL {
            let before = owner.get(id).await.expect("row");
            let other = Engine::new(db.pool.clone(), local.registry(id), config()).expect("engine");
            let outcome = other.claim_next("other", &[]).await;
            if local == stored {
                let claim = outcome.expect("claim").expect("its own type claims");
                assert!(other.release(&claim).await.expect("release"));
                continue;
            }
            match outcome {
                Err(EngineError::KeyMismatch {
                    id: ref got,
                    ref error,
                }) => {
                    assert_eq!(got, id);
                    assert!(
                        matches!(error, KeyError::TypeMismatch { .. } | KeyError::Malformed),
                        "{error:?}"
                    );
                }
                other => panic!("{stored:?} read as {local:?}: {other:?}"),
            }
            let after = owner.get(id).await.expect("row");
            assert_eq!(after.owner, None, "{stored:?} read as {local:?}");
            assert_eq!(after.generation, before.generation, "nothing changed");
            assert_eq!(after.checkpoint, before.checkpoint);
        }
    }
}

/// REG-4: a process knows which definitions it has: the registry answers
/// `contains`, `len`, `is_empty` and `key_type` for what was registered,
/// and nothing for what was not. Guards: those four methods.
#[test]
fn reg04_registry_answers_for_its_definitions() {
    let empty = Registry::new();
    assert!(empty.is_empty());
    assert_eq!(empty.len(), 0);
    assert!(!empty.contains(Kind::Integer.id()));
    assert_eq!(empty.key_type(Kind::Integer.id()), None);

    let one = Kind::Uuid.registry(Kind::Uuid.id());
    assert!(!one.is_empty());
    assert_eq!(one.len(), 1);

    let mut two = Kind::Triple.registry(Kind::Triple.id());
    two.register(keyed(Kind::Text.id(), &texts()))
        .expect("register");
    assert!(!two.is_empty());
    assert_eq!(two.len(), 2);
    for kind in Kind::ALL {
        let known = matches!(kind, Kind::Triple | Kind::Text);
        assert_eq!(two.contains(kind.id()), known, "{kind:?}");
        assert_eq!(
            two.key_type(kind.id()).as_deref(),
            known.then(|| kind.type_name()),
            "{kind:?}"
        );
    }
    assert!(!two.contains(""));
    assert_eq!(two.ids(), vec![Kind::Text.id(), Kind::Triple.id()]);
}

// ----------------------------------------------------------------- REG-2

/// REG-2: registration stores the description a repair declares in the
/// row's `description` column (the admin view shows it), and none for a
/// repair that declares none; a description over 512 bytes is cut like any
/// diagnostic. Guards: `DynRepair::description` passed to
/// `backfill_register`, and `Repair::description` defaulting to "".
#[tokio::test]
async fn reg02_registration_stores_the_declared_description() {
    let db = test_db().await;
    let long: &'static str = "d".repeat(MAX_DIAGNOSTIC_BYTES + 1).leak();
    let registry = Registry::new()
        .with(Counter::new("items.counter", 10, Hooks::new()))
        .expect("definition")
        .with(keyed(Kind::BigInt.id(), &bigints()))
        .expect("definition")
        .with(Described(keyed(Kind::Text.id(), &texts()), long))
        .expect("definition");
    let engine = Engine::new(db.pool.clone(), registry, config()).expect("engine");
    engine.register().await.expect("register");
    let admin = admin(&engine);
    let declared = "test: n = n + 1 on every item";
    let row = engine.get("items.counter").await.expect("row");
    assert_eq!(row.description.as_deref(), Some(declared));
    assert_eq!(
        view(&admin, "items.counter").await.description.as_deref(),
        Some(declared)
    );
    let row = engine.get(Kind::BigInt.id()).await.expect("row");
    assert_eq!(row.description, None, "a repair that declares none");
    let row = engine.get(Kind::Text.id()).await.expect("row");
    let cut = format!("{}...", &long[..MAX_DIAGNOSTIC_BYTES - 3]);
    assert_eq!(row.description.as_deref(), Some(cut.as_str()));
}

/// A repair with a description of the test's choosing.
struct Described<R>(R, &'static str);

#[async_trait]
impl<R: Repair> Repair for Described<R> {
    type Key = R::Key;
    fn id(&self) -> &str {
        self.0.id()
    }
    fn description(&self) -> &str {
        self.1
    }
    fn batch_limit(&self) -> u32 {
        self.0.batch_limit()
    }
    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<R::Key>, RepairError> {
        self.0.capture_bound(conn).await
    }
    fn batches(&self) -> Batches<'_, R::Key> {
        self.0.batches()
    }
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&R::Key>,
    ) -> Result<Validation, RepairError> {
        self.0.validate(conn, bound).await
    }
}

// ----------------------------------------------------------------- AUD-2

/// Messages at the diagnostic limit and their expected stored form:
/// exactly 512 bytes stay whole; one byte more is cut to 509 bytes and
/// "...", 512 in all; a multibyte character across the cut is dropped
/// whole (2-byte and 4-byte characters).
fn diagnostics() -> Vec<(String, String)> {
    let max = MAX_DIAGNOSTIC_BYTES;
    assert_eq!(max, 512);
    let x = |n: usize| "x".repeat(n);
    vec![
        (x(max - 1), x(max - 1)),
        (x(max), x(max)),
        (x(max + 1), format!("{}...", x(max - 3))),
        (x(2 * max), format!("{}...", x(max - 3))),
        (format!("{}é", x(max - 2)), format!("{}é", x(max - 2))),
        (format!("{}é", x(max - 1)), format!("{}...", x(max - 3))),
        (format!("{}éyzw", x(max - 4)), format!("{}...", x(max - 4))),
        (format!("{}😀y", x(max - 5)), format!("{}😀y", x(max - 5))),
        (format!("{}😀yz", x(max - 5)), format!("{}...", x(max - 5))),
        ("é".repeat(max), format!("{}...", "é".repeat((max - 3) / 2))),
    ]
}

/// AUD-2: a diagnostic is cut exactly at its limit: `bounded` keeps a
/// message of 512 bytes, cuts one of 513 to 512 ending in "...", and never
/// splits a character; the same messages returned by a repair are stored
/// so in the row (the column's domain would reject anything longer).
/// Guards: `>` (not `>=`) and `MAX_DIAGNOSTIC_BYTES - 3` in `bounded`.
#[tokio::test]
async fn aud02_diagnostic_is_cut_exactly_at_its_limit() {
    for (message, expected) in diagnostics() {
        let got = bounded(message.as_str());
        assert_eq!(got, expected, "message of {} bytes", message.len());
        assert!(got.len() <= MAX_DIAGNOSTIC_BYTES);
    }
    assert_eq!(bounded(""), "");

    let db = test_db().await;
    db.exec(SEEN_SQL).await;
    let id = Kind::BigInt.id();
    let engine = Engine::new(db.pool.clone(), Kind::BigInt.registry(id), config()).expect("engine");
    engine.register().await.expect("register");
    engine.start(id).await.expect("start");
    for (message, expected) in diagnostics() {
        let claim = engine
            .claim_next("w", &[])
            .await
            .expect("claim")
            .expect("row");
        let outcome = engine
            .record_failure(&claim, &RepairError::Fatal(message.clone()))
            .await
            .expect("record");
        assert!(matches!(
            outcome,
            FailureOutcome::Recorded {
                state: State::Failed,
                ..
            }
        ));
        let row = engine.get(id).await.expect("row");
        assert_eq!(row.last_error_kind.as_deref(), Some("fatal"));
        assert_eq!(row.last_error.as_deref(), Some(expected.as_str()));
        engine.retry(id).await.expect("retry");
    }
}
