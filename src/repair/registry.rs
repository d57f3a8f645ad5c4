//! The [`Registry`] of a process's local definitions.

use super::erased::{DynRepair, Erased};
use super::{validate_id, DefinitionError, Repair};
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
        let erased = Erased {
            id: id.clone(),
            repair,
        };
        self.repairs.insert(id, Arc::new(erased));
        Ok(self)
    }

    /// Builder form of [`Registry::register`].
    pub fn with<R: Repair>(mut self, repair: R) -> Result<Self, DefinitionError> {
        self.register(repair)?;
        Ok(self)
    }

    /// The stable IDs this process can work on.
    pub fn ids(&self) -> Vec<String> {
        self.repairs.keys().cloned().collect()
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

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.repairs.len()
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

    /// Key type name of a definition.
    pub fn key_type(&self, id: &str) -> Option<String> {
        self.repairs.get(id).map(|r| r.key_type())
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Arc<dyn DynRepair>> {
        self.repairs.get(id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn DynRepair>> {
        self.repairs.values()
    }
}
