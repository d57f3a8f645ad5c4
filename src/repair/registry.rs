//! The [`Registry`] of a process's local definitions.

use super::erased::{Capture, DynRepair, Erased};
use super::sql::check_identifier;
use super::undo::{undo_id, Undo};
use super::{validate_id, Batches, DefinitionError, Journal, Repair};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The local definitions of one process, keyed by stable ID.
///
/// Built once at startup and immutable afterwards, so "the complete required
/// set is registered before the gate is first evaluated" (CFG-2) holds by
/// construction.
#[derive(Default, Clone)]
pub struct Registry {
    repairs: BTreeMap<String, Arc<dyn DynRepair>>,
    /// The undos derived from journaled definitions (UNDO-2), by their
    /// stable ID, each with the ID of the backfill it takes back. They are
    /// in `repairs` too, so the runtime claims and runs them like any
    /// other; only registration leaves them out (the undo action creates
    /// their rows).
    undos: BTreeMap<String, String>,
    /// Each definition that starts after others (FLT-4), with the IDs it
    /// waits for; definitions without dependencies are absent.
    after: BTreeMap<String, Vec<String>>,
    /// Each definition with a priority other than 0 (FLT-2).
    priorities: BTreeMap<String, i32>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.repairs.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a definition. The stable ID is validated here, before anything
    /// reaches the database.
    pub fn register<R: Repair>(&mut self, repair: R) -> Result<&mut Self, DefinitionError> {
        let id = repair.id().to_string();
        validate_id(&id)?;
        if repair.batch_limit() == 0 {
            return Err(DefinitionError::ZeroBatchLimit(id));
        }
        if let Some(t) = repair.batch_target() {
            if t.min == 0 || t.min > t.max || t.duration.is_zero() {
                return Err(DefinitionError::InvalidBatchTarget(id));
            }
        }
        let partitions = repair.partitions();
        if partitions == 0 || partitions > super::MAX_PARTITIONS {
            return Err(DefinitionError::InvalidPartitions { id, partitions });
        }
        if self.repairs.contains_key(&id) {
            return Err(DefinitionError::DuplicateId(id));
        }
        let after = repair.after();
        let priority = repair.priority();
        for dependency in &after {
            validate_id(dependency)?;
        }
        if after.contains(&id) {
            return Err(DefinitionError::DependencyCycle(vec![id.clone(), id]));
        }
        let journal = repair.journal();
        let undo = match &journal {
            Some(journal) => {
                check_journal(&id, journal, repair.batches())?;
                let undo = undo_id(&id);
                if self.repairs.contains_key(&undo) {
                    return Err(DefinitionError::DuplicateId(undo));
                }
                Some(Undo::new(&id, journal, partitions))
            }
            None => None,
        };
        // A definition named like an undo already derived here.
        if self.undos.contains_key(&id) {
            return Err(DefinitionError::DuplicateId(id));
        }
        let capture = journal
            .as_ref()
            .filter(|j| !j.by_statement)
            .map(Capture::new);
        let erased = Erased {
            id: id.clone(),
            repair,
            capture,
        };
        if !after.is_empty() {
            let mut after = after;
            after.sort();
            after.dedup();
            self.after.insert(id.clone(), after);
        }
        if priority != 0 {
            self.priorities.insert(id.clone(), priority);
        }
        self.repairs.insert(id, Arc::new(erased));
        if let Some(undo) = undo {
            let undo_id = undo.id().to_string();
            self.undos
                .insert(undo_id.clone(), undo.original().to_string());
            let erased = Erased {
                id: undo_id.clone(),
                repair: undo,
                capture: None,
            };
            self.repairs.insert(undo_id, Arc::new(erased));
        }
        Ok(self)
    }

    /// Builder form of [`Registry::register`].
    pub fn with<R: Repair>(mut self, repair: R) -> Result<Self, DefinitionError> {
        self.register(repair)?;
        Ok(self)
    }

    /// The stable IDs of the definitions registered here (not the undos
    /// derived from them).
    pub fn ids(&self) -> Vec<String> {
        self.repairs
            .keys()
            .filter(|id| !self.undos.contains_key(*id))
            .cloned()
            .collect()
    }

    /// Every stable ID this process can work on: the registered
    /// definitions and the undos of the journaled ones (UNDO-2).
    pub fn claimable_ids(&self) -> Vec<String> {
        self.repairs.keys().cloned().collect()
    }

    /// The backfill that `id` takes back, when `id` is the undo of a
    /// journaled definition here (UNDO-2).
    pub fn undo_of(&self, id: &str) -> Option<&str> {
        self.undos.get(id).map(String::as_str)
    }

