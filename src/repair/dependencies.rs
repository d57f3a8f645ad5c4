//! The order between repairs (FLT-4): which definitions start only after
//! others have completed, and the check that no such order is circular.
//!
//! Only registration uses this file; the claim's side is a read of which
//! dependencies are `completed` (`store::backfill_completed_among`).

use std::collections::BTreeMap;

/// A cycle in `after` (each ID mapped to the IDs it starts after), as the
/// IDs along it with the first repeated at the end, or `None`. IDs that
/// are not keys of `after` have no dependencies. The search is a
/// depth-first walk in ID order, so the cycle reported is the same on
/// every start.
pub(crate) fn find_cycle(after: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for root in after.keys() {
        if marks.contains_key(root.as_str()) {
            continue;
        }
        // The path from `root`, each entry with the index of the next
        // dependency to visit.
        let mut path: Vec<(&str, usize)> = vec![(root.as_str(), 0)];
        marks.insert(root, Mark::Open);
        while let Some((id, next)) = path.last_mut() {
            let deps = after.get(*id).map(Vec::as_slice).unwrap_or_default();
            let Some(dep) = deps.get(*next) else {
                marks.insert(id, Mark::Done);
                path.pop();
                continue;
            };
            *next += 1;
            match marks.get(dep.as_str()) {
                Some(Mark::Done) => {}
                Some(Mark::Open) => {
                    let start = path.iter().position(|(p, _)| *p == dep.as_str())?;
                    let mut cycle: Vec<String> =
                        path[start..].iter().map(|(p, _)| p.to_string()).collect();
                    cycle.push(dep.clone());
                    return Some(cycle);
                }
                None => {
                    marks.insert(dep, Mark::Open);
                    path.push((dep, 0));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(id, deps)| (id.to_string(), deps.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    #[test]
    fn flt04_a_chain_and_a_diamond_have_no_cycle() {
        assert_eq!(find_cycle(&graph(&[("b", &["a"]), ("c", &["b"])])), None);
        let diamond = graph(&[("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])]);
        assert_eq!(find_cycle(&diamond), None);
    }

    #[test]
    fn flt04_a_cycle_is_named_in_order() {
        let cycle = graph(&[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("d", &["a"])]);
        assert_eq!(
            find_cycle(&cycle),
            Some(
                vec!["a", "c", "b", "a"]
                    .into_iter()
                    .map(String::from)
                    .collect()
            )
        );
        let two = graph(&[("x", &["y"]), ("y", &["x"])]);
        assert_eq!(
            find_cycle(&two),
            Some(vec!["x", "y", "x"].into_iter().map(String::from).collect())
        );
    }
}
