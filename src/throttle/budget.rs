//! A process's budget of runners across the databases of a fleet, in
//! priority order, with rollout caps (FLT-2).
//!
//! Every claim a budgeted engine makes first takes a [`Permit`]; the
//! permit travels with the claim and goes back when the claim is dropped,
//! however it ends. While permits are scarce, a database that found
//! claimable work of priority `p` and got none leaves a *want* of `p`;
//! a permit is then refused to another database for lower-priority work
//! unless more permits are free than there are databases waiting with
//! higher priority. A want lasts a few poll intervals, so a database that
//! stopped asking stops holding others back. A rollout cap bounds how
//! many databases hold permits for one repair at once; a cap an operator
//! set carries the time it was set, so the newest of the caps a process
//! finds stored in its databases (as they join it) is the one in force.
//!
//! The budget lives in one process: it divides that process's runners.
//! Processes of a fleet deployed side by side each have their own.

use crate::store::{self, StoreError};
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The runners one process may run at once over all its databases, and
/// the rollout caps of its repairs.
#[derive(Debug)]
pub struct RunnerBudget {
    max: usize,
    want_ttl: Duration,
    state: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    held: usize,
    /// Database -> the priority it waits with, and since when.
    wants: HashMap<String, (i32, Instant)>,
    /// Repair ID -> database -> permits held for it there.
    holders: HashMap<String, HashMap<String, usize>>,
    /// Repair ID -> the most databases that may run it at once.
    rollout: HashMap<String, u32>,
    /// Repair ID -> when an operator last set (or lifted) its cap; a cap
    /// from the configuration has none.
    rollout_at: HashMap<String, DateTime<Utc>>,
}

/// A runner's share of the budget: taken before a claim, given back when
/// dropped.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<RunnerBudget>,
    database: String,
    id: String,
}

impl Permit {
    /// The repair the permit was granted for.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.give_back(&self.database, &self.id);
    }
}

