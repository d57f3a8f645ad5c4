//! A fast seeder for the example's `events` table.
//!
//! Rows are generated server-side (`INSERT ... SELECT ... FROM
//! generate_series`), so no row crosses the wire: a million rows take
//! seconds. Each chunk is its own statement and commits on its own, so a
//! seed interrupted halfway leaves whole chunks behind, never a huge
//! half-done transaction.

use super::ExampleError;
use backfill::__private::store::Pool;
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;

/// Rows per `INSERT ... SELECT` statement.
pub const SEED_CHUNK: u64 = 100_000;

/// The generator. `$1..=$2` is this chunk's slice of the seed's ordinals
/// (1-based), `$3` the number of distinct `created_at` seconds (about eight
/// rows share each one, scattered across ids, so the `(created_at, id)`
/// order differs from id order and ties are common), `$4` the stride and
/// `$5` the count of bad-tag rows (every `$4`-th ordinal, up to `$5` rows).
///
/// Authors are mixed-case, some padded with spaces, some non-ASCII, so the
/// author-norm repair has real work; content carries multi-byte characters
/// so `char_length` differs from `octet_length`.
const SEED_SQL: &str = "\
INSERT INTO events (created_at, author, kind, content, tags)
SELECT timestamptz '2026-01-01 00:00:00+00' + ((g * 7919) % $3) * interval '1 second',
       repeat(' ', (g % 3)::int)
         || (ARRAY['Alice', 'BOB', 'carol', 'DaVe', 'Émile', 'ZOË'])[1 + (g % 6)::int]
         || (g % 101)::text
         || repeat(' ', (g % 2)::int),
       (g % 5)::int,
       'event ' || g::text || ' ' || repeat('ñ', (g % 40)::int),
       CASE
         WHEN g % $4 = 0 AND g / $4 <= $5 THEN
           CASE WHEN g % 2 = 0 THEN to_jsonb('tag-' || g::text)
                ELSE jsonb_build_object('tag', g) END
         WHEN g % 10 = 0 THEN '[]'::jsonb
         ELSE jsonb_build_array('t' || (g % 7)::text, 'k' || (g % 3)::text)
       END
FROM generate_series($1::bigint, $2::bigint) AS g";

/// Insert `rows` events, `bad_tag_rows` of them (capped at `rows`, spread
/// evenly) with `tags` that are not a JSON array, for the blocked demo of
/// `events.tag-count.v1`. Repair columns are left NULL / 0, as for rows that
/// existed before the repairs. Returns the number of rows inserted.
pub async fn seed(pool: &Pool, rows: u64, bad_tag_rows: u64) -> Result<u64, ExampleError> {
    if rows == 0 {
        return Ok(0);
    }
    let total = i64::try_from(rows)
        .map_err(|_| ExampleError::InvalidArgument("seed row count is too large".into()))?;
    let bad = i64::try_from(bad_tag_rows.min(rows)).unwrap_or(0);
    let stride = if bad == 0 { 1 } else { total / bad };
    let seconds = (total / 8).max(1);
    let chunk = i64::try_from(SEED_CHUNK).unwrap_or(100_000);

    let mut conn = pool.get().await?;
    let mut inserted = 0u64;
    let mut start = 1i64;
    while start <= total {
        let end = total.min(start.saturating_add(chunk - 1));
        let n = diesel::sql_query(SEED_SQL)
            .bind::<BigInt, _>(start)
            .bind::<BigInt, _>(end)
            .bind::<BigInt, _>(seconds)
            .bind::<BigInt, _>(stride)
            .bind::<BigInt, _>(bad)
            .execute(&mut conn)
            .await?;
        inserted += n as u64;
        start = end + 1;
    }
    Ok(inserted)
}
