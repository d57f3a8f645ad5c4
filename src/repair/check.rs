//! The engine's checks of what a repair's batch selected (EX-3, EX-4): at
//! most the batch limit of keys, strictly ascending, all in
//! `(checkpoint, bound]`, for the keys of the two-statement form and the
//! summary of the one-statement form alike.

use super::Mutated;
use crate::key::Key;

/// A selection that broke the batch contract (EX-3, EX-4). The engine
/// rejects the batch before the mutation runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// More keys than the declared batch limit.
    #[error("selection returned {got} keys, the batch limit is {limit}")]
    OverLimit {
        /// The keys the selection returned.
        got: usize,
        /// The batch limit in force.
        limit: u32,
    },
    /// Keys not strictly ascending (duplicates or wrong order).
    #[error("selection returned keys out of order or repeated at position {0}")]
    NotAscending(usize),
    /// A key at or before the checkpoint.
    #[error("selection returned a key at or before the checkpoint")]
    NotAfterCheckpoint,
    /// A key after the bound.
    #[error("selection returned a key after the bound")]
    AfterBound,
    /// A one-statement batch reported a summary no selection can have
    /// (zero keys, or a first key after its last, or one key spanning two).
    #[error("one-statement batch reported an inconsistent selection")]
    Inconsistent,
    /// The repair's batch limit was 0 for this batch. Registration refuses
    /// 0, but the limit is asked again for every batch; a batch must be
    /// finite and non-zero (EX-4), and an empty selection would move the
    /// checkpoint to the bound.
    #[error("the repair's batch limit is 0")]
    ZeroLimit,
}

/// Check a selection against the batch contract: at most `limit` keys,
/// strictly ascending, all in `(after, bound]`.
pub(crate) fn check_selection<K: Key>(
    keys: &[K],
    after: Option<&K>,
    bound: &K,
    limit: u32,
) -> Result<(), SelectionError> {
    if keys.len() > limit as usize {
        return Err(SelectionError::OverLimit {
            got: keys.len(),
            limit,
        });
    }
    for (i, pair) in keys.windows(2).enumerate() {
        if pair[0] >= pair[1] {
            return Err(SelectionError::NotAscending(i + 1));
        }
    }
    if let (Some(first), Some(after)) = (keys.first(), after) {
        if first <= after {
            return Err(SelectionError::NotAfterCheckpoint);
        }
    }
    if let Some(last) = keys.last() {
        if last > bound {
            return Err(SelectionError::AfterBound);
        }
    }
    Ok(())
}