impl RunnerBudget {
    /// A budget of `max` runners (at least 1); a want expires after
    /// `want_ttl` (a few poll intervals).
    pub fn new(max: usize, want_ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            want_ttl,
            state: Mutex::new(Ledger::default()),
        })
    }

    /// The most runners at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Permits held now.
    pub fn held(&self) -> usize {
        self.state.lock().held
    }

    /// Databases waiting for a permit now (their wants not yet expired).
    pub fn waiting(&self) -> usize {
        let now = Instant::now();
        let state = self.state.lock();
        state
            .wants
            .values()
            .filter(|(_, since)| now.duration_since(*since) < self.want_ttl)
            .count()
    }

    /// Cap the databases that run repair `id` at once (`None`: no cap),
    /// as configured: any cap set at a time (below) replaces it. Applies
    /// to the next permit; claims held now run on.
    pub fn set_rollout(&self, id: &str, cap: Option<u32>) {
        let mut state = self.state.lock();
        state.rollout_at.remove(id);
        Self::apply(&mut state, id, cap);
    }

    /// Cap repair `id` (or lift its cap) as an operator set it at `at`,
    /// unless that setting or a newer one is in force already; whether it
    /// applied.
    pub fn set_rollout_at(&self, id: &str, cap: Option<u32>, at: DateTime<Utc>) -> bool {
        let mut state = self.state.lock();
        if state.rollout_at.get(id).is_some_and(|known| *known >= at) {
            return false;
        }
        state.rollout_at.insert(id.to_string(), at);
        Self::apply(&mut state, id, cap);
        true
    }

    /// Take the rollout caps stored in the database behind `conn` (as an
    /// operator set them through the fleet's admin API), each unless a
    /// newer setting is in force; called as the database joins the
    /// process, before its first claim. Each cap taken is logged
    /// (`fleet_rollout_adopted`).
    pub(crate) async fn adopt_stored(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<(), StoreError> {
        for stored in store::rollout_list(conn).await? {
            let cap = stored.max_databases.and_then(|c| u32::try_from(c).ok());
            if self.set_rollout_at(&stored.repair_id, cap, stored.set_at) {
                tracing::info!(
                    event = "fleet_rollout_adopted",
                    repair = %stored.repair_id,
                    max_databases = cap.map_or(-1, i64::from),
                    set_at = %stored.set_at,
                );
            }
        }
        Ok(())
    }

    fn apply(state: &mut Ledger, id: &str, cap: Option<u32>) {
        match cap {
            Some(cap) => state.rollout.insert(id.to_string(), cap),
            None => state.rollout.remove(id),
        };
    }

    /// The rollout cap of repair `id`, if any.
    pub fn rollout(&self, id: &str) -> Option<u32> {
        self.state.lock().rollout.get(id).copied()
    }

    /// A permit for database `database` to claim one of `candidates`
    /// (repair ID and priority, the repairs it has claimable work for):
    /// the highest-priority one its rollout cap allows, if a permit is
    /// free and no database waits with higher priority for the ones that
    /// are. `None` leaves a want when some candidate was allowed.
    pub fn try_take(
        self: &Arc<Self>,
        database: &str,
        candidates: &[(String, i32)],
    ) -> Option<Permit> {
        let now = Instant::now();
        let mut state = self.state.lock();
        let Ledger {
            held,
            wants,
            holders,
            rollout,
            ..
        } = &mut *state;
        let allowed = |id: &str| {
            let Some(cap) = rollout.get(id) else {
                return true;
            };
            let running = holders.get(id);
            let here = running.is_some_and(|dbs| dbs.contains_key(database));
            here || running.map_or(0, HashMap::len) < *cap as usize
        };
        // The first allowed candidate of the highest priority.
        let (id, priority) = candidates
            .iter()
            .filter(|(id, _)| allowed(id))
            .fold(None::<&(String, i32)>, |best, c| match best {
                Some(b) if b.1 >= c.1 => Some(b),
                _ => Some(c),
            })?
            .clone();
        let ttl = self.want_ttl;
        wants.retain(|_, (_, since)| now.duration_since(*since) < ttl);
        let higher = wants
            .iter()
            .filter(|(db, (p, _))| db.as_str() != database && *p > priority)
            .count();
        if self.max.saturating_sub(*held) > higher {
            *held += 1;
            *holders
                .entry(id.clone())
                .or_default()
                .entry(database.to_string())
                .or_default() += 1;
            wants.remove(database);
            Some(Permit {
                budget: self.clone(),
                database: database.to_string(),
                id,
            })
        } else {
            wants.insert(database.to_string(), (priority, now));
            None
        }
    }

    fn give_back(&self, database: &str, id: &str) {
        let mut state = self.state.lock();
        state.held = state.held.saturating_sub(1);
        if let Some(dbs) = state.holders.get_mut(id) {
            if let Some(n) = dbs.get_mut(database) {
                *n -= 1;
                if *n == 0 {
                    dbs.remove(database);
                }
            }
            if dbs.is_empty() {
                state.holders.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(items: &[(&str, i32)]) -> Vec<(String, i32)> {
        items.iter().map(|(id, p)| (id.to_string(), *p)).collect()
    }

    #[test]
    fn flt02_permits_are_capped_and_given_back_on_drop() {
        let budget = RunnerBudget::new(2, Duration::from_secs(60));
        let a = budget.try_take("d1", &c(&[("lo", 0)])).expect("free");
        let b = budget.try_take("d2", &c(&[("lo", 0)])).expect("free");
        assert!(budget.try_take("d3", &c(&[("lo", 0)])).is_none());
        assert_eq!(budget.held(), 2);
        drop(a);
        assert_eq!(budget.held(), 1);
        assert!(budget.try_take("d3", &c(&[("lo", 0)])).is_some());
        drop(b);
    }

    #[test]
    fn flt02_a_waiting_higher_priority_goes_first() {
        let budget = RunnerBudget::new(1, Duration::from_secs(60));
        let held = budget.try_take("d1", &c(&[("hi", 10)])).expect("free");
        // d2 has high-priority work and waits; d3 only low-priority work.
        assert!(budget
            .try_take("d2", &c(&[("hi", 10), ("lo", 0)]))
            .is_none());
        drop(held);
        assert!(
            budget.try_take("d3", &c(&[("lo", 0)])).is_none(),
            "the free permit is d2's"
        );
        let p = budget
            .try_take("d2", &c(&[("hi", 10), ("lo", 0)]))
            .expect("d2's turn");
        assert_eq!(p.id(), "hi");
        drop(p);
        assert!(
            budget.try_take("d3", &c(&[("lo", 0)])).is_some(),
            "no one waits now"
        );
    }

    #[test]
    fn flt02_a_stale_want_holds_no_one_back() {
        let budget = RunnerBudget::new(1, Duration::ZERO);
        let held = budget.try_take("d1", &c(&[("hi", 10)])).expect("free");
        assert!(budget.try_take("d2", &c(&[("hi", 10)])).is_none());
        drop(held);
        assert!(budget.try_take("d3", &c(&[("lo", 0)])).is_some());
    }

    #[test]
    fn flt02_the_newest_rollout_setting_wins_over_older_ones_and_the_configuration() {
        let budget = RunnerBudget::new(4, Duration::from_secs(1));
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        budget.set_rollout("a", Some(3));
        assert!(
            budget.set_rollout_at("a", Some(1), t(10)),
            "a setting replaces the configuration"
        );
        assert_eq!(budget.rollout("a"), Some(1));
        assert!(
            !budget.set_rollout_at("a", Some(2), t(5)),
            "an older setting does not"
        );
        assert_eq!(budget.rollout("a"), Some(1));
        assert!(budget.set_rollout_at("a", None, t(20)), "a newer lift does");
        assert_eq!(budget.rollout("a"), None);
    }

    #[test]
    fn flt02_a_rollout_cap_bounds_the_databases_of_a_repair() {
        let budget = RunnerBudget::new(10, Duration::from_secs(60));
        budget.set_rollout("lo", Some(1));
        let first = budget
            .try_take("d1", &c(&[("lo", 0)]))
            .expect("first database");
        let again = budget
            .try_take("d1", &c(&[("lo", 0)]))
            .expect("same database");
        assert!(budget.try_take("d2", &c(&[("lo", 0)])).is_none());
        assert_eq!(
            budget
                .try_take("d2", &c(&[("lo", 0), ("other", -5)]))
                .map(|p| p.id().to_string()),
            Some("other".to_string()),
            "another repair is not capped"
        );
        drop(first);
        assert!(
            budget.try_take("d2", &c(&[("lo", 0)])).is_none(),
            "d1 still runs it"
        );
        drop(again);
        assert!(budget.try_take("d2", &c(&[("lo", 0)])).is_some());
        budget.set_rollout("lo", None);
        assert_eq!(budget.rollout("lo"), None);
    }
}
