//! The `did_you_mean` of a 404 for an unknown backfill ID: the few known
//! IDs (registered here or stored) nearest the one asked for, so that a
//! typo is answered with its likely intent rather than a bare "no".
//!
//! IDs are no secret (the list shows them to any reader), but they are
//! only told to a caller who may read the list; anyone else has already
//! been answered 401 or 403 before an ID was looked up.

use super::{Admin, AdminError, Capability, RequestMeta};
use crate::store;

/// At most this many IDs are suggested.
pub(crate) const MAX_SUGGESTIONS: usize = 3;
/// The most edit operations a suggestion may be away: a typo, not
/// another ID that happens to share a prefix.
const MAX_DISTANCE: usize = 3;
/// Stored IDs compared at most, whatever the table holds: one 404 reads
/// a bounded index range, never the whole table.
const MAX_COMPARED: i64 = 5_000;
/// The longest ID (the stable-ID grammar's bound); a longer path segment
/// was refused as malformed before and gets no suggestions.
const MAX_ID_LEN: usize = 128;

impl Admin {
    /// `error` as it is, unless it is the 404 of an unknown backfill: then
    /// with the IDs nearest `id`, for a caller who may read.
    pub(crate) async fn with_suggestions(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        error: AdminError,
    ) -> AdminError {
        match error {
            AdminError::NotFound { did_you_mean } if did_you_mean.is_empty() => {
                AdminError::NotFound {
                    did_you_mean: self.did_you_mean(meta, id).await,
                }
            }
            other => other,
        }
    }

    /// The IDs nearest `id`, nearest first, for a caller who may read
    /// (empty for anyone else). A failure to read the stored IDs leaves
    /// only the registered ones: a hint must not turn a 404 into a 503.
    async fn did_you_mean(&self, meta: &RequestMeta<'_>, id: &str) -> Vec<String> {
        let readable = self
            .config
            .auth
            .authenticate(meta.bearer)
            .is_some_and(|a| a.can(Capability::Read));
        if !readable || id.is_empty() || id.len() > MAX_ID_LEN {
            return Vec::new();
        }
        let max = max_distance(id);
        let lengths = {
            // Lengths differing by more than `max` are never within it.
            let len = id.len() as i32;
            (len - max as i32).max(1)..=(len + max as i32)
        };
        let mut known = self.engine.registry().ids();
        match self.conn().await {
            Ok(mut conn) => {
                match store::backfill_ids_by_length(&mut conn, lengths, MAX_COMPARED).await {
                    Ok(stored) => known.extend(stored),
                    Err(e) => tracing::debug!(error = %e, "no stored IDs for a 404's suggestions"),
                }
            }
            Err(e) => tracing::debug!(error = %e, "no stored IDs for a 404's suggestions"),
        }
        nearest(id, known, max)
    }
}

/// How far a suggestion for `id` may be: [`MAX_DISTANCE`], and at most a
/// third of the ID, so that a short ID is not "near" every other short one.
fn max_distance(id: &str) -> usize {
    (id.len() / 3).clamp(1, MAX_DISTANCE)
}

/// Of `known`, the [`MAX_SUGGESTIONS`] IDs other than `id` within `max`
/// edits of it, nearest first and by ID among equals.
fn nearest(id: &str, known: Vec<String>, max: usize) -> Vec<String> {
    let mut near: Vec<(usize, String)> = known
        .into_iter()
        .filter(|k| k != id)
        .filter_map(|k| {
            let d = distance(id.as_bytes(), k.as_bytes());
            (d <= max).then_some((d, k))
        })
        .collect();
    near.sort();
    near.dedup();
    near.into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, k)| k)
        .collect()
}

/// The Levenshtein distance of two byte strings (stable IDs are ASCII),
/// in one row of O(|b|) memory.
fn distance(a: &[u8], b: &[u8]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adm01_distance_counts_edits() {
        assert_eq!(distance(b"items.counter", b"items.counter"), 0);
        assert_eq!(distance(b"items.countr", b"items.counter"), 1);
        assert_eq!(distance(b"items.cuonter", b"items.counter"), 2);
        assert_eq!(distance(b"", b"abc"), 3);
    }

    #[test]
    fn adm01_nearest_is_bounded_ordered_and_excludes_far_ids() {
        let known = ["a.v1", "a.v2", "a.v3", "a.v4", "zzzzzz.v9", "a.v1"]
            .map(String::from)
            .to_vec();
        let near = nearest("a.v5", known, max_distance("a.v5"));
        assert_eq!(near, ["a.v1", "a.v2", "a.v3"]);
        assert!(nearest("a.v1", vec!["a.v1".into()], 1).is_empty());
    }
}
