//! Dividing a backfill's range into partitions (PAR-1): the check of the
//! split points a repair proposes, the ranges they make, and the split of
//! an integer range by arithmetic.
//!
//! Points are in the stored key encoding, whose bytewise order is the
//! key's order (EX-2). Points `s1 < s2 < .. < sk`, all strictly below the
//! bound, make the ranges `(nothing, s1]`, `(s1, s2]`, .., `(sk, bound]`:
//! contiguous, disjoint, and together exactly `(nothing, bound]`.

use crate::key::{render_json, KeyError};
use crate::store::PartitionRange;

/// The most partitions a definition may allow (`Repair::partitions`).
pub const MAX_PARTITIONS: u32 = 64;

/// Why split points were refused at `start`; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// More points than the definition's partitions allow (at most
    /// `partitions - 1`).
    #[error("{points} split points make more than the {partitions} partitions allowed")]
    TooMany { points: usize, partitions: u32 },
    /// Point `index` is not strictly greater than the one before it
    /// (out of order or duplicated).
    #[error("split point {index} is not strictly greater than the one before it")]
    NotIncreasing { index: usize },
    /// Point `index` is not strictly below the bound.
    #[error("split point {index} is not strictly below the bound")]
    OutsideBound { index: usize },
    /// Point `index` is not of the definition's key type.
    #[error("split point {index}: {error}")]
    KeyType { index: usize, error: KeyError },
}

/// Check `points` against `bound` for a definition allowing `partitions`
/// partitions, and return the ranges they make (one range, the whole
/// `(nothing, bound]`, for no points). `check_key` decodes a point as the
/// definition's key type, so a point of another type is refused by its
/// type tag.
pub fn plan_partitions(
    points: &[Vec<u8>],
    bound: &[u8],
    partitions: u32,
    check_key: &dyn Fn(&[u8]) -> Result<(), KeyError>,
) -> Result<Vec<PartitionRange>, SplitError> {
    if points.len() + 1 > partitions as usize {
        return Err(SplitError::TooMany {
            points: points.len(),
            partitions,
        });
    }
    check_key(bound).map_err(|error| SplitError::KeyType {
        index: points.len(),
        error,
    })?;
    for (index, point) in points.iter().enumerate() {
        check_key(point).map_err(|error| SplitError::KeyType { index, error })?;
        if index > 0 && point.as_slice() <= points[index - 1].as_slice() {
            return Err(SplitError::NotIncreasing { index });
        }
        if point.as_slice() >= bound {
            return Err(SplitError::OutsideBound { index });
        }
    }
    let mut ranges = Vec::with_capacity(points.len() + 1);
    let mut lower: Option<&[u8]> = None;
    for upper in points
        .iter()
        .map(Vec::as_slice)
        .chain(std::iter::once(bound))
    {
        ranges.push(PartitionRange {
            lower: lower.map(<[u8]>::to_vec),
            lower_json: lower.and_then(render_json),
            upper: upper.to_vec(),
            upper_json: render_json(upper).unwrap_or(serde_json::Value::Null),
        });
        lower = Some(upper);
    }
    Ok(ranges)
}

/// Split points dividing the integer range `[min, max]` into `partitions`
/// parts of (nearly) equal width: the helper for a `bigint` key whose
/// `min` and `max` a repair reads at `start`. Fewer points come back when
/// the range is narrower than `partitions` keys; none for one partition
/// or an empty range.
pub fn even_splits(min: i64, max: i64, partitions: u32) -> Vec<i64> {
    if partitions <= 1 || max <= min {
        return Vec::new();
    }
    let width = i128::from(max) - i128::from(min) + 1;
    let mut points: Vec<i64> = (1..i128::from(partitions))
        .filter_map(|i| {
            i64::try_from(i128::from(min) + width * i / i128::from(partitions) - 1).ok()
        })
        .filter(|&p| p >= min && p < max)
        .collect();
    points.dedup();
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_splits_cover_the_range_in_order() {
        assert_eq!(even_splits(1, 100, 4), vec![25, 50, 75]);
        assert_eq!(even_splits(1, 2, 4), vec![1]);
        assert!(even_splits(5, 5, 4).is_empty());
        assert!(even_splits(1, 100, 1).is_empty());
        let wide = even_splits(i64::MIN, i64::MAX, 64);
        assert_eq!(wide.len(), 63);
        assert!(wide.windows(2).all(|w| w[0] < w[1]));
    }
}
