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

pub use crate::throttle::settings::MAX_PARTITIONS;

/// Why split points were refused at `start`; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// More points than the definition's partitions allow (at most
    /// `partitions - 1`).
    #[error("{points} split points make more than the {partitions} partitions allowed")]
    TooMany {
        /// The split points the definition gave.
        points: usize,
        /// The partitions the definition allows.
        partitions: u32,
    },
    /// Point `index` is not strictly greater than the one before it
    /// (out of order or duplicated).
    #[error("split point {index} is not strictly greater than the one before it")]
    NotIncreasing {
        /// The point's position in the list, from 0.
        index: usize,
    },
    /// Point `index` is not strictly below the bound.
    #[error("split point {index} is not strictly below the bound")]
    OutsideBound {
        /// The point's position in the list, from 0.
        index: usize,
    },
    /// Point `index` is not of the definition's key type.
    #[error("split point {index}: {error}")]
    KeyType {
        /// The point's position in the list, from 0.
        index: usize,
        /// How its encoding differs from the key type.
        error: KeyError,
    },
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
    fn par01_even_splits_cover_the_range_in_order() {
        assert_eq!(even_splits(1, 100, 4), vec![25, 50, 75]);
        assert_eq!(even_splits(1, 2, 4), vec![1]);
        assert!(even_splits(5, 5, 4).is_empty());
        assert!(even_splits(1, 100, 1).is_empty());
        let wide = even_splits(i64::MIN, i64::MAX, 64);
        assert_eq!(wide.len(), 63);
        assert!(wide.windows(2).all(|w| w[0] < w[1]));
    }

    use crate::key::Key;
    use serde_json::Value;

    /// A point or bound as a `bigint` key is stored.
    fn k(value: i64) -> Vec<u8> {
        value.to_bytes()
    }

    /// The key check of a definition whose key type is `bigint`.
    fn bigint(bytes: &[u8]) -> Result<(), KeyError> {
        i64::from_bytes(bytes).map(|_| ())
    }

    /// Plan the `bigint` points against a `bigint` bound.
    fn plan(
        points: &[i64],
        bound: i64,
        partitions: u32,
    ) -> Result<Vec<PartitionRange>, SplitError> {
        let points: Vec<Vec<u8>> = points.iter().copied().map(k).collect();
        plan_partitions(&points, &k(bound), partitions, &bigint)
    }

    /// PAR-1: a definition allowing P partitions may propose P - 1 points
    /// and no more. The cap is exact on both sides, and a count far above
    /// it is refused too, not only the one just past it.
    #[test]
    fn par01_split_points_are_capped_at_one_less_than_the_partitions() {
        assert_eq!(
            plan(&[10, 20], 100, 3)
                .expect("two points, three parts")
                .len(),
            3
        );
        assert_eq!(
            plan(&[10, 20, 30], 100, 3),
            Err(SplitError::TooMany {
                points: 3,
                partitions: 3
            })
        );
        assert_eq!(
            plan(&[10, 20, 30, 40, 50], 100, 3),
            Err(SplitError::TooMany {
                points: 5,
                partitions: 3
            })
        );
        assert_eq!(plan(&[], 100, 1).expect("no points, one part").len(), 1);
        assert_eq!(
            plan(&[10], 100, 1),
            Err(SplitError::TooMany {
                points: 1,
                partitions: 1
            })
        );
        // Registration refuses 0 partitions; here even the whole range as
        // one part exceeds it.
        assert_eq!(
            plan(&[], 100, 0),
            Err(SplitError::TooMany {
                points: 0,
                partitions: 0
            })
        );
    }

    /// PAR-1: each point must be strictly greater than the one before it,
    /// so a repeated point is refused like one out of order, at the index
    /// of the later point. The first point has nothing before it and is
    /// accepted whatever its value.
    #[test]
    fn par01_split_points_must_strictly_increase() {
        assert_eq!(
            plan(&[5, 5], 100, 4),
            Err(SplitError::NotIncreasing { index: 1 })
        );
        assert_eq!(
            plan(&[7, 5], 100, 4),
            Err(SplitError::NotIncreasing { index: 1 })
        );
        assert_eq!(
            plan(&[1, 3, 3], 100, 4),
            Err(SplitError::NotIncreasing { index: 2 })
        );
        assert_eq!(
            plan(&[1, 3, 2], 100, 4),
            Err(SplitError::NotIncreasing { index: 2 })
        );
        assert!(plan(&[i64::MIN], 100, 4).is_ok());
        assert!(plan(&[4, 5, 6], 100, 4).is_ok());
    }

    /// PAR-1: a point equal to the bound would make an empty last range,
    /// so every point must be strictly below it; one just below is fine.
    #[test]
    fn par01_split_points_must_lie_strictly_below_the_bound() {
        assert_eq!(
            plan(&[100], 100, 4),
            Err(SplitError::OutsideBound { index: 0 })
        );
        assert_eq!(
            plan(&[3, 101], 100, 4),
            Err(SplitError::OutsideBound { index: 1 })
        );
        assert_eq!(plan(&[99], 100, 4).expect("just below").len(), 2);
    }

    /// PAR-1, REG-4: a bound of another key type is refused under the
    /// index one past the last point, so it cannot be mistaken for a
    /// point; a point of another type is refused under its own index.
    #[test]
    fn par01_key_type_of_the_bound_and_of_each_point_is_checked() {
        let foreign_bound = 100i32.to_bytes();
        let mismatch = bigint(&foreign_bound).expect_err("an integer is not a bigint");
        assert_eq!(
            plan_partitions(&[k(1), k(2)], &foreign_bound, 4, &bigint),
            Err(SplitError::KeyType {
                index: 2,
                error: mismatch.clone()
            })
        );
        assert_eq!(
            plan_partitions(&[], &foreign_bound, 4, &bigint),
            Err(SplitError::KeyType {
                index: 0,
                error: mismatch.clone()
            })
        );
        assert_eq!(
            plan_partitions(&[k(1), 2i32.to_bytes()], &k(100), 4, &bigint),
            Err(SplitError::KeyType {
                index: 1,
                error: mismatch
            })
        );
    }

    /// PAR-1: the ranges run from nothing to the first point, from each
    /// point to the next, and from the last point to the bound, with each
    /// end also rendered as JSON for the admin view.
    #[test]
    fn par01_ranges_run_from_nothing_through_each_point_to_the_bound() {
        assert_eq!(
            plan(&[-5, 20], 100, 3),
            Ok(vec![
                PartitionRange {
                    lower: None,
                    lower_json: None,
                    upper: k(-5),
                    upper_json: Value::from(-5),
                },
                PartitionRange {
                    lower: Some(k(-5)),
                    lower_json: Some(Value::from(-5)),
                    upper: k(20),
                    upper_json: Value::from(20),
                },
                PartitionRange {
                    lower: Some(k(20)),
                    lower_json: Some(Value::from(20)),
                    upper: k(100),
                    upper_json: Value::from(100),
                },
            ])
        );
        assert_eq!(
            plan(&[], 7, 1),
            Ok(vec![PartitionRange {
                lower: None,
                lower_json: None,
                upper: k(7),
                upper_json: Value::from(7),
            }])
        );
    }

    /// PAR-1: the arithmetic split pinned to exact points, so that every
    /// operator in it matters: a zero minimum, a width that does not
    /// divide evenly, a range across zero, one at the top of `i64`, the
    /// narrowest ranges, and the partition counts that make no points.
    #[test]
    fn par01_even_splits_are_exact_for_small_and_edge_ranges() {
        assert_eq!(even_splits(0, 9, 2), vec![4]);
        assert_eq!(even_splits(1, 100, 3), vec![33, 66]);
        assert_eq!(even_splits(1, 100, 2), vec![50]);
        assert_eq!(even_splits(-10, 10, 4), vec![-6, -1, 4]);
        assert_eq!(even_splits(i64::MAX - 3, i64::MAX, 2), vec![i64::MAX - 2]);
        assert_eq!(even_splits(i64::MIN, i64::MIN + 3, 2), vec![i64::MIN + 1]);
        // Too narrow for the partitions: points below the minimum are
        // dropped and the repeats collapse, leaving the one point there is.
        assert_eq!(even_splits(7, 8, 4), vec![7]);
        assert_eq!(even_splits(7, 8, 2), vec![7]);
        assert_eq!(even_splits(0, 3, 8), vec![0, 1, 2]);
        assert!(even_splits(7, 7, 4).is_empty());
        assert!(even_splits(10, 0, 4).is_empty());
        assert!(even_splits(1, 100, 0).is_empty());
        assert!(even_splits(1, 100, 1).is_empty());
    }
}
