//! [`Journal`]: what a journaled repair changes, so that every batch can
//! record the before-image of what it wrote and an undo can take it back
//! (UNDO-1, UNDO-2).

/// The columns a journaled repair writes, and the key columns that find
/// their row again.
///
/// A repair that answers [`crate::Repair::journal`] with one has every
/// committed batch also write, for each row whose journaled columns it
/// changed, the row's key and those columns as they were before and after
/// the batch into the framework's journal, in the batch's own transaction
/// behind the same fence. The undo of such a backfill restores the before
/// values of every journaled row that still holds what the repair wrote.
///
/// Every name is a plain SQL identifier in the case PostgreSQL keeps
/// (checked at registration); the table may be schema-qualified. The key
/// columns must identify one row (a primary or unique key); the journaled
/// columns are the ones the repair's mutation sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub(crate) table: String,
    pub(crate) key_columns: Vec<String>,
    pub(crate) columns: Vec<String>,
    /// Whether the repair's own batch statement writes the journal entry
    /// (as [`crate::SqlRepair`]'s does). Otherwise the engine writes them
    /// around the two-statement form's `mutate`, which needs the keys
    /// before the mutation runs.
    pub(crate) by_statement: bool,
}

impl Journal {
    /// A journal of `columns` of `table`, whose rows `key_columns` find.
    /// For a hand-written repair in the two-statement form
    /// ([`crate::repair::SelectThenMutate`]): the engine reads the
    /// selected rows' journaled columns (locking them) before `mutate` and
    /// again after it, and journals the rows that changed. The key's JSON
    /// rendering ([`crate::Key::to_json`]) names the row: a scalar for one
    /// key column, an array in column order for several.
    pub fn new<T, K, C>(table: T, key_columns: K, columns: C) -> Self
    where
        T: Into<String>,
        K: IntoIterator,
        K::Item: Into<String>,
        C: IntoIterator,
        C::Item: Into<String>,
    {
        Self {
            table: table.into(),
            key_columns: key_columns.into_iter().map(Into::into).collect(),
            columns: columns.into_iter().map(Into::into).collect(),
            by_statement: false,
        }
    }

    /// The table the repair writes.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The columns that identify a row.
    pub fn key_columns(&self) -> &[String] {
        &self.key_columns
    }

    /// The journaled columns: the ones the repair sets.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }
}