    /// What the definition `id` journals (UNDO-1); `None` for an unknown
    /// or unjournaled one.
    pub fn journal(&self, id: &str) -> Option<Journal> {
        self.repairs.get(id).and_then(|r| r.journal())
    }

    /// Every table a definition names ([`Repair::tables`]), once each, in
    /// order: the tables the health monitor watches for lock waiters.
    pub fn tables(&self) -> Vec<String> {
        let tables: std::collections::BTreeSet<String> =
            self.repairs.values().flat_map(|r| r.tables()).collect();
        tables.into_iter().collect()
    }

    /// Whether this process has a definition for `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.repairs.contains_key(id)
    }

    /// Number of definitions registered here, as [`Registry::ids`] lists
    /// them: a journaled definition's derived undo is not counted.
    pub fn len(&self) -> usize {
        self.repairs.len() - self.undos.len()
    }

    /// Whether there are no definitions.
    pub fn is_empty(&self) -> bool {
        self.repairs.is_empty()
    }

    /// Whether any definition overlaps commits (and so may hold a second
    /// connection per claim).
    pub fn any_overlaps(&self) -> bool {
        self.repairs.values().any(|r| r.overlap_commits())
    }

    /// The stable IDs the definition `id` starts after (FLT-4), sorted;
    /// empty for one without dependencies or an unknown ID.
    pub fn dependencies(&self, id: &str) -> &[String] {
        self.after.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether any definition starts after others (FLT-4), so that a
    /// claim must first ask which of them completed.
    pub fn has_dependencies(&self) -> bool {
        !self.after.is_empty()
    }

    /// The priority of the definition `id` (FLT-2); 0 for one that
    /// declares none or an unknown ID.
    pub fn priority(&self, id: &str) -> i32 {
        self.priorities.get(id).copied().unwrap_or(0)
    }

    /// Whether any definition declares a priority other than 0, so that a
    /// claim must first see which work is claimable (FLT-2).
    pub fn has_priorities(&self) -> bool {
        !self.priorities.is_empty()
    }

    /// Every ID some definition depends on (FLT-4), once each.
    pub(crate) fn all_dependencies(&self) -> Vec<String> {
        let all: std::collections::BTreeSet<&String> = self.after.values().flatten().collect();
        all.into_iter().cloned().collect()
    }

    /// Check the definitions' dependencies as a whole (FLT-4): each names
    /// a definition registered here, and none is part of a cycle. Called
    /// at startup, before anything reaches PostgreSQL, once every
    /// definition is registered.
    pub fn check_dependencies(&self) -> Result<(), DefinitionError> {
        for (id, after) in &self.after {
            if let Some(dependency) = after.iter().find(|d| !self.repairs.contains_key(*d)) {
                return Err(DefinitionError::UnknownDependency {
                    id: id.clone(),
                    dependency: dependency.clone(),
                });
            }
        }
        match super::dependencies::find_cycle(&self.after) {
            Some(cycle) => Err(DefinitionError::DependencyCycle(cycle)),
            None => Ok(()),
        }
    }

    /// Key type name of a definition.
    pub fn key_type(&self, id: &str) -> Option<String> {
        self.repairs.get(id).map(|r| r.key_type())
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Arc<dyn DynRepair>> {
        self.repairs.get(id)
    }

    /// The registered definitions, without the derived undos.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn DynRepair>> {
        self.repairs
            .iter()
            .filter(|(id, _)| !self.undos.contains_key(*id))
            .map(|(_, repair)| repair)
    }
}