/// Check a one-statement batch's summary against the same contract as
/// [`check_selection`]: at most `limit` keys, all in `(after, bound]`.
/// `Some((last, count))` when keys were mutated, `None` for nothing left.
pub(crate) fn check_mutated<'m, K: Key>(
    mutated: &'m Mutated<K>,
    after: Option<&K>,
    bound: &K,
    limit: u32,
) -> Result<Option<(&'m K, u32)>, SelectionError> {
    let (first, last, count) = match mutated {
        Mutated::Nothing => return Ok(None),
        Mutated::Inconsistent => return Err(SelectionError::Inconsistent),
        Mutated::Keys { first, last, count } => (first, last, count),
    };
    if *count > limit {
        return Err(SelectionError::OverLimit {
            got: *count as usize,
            limit,
        });
    }
    if *count == 0 || first > last || (*count == 1) != (first == last) {
        return Err(SelectionError::Inconsistent);
    }
    if after.is_some_and(|after| first <= after) {
        return Err(SelectionError::NotAfterCheckpoint);
    }
    if last > bound {
        return Err(SelectionError::AfterBound);
    }
    Ok(Some((last, *count)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::BigIntSummary;

    #[test]
    fn ex03_selection_contract_is_checked() {
        assert!(check_selection(&[2i64, 3], Some(&1), &3, 2).is_ok());
        assert_eq!(
            check_selection(&[2i64, 3, 4], Some(&1), &9, 2),
            Err(SelectionError::OverLimit { got: 3, limit: 2 })
        );
        assert_eq!(
            check_selection(&[3i64, 2], None, &9, 5),
            Err(SelectionError::NotAscending(1))
        );
        assert_eq!(
            check_selection(&[1i64, 2], Some(&1), &9, 5),
            Err(SelectionError::NotAfterCheckpoint)
        );
        assert_eq!(
            check_selection(&[8i64, 10], None, &9, 5),
            Err(SelectionError::AfterBound)
        );
    }

    #[test]
    fn ex03_one_statement_summary_is_checked() {
        let keys = |first, last, count| Mutated::Keys { first, last, count };
        assert!(check_mutated(&keys(2i64, 3, 2), Some(&1), &3, 2).is_ok());
        assert!(check_mutated(&keys(5i64, 5, 1), None, &5, 1).is_ok());
        assert!(check_mutated(&Mutated::<i64>::Nothing, Some(&1), &3, 2).is_ok());
        assert_eq!(
            check_mutated(&keys(2i64, 9, 3), Some(&1), &9, 2),
            Err(SelectionError::OverLimit { got: 3, limit: 2 })
        );
        for bad in [
            keys(2i64, 3, 0),
            keys(3, 2, 2),
            keys(2, 2, 2),
            keys(2, 3, 1),
        ] {
            assert_eq!(
                check_mutated(&bad, None, &9, 5),
                Err(SelectionError::Inconsistent)
            );
        }
        assert_eq!(
            check_mutated(&keys(1i64, 2, 2), Some(&1), &9, 5),
            Err(SelectionError::NotAfterCheckpoint)
        );
        assert_eq!(
            check_mutated(&keys(8i64, 10, 2), None, &9, 5),
            Err(SelectionError::AfterBound)
        );
        assert_eq!(
            Mutated::<i64>::from_summary(None, None, 0),
            Mutated::Nothing
        );
        // A count without keys, or one key without the other, is never
        // "nothing left" (EX-3).
        for (first, last, n) in [
            (None, None, 1000),
            (Some(6i64), None, 7),
            (None, Some(6i64), 7),
            (None, Some(6i64), 0),
        ] {
            let summary = Mutated::from_summary(first, last, n);
            assert_eq!(summary, Mutated::Inconsistent, "{first:?} {last:?} {n}");
            assert_eq!(
                check_mutated(&summary, None, &9, 5),
                Err(SelectionError::Inconsistent)
            );
        }
        assert_eq!(Mutated::from_summary(Some(2i64), Some(3), 2), keys(2, 3, 2));
        let row = BigIntSummary {
            first: Some(2),
            last: Some(3),
            n: 2,
        };
        assert_eq!(Mutated::from(row), keys(2, 3, 2));
        // A count beyond u32 is not truncated into the limit.
        let huge = Mutated::from_summary(Some(1i64), Some(9), i64::from(u32::MAX) + 2);
        assert_eq!(
            check_mutated(&huge, None, &9, 5),
            Err(SelectionError::OverLimit {
                got: u32::MAX as usize,
                limit: 5
            })
        );
    }

    /// EX-4: a selection of exactly the limit passes and one key more is
    /// refused, with the count and the limit reported.
    #[test]
    fn ex04_selection_may_reach_the_limit_but_not_pass_it() {
        assert_eq!(check_selection(&[1i64, 2, 3], None, &9, 3), Ok(()));
        assert_eq!(
            check_selection(&[1i64, 2, 3], None, &9, 2),
            Err(SelectionError::OverLimit { got: 3, limit: 2 })
        );
        assert_eq!(check_selection(&[1i64], None, &9, 1), Ok(()));
        assert_eq!(
            check_selection(&[1i64, 2], None, &9, 1),
            Err(SelectionError::OverLimit { got: 2, limit: 1 })
        );
    }

    /// EX-3: a repeated key is refused like one out of order, at the
    /// position of the second of the pair, wherever the pair stands.
    #[test]
    fn ex03_selection_refuses_a_repeated_key_at_its_position() {
        assert_eq!(
            check_selection(&[2i64, 2], None, &9, 5),
            Err(SelectionError::NotAscending(1))
        );
        assert_eq!(
            check_selection(&[1i64, 2, 2], None, &9, 5),
            Err(SelectionError::NotAscending(2))
        );
        assert_eq!(
            check_selection(&[1i64, 2, 3, 1], None, &9, 5),
            Err(SelectionError::NotAscending(3))
        );
    }

    /// EX-3: the selection lies in `(after, bound]`: a first key equal to
    /// the checkpoint is refused and the one after it passes; a last key
    /// equal to the bound passes and the one after it is refused; without
    /// a checkpoint any first key passes, and an empty selection passes.
    #[test]
    fn ex03_selection_is_checked_at_both_ends_of_its_range() {
        assert_eq!(
            check_selection(&[4i64, 5], Some(&4), &9, 5),
            Err(SelectionError::NotAfterCheckpoint)
        );
        assert_eq!(check_selection(&[5i64, 6], Some(&4), &9, 5), Ok(()));
        assert_eq!(check_selection(&[i64::MIN, 0], None, &9, 5), Ok(()));
        assert_eq!(check_selection(&[8i64, 9], Some(&4), &9, 5), Ok(()));
        assert_eq!(
            check_selection(&[8i64, 10], Some(&4), &9, 5),
            Err(SelectionError::AfterBound)
        );
        assert_eq!(check_selection(&[9i64], Some(&8), &9, 1), Ok(()));
        assert_eq!(check_selection::<i64>(&[], Some(&4), &9, 5), Ok(()));
    }

    /// EX-3, EX-4: a one-statement summary passes the same edges as a
    /// selection: a count of exactly the limit, a first key just after the
    /// checkpoint, a last key equal to the bound; and it hands back the
    /// last key and the count the checkpoint advances by.
    #[test]
    fn ex03_one_statement_summary_is_checked_at_every_edge() {
        let keys = |first, last, count| Mutated::Keys { first, last, count };
        assert_eq!(
            check_mutated(&keys(5i64, 9, 3), Some(&4), &9, 3),
            Ok(Some((&9, 3)))
        );
        assert_eq!(
            check_mutated(&keys(5i64, 9, 4), Some(&4), &9, 3),
            Err(SelectionError::OverLimit { got: 4, limit: 3 })
        );
        assert_eq!(
            check_mutated(&keys(4i64, 9, 3), Some(&4), &9, 3),
            Err(SelectionError::NotAfterCheckpoint)
        );
        assert_eq!(
            check_mutated(&keys(5i64, 10, 3), Some(&4), &9, 3),
            Err(SelectionError::AfterBound)
        );
        assert_eq!(
            check_mutated(&keys(i64::MIN, 0, 2), None, &9, 2),
            Ok(Some((&0, 2)))
        );
        assert_eq!(
            check_mutated(&keys(7i64, 7, 1), Some(&6), &7, 1),
            Ok(Some((&7, 1)))
        );
        assert_eq!(
            check_mutated(&keys(7i64, 7, 0), None, &9, 5),
            Err(SelectionError::Inconsistent)
        );
        assert_eq!(
            check_mutated(&Mutated::<i64>::Inconsistent, None, &9, 5),
            Err(SelectionError::Inconsistent)
        );
        assert_eq!(
            check_mutated(&Mutated::<i64>::Nothing, None, &9, 5),
            Ok(None)
        );
    }
}