/// Whether `journal` can be kept for the definition `id` (UNDO-1): plain
/// identifiers, at least one key and one journaled column, a batch form
/// the journal is written in, and room for the undo's stable ID.
fn check_journal<K>(
    id: &str,
    journal: &Journal,
    form: Batches<'_, K>,
) -> Result<(), DefinitionError> {
    let invalid = |reason| DefinitionError::InvalidJournal {
        id: id.to_string(),
        reason,
    };
    check_identifier(&journal.table, true)?;
    for name in journal.key_columns.iter().chain(&journal.columns) {
        check_identifier(name, false)?;
    }
    if journal.key_columns.is_empty() {
        return Err(invalid("no key column"));
    }
    if journal.columns.is_empty() {
        return Err(invalid("no journaled column"));
    }
    if !journal.by_statement && matches!(form, Batches::OneStatement(_)) {
        return Err(invalid(
            "a hand-written one-statement form cannot be journaled by the engine: use the two-statement form",
        ));
    }
    if validate_id(&undo_id(id)).is_err() {
        return Err(invalid(
            "its stable ID leaves no room for the undo's (at most 123 characters)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::{SqlRepair, SqlRepairBuilder, MAX_PARTITIONS};
    use crate::throttle::sizing::BatchTarget;
    use std::time::Duration;

    /// A complete SQL definition with the builder's defaults, for a test
    /// to change the one answer it is about.
    fn sql(id: &str, table: &str) -> SqlRepairBuilder {
        SqlRepair::new(id, table)
            .key("id")
            .set("n = 0")
            .validate_where("n <> 0")
    }

    /// Register `repair` in a fresh registry, keeping only the outcome.
    fn register_one(repair: SqlRepairBuilder) -> Result<(), DefinitionError> {
        let repair = repair.build().expect("the builder accepts it");
        Registry::new().register(repair).map(|_| ())
    }

    /// EX-4: a batch limit of 0 could never make progress and is refused
    /// at registration; a limit of 1 is the smallest that is accepted.
    #[test]
    fn ex04_a_zero_batch_limit_is_refused_at_registration() {
        assert_eq!(
            register_one(sql("t.v1", "t").batch_size(0)),
            Err(DefinitionError::ZeroBatchLimit("t.v1".into()))
        );
        assert_eq!(register_one(sql("t.v1", "t").batch_size(1)), Ok(()));
    }

    /// THR-3: a batch target needs a size range starting at 1 or more
    /// that is not empty, and a duration above zero. Each condition is
    /// refused on its own while the others hold, and a range of one size
    /// (min equal to max) is accepted.
    #[test]
    fn thr03_batch_targets_are_checked_at_registration() {
        let target = |millis, min, max| {
            register_one(sql("t.v1", "t").target_batch(Duration::from_millis(millis), min, max))
        };
        let invalid = Err(DefinitionError::InvalidBatchTarget("t.v1".into()));
        assert_eq!(target(50, 1, 10), Ok(()));
        assert_eq!(target(50, 10, 10), Ok(()));
        assert_eq!(target(50, 0, 10), invalid);
        assert_eq!(target(50, 11, 10), invalid);
        assert_eq!(target(0, 1, 10), invalid);
        assert_eq!(target(0, 10, 10), invalid);
        let declared = BatchTarget {
            duration: Duration::from_millis(50),
            min: 10,
            max: 10,
        };
        let registry = Registry::new()
            .with(
                sql("t.v1", "t")
                    .target_batch(declared.duration, declared.min, declared.max)
                    .build()
                    .expect("valid"),
            )
            .expect("registers");
        let registered = registry.get("t.v1").expect("registered");
        assert_eq!(registered.batch_target(), Some(declared));
    }

    /// PAR-1: a definition allows 1 to `MAX_PARTITIONS` partitions, both
    /// ends included; 0 and one more than the maximum are refused.
    #[test]
    fn par01_partitions_are_checked_at_registration() {
        let parts = |partitions| register_one(sql("t.v1", "t").partitions(partitions));
        let invalid = |partitions| {
            Err(DefinitionError::InvalidPartitions {
                id: "t.v1".into(),
                partitions,
            })
        };
        assert_eq!(parts(0), invalid(0));
        assert_eq!(parts(1), Ok(()));
        assert_eq!(parts(2), Ok(()));
        assert_eq!(parts(MAX_PARTITIONS), Ok(()));
        assert_eq!(parts(MAX_PARTITIONS + 1), invalid(MAX_PARTITIONS + 1));
    }

    /// REG-3: one process holds one definition per stable ID; a second
    /// one under the same ID is refused and the first stays registered.
    #[test]
    fn reg03_a_duplicate_stable_id_is_refused() {
        let mut registry = Registry::new();
        registry
            .register(sql("t.v1", "t").build().expect("valid"))
            .expect("first registers");
        let second = sql("t.v1", "other").build().expect("valid");
        assert_eq!(
            registry.register(second).map(|_| ()),
            Err(DefinitionError::DuplicateId("t.v1".into()))
        );
        assert_eq!(registry.len(), 1);
        assert_eq!(registry.tables(), vec!["t".to_string()]);
    }

    /// REG-4: the registry answers for exactly the definitions registered
    /// in it, by ID, so a process never claims an ID it holds no
    /// definition for; the empty registry answers for none.
    #[test]
    fn reg04_registry_answers_for_exactly_its_definitions() {
        let empty = Registry::new();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        assert!(empty.ids().is_empty());
        assert!(!empty.contains("b.v1"));
        assert_eq!(empty.key_type("b.v1"), None);
        assert!(empty.get("b.v1").is_none());
        assert_eq!(empty.iter().count(), 0);
        assert_eq!(format!("{empty:?}"), "[]");

        let mut registry = Registry::new();
        registry
            .register(sql("b.v1", "items").build().expect("valid"))
            .expect("registers")
            .register(sql("a.v1", "app.events").build().expect("valid"))
            .expect("registers");
        let registry = registry
            .with(sql("c.v1", "items").build().expect("valid"))
            .expect("registers");
        assert!(!registry.is_empty());
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.ids(), vec!["a.v1", "b.v1", "c.v1"]);
        assert!(registry.contains("b.v1"));
        assert!(!registry.contains("d.v1"));
        assert_eq!(registry.key_type("b.v1").as_deref(), Some("bigint"));
        assert_eq!(registry.key_type("d.v1"), None);
        assert_eq!(registry.get("c.v1").map(|r| r.id()), Some("c.v1"));
        assert!(registry.get("d.v1").is_none());
        let iterated: Vec<&str> = registry.iter().map(|r| r.id()).collect();
        assert_eq!(iterated, vec!["a.v1", "b.v1", "c.v1"]);
        assert_eq!(format!("{registry:?}"), r#"["a.v1", "b.v1", "c.v1"]"#);
    }

    /// THR-1: the tables the health monitor watches are every table a
    /// definition names, each once and in order, however many definitions
    /// name it.
    #[test]
    fn thr01_registry_tables_are_deduplicated_and_sorted() {
        let registry = Registry::new()
            .with(sql("a.v1", "items").build().expect("valid"))
            .expect("registers")
            .with(sql("b.v1", "app.events").build().expect("valid"))
            .expect("registers")
            .with(sql("c.v1", "items").build().expect("valid"))
            .expect("registers");
        assert_eq!(registry.tables(), vec!["app.events", "items"]);
    }

    /// EX-6: the registry reports overlapped commits as soon as one
    /// definition asks for them, and not while none does.
    #[test]
    fn ex06_any_overlaps_follows_the_definitions() {
        let plain = Registry::new()
            .with(sql("a.v1", "t").build().expect("valid"))
            .expect("registers");
        assert!(!plain.any_overlaps());
        let overlapping = plain
            .with(
                sql("b.v1", "t")
                    .overlap_commits(true)
                    .build()
                    .expect("valid"),
            )
            .expect("registers");
        assert!(overlapping.any_overlaps());
    }

    /// UNDO-2: a journaled definition brings its derived undo, which the
    /// process can claim but which is not a definition of its own: `ids`
    /// and `len` count what the developer registered, `claimable_ids`
    /// adds the undo.
    #[test]
    fn undo02_a_journaled_definition_adds_a_claimable_undo_not_a_definition() {
        let registry = Registry::new()
            .with(sql("j.v1", "items").journal(["n"]).build().expect("valid"))
            .expect("registers");
        assert_eq!(registry.len(), 1);
        assert_eq!(registry.ids(), vec!["j.v1"]);
        assert_eq!(registry.claimable_ids(), vec!["j.v1", "j.v1.undo"]);
        assert_eq!(registry.undo_of("j.v1.undo"), Some("j.v1"));
        assert_eq!(registry.undo_of("j.v1"), None);
    }

    /// FLT-4: dependencies are kept sorted and once each; an invalid ID
    /// among them is refused at registration; an unknown one and a cycle
    /// only by the whole-registry check, since a later definition may
    /// supply the ID.
    #[test]
    fn flt04_dependencies_are_checked_when_the_registry_is_complete() {
        assert_eq!(
            register_one(sql("b.v1", "t").after(["Not An ID"])),
            Err(DefinitionError::InvalidId("Not An ID".into()))
        );
        let mut registry = Registry::new()
            .with(
                sql("c.v1", "t")
                    .after(["b.v1", "a.v1", "b.v1"])
                    .build()
                    .expect("valid"),
            )
            .expect("registers");
        assert!(registry.has_dependencies());
        assert_eq!(registry.dependencies("c.v1"), ["a.v1", "b.v1"]);
        assert_eq!(registry.dependencies("a.v1"), [] as [String; 0]);
        assert_eq!(
            registry.check_dependencies(),
            Err(DefinitionError::UnknownDependency {
                id: "c.v1".into(),
                dependency: "a.v1".into()
            })
        );
        registry
            .register(sql("a.v1", "t").build().expect("valid"))
            .and_then(|r| r.register(sql("b.v1", "t").build().expect("valid")))
            .expect("registers");
        assert_eq!(registry.check_dependencies(), Ok(()));
        assert_eq!(registry.all_dependencies(), ["a.v1", "b.v1"]);
        assert!(!Registry::new().has_dependencies());
    }
}
