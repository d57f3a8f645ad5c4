//! The object-safe face the engine works through ([`DynRepair`]): a
//! registered repair behind it, with its keys in their stored encoding and
//! every batch checked on the way (EX-3, EX-4).

use super::check::{check_mutated, check_selection, SelectionError};
use super::{
    Batches, Journal, Repair, RepairError, RowCount, SelectAndMutate, ServerBatch, SourceSet,
    Validation,
};
use crate::key::{Key, KeyError};
use crate::store::{journal_images, journal_images_sql, journal_insert, StoreError};
use async_trait::async_trait;
use diesel_async::AsyncPgConnection;

/// A source set in the stored encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EncodedSource {
    Empty,
    Bounded {
        upper: Vec<u8>,
        upper_json: serde_json::Value,
        rows: Option<i64>,
    },
}

/// What a batch selection produced, after the engine checked it.
#[derive(Debug, Clone)]
pub(crate) struct SelectedBatch {
    /// Number of keys mutated.
    pub keys: usize,
    /// Encoding and rendering of the greatest key, when any key was selected.
    pub last: Option<(Vec<u8>, serde_json::Value)>,
}

/// Errors of the erased batch body.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error(transparent)]
    Repair(#[from] RepairError),
    #[error(transparent)]
    Selection(#[from] SelectionError),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// A failed journal statement, classified like the repair's own statements
/// (a lock timeout is retryable, a missing column blocks): the journal is
/// part of the batch, and the batch rolls back with it (UNDO-1).
fn journal_error(error: StoreError) -> BodyError {
    BodyError::Repair(error.into())
}

/// The object-safe face of a [`Repair`]: keys cross it in their stored
/// encoding, so the engine and the runtime never need the key type.
#[async_trait]
pub(crate) trait DynRepair: Send + Sync {
    fn id(&self) -> &str;
    fn description(&self) -> &str;
    fn overlap_commits(&self) -> bool;
    fn batch_limit(&self) -> u32;
    fn batch_target(&self) -> Option<crate::throttle::sizing::BatchTarget>;
    fn run_window(&self) -> Option<crate::throttle::window::RunWindow>;
    fn tables(&self) -> Vec<String>;
    fn key_type(&self) -> String;
    /// Fail closed (REG-4) when a stored key is not of this definition's type.
    fn check_key(&self, bytes: &[u8]) -> Result<(), KeyError>;
    async fn capture(&self, conn: &mut AsyncPgConnection) -> Result<EncodedSource, BodyError>;
    /// How many partitions the definition allows (PAR-1).
    fn partitions(&self) -> u32;
    /// What the definition journals (UNDO-1), if anything.
    fn journal(&self) -> Option<Journal>;
    /// The batch the definition runs in a loop inside the server (EX-8),
    /// if any; refused for a key type other than `bigint`.
    async fn server_batch(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, BodyError>;
    /// The definition's split points for `bound`, encoded.
    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &[u8],
        partitions: u32,
    ) -> Result<Vec<Vec<u8>>, BodyError>;
    /// One batch's body in the repair's form: its one statement and the
    /// engine's check of the summary, or its selection, the engine's check
    /// and its mutation.
    async fn batch(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<SelectedBatch, BodyError>;
    /// The next batch's body sent ahead, behind the previous batch's commit
    /// message: only a repair's one-statement form can be (the connection
    /// is shared with the commit in flight). `Ok(None)`: the repair is in
    /// the two-statement form and nothing was sent.
    async fn batch_ahead(
        &self,
        conn: &AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<Option<SelectedBatch>, BodyError>;
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&[u8]>,
    ) -> Result<Validation, BodyError>;
    /// The keys that hold the repair back in `(after, bound]`, as JSON in
    /// the key's own type ([`Repair::blocking_keys`]).
    async fn blocking_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<Vec<serde_json::Value>, BodyError>;
    /// The rows a run over `(after, bound]` would select
    /// ([`Repair::remaining_rows`]).
    async fn remaining_rows(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        exact: bool,
    ) -> Result<RowCount, BodyError>;
}

/// A registered repair with the stable ID it had at registration: the
/// ID checked there is the one the engine uses, whatever `Repair::id`
/// would answer later (REG-3).
pub(super) struct Erased<R> {
    pub(super) id: String,
    pub(super) repair: R,
    /// The engine's journal writer for a journaled two-statement repair.
    pub(super) capture: Option<Capture>,
}

/// How the engine journals a two-statement batch (UNDO-1): the texts that
/// read the selected rows' images, locked before `mutate` and plain after
/// it, and how a key's JSON names its row.
pub(super) struct Capture {
    key_columns: Vec<String>,
    before_sql: String,
    after_sql: String,
}

impl Capture {
    pub(super) fn new(journal: &Journal) -> Self {
        let sql =
            |lock| journal_images_sql(&journal.table, &journal.key_columns, &journal.columns, lock);
        Self {
            key_columns: journal.key_columns.clone(),
            before_sql: sql(true),
            after_sql: sql(false),
        }
    }

    /// `[{key column: value, ..}, ..]` for `keys`: one key column takes
    /// the key's JSON as it is, several take its array element by element.
    fn row_keys<K: Key>(&self, keys: &[K]) -> serde_json::Value {
        let rows = keys.iter().map(|key| {
            let json = key.to_json();
            let values: Vec<serde_json::Value> = match (&json, self.key_columns.len()) {
                (_, 1) => vec![json.clone()],
                (serde_json::Value::Array(items), _) => items.clone(),
                _ => vec![json.clone()],
            };
            let object: serde_json::Map<String, serde_json::Value> =
                self.key_columns.iter().cloned().zip(values).collect();
            serde_json::Value::Object(object)
        });
        serde_json::Value::Array(rows.collect())
    }
}

#[async_trait]
impl<R: Repair> DynRepair for Erased<R> {
    fn id(&self) -> &str {
        &self.id
    }
    fn description(&self) -> &str {
        self.repair.description()
    }
    fn overlap_commits(&self) -> bool {
        self.repair.overlap_commits()
    }
    fn batch_limit(&self) -> u32 {
        self.repair.batch_limit()
    }
    fn batch_target(&self) -> Option<crate::throttle::sizing::BatchTarget> {
        self.repair.batch_target()
    }
    fn run_window(&self) -> Option<crate::throttle::window::RunWindow> {
        self.repair.run_window()
    }
    fn tables(&self) -> Vec<String> {
        self.repair.tables()
    }
    fn key_type(&self) -> String {
        R::Key::type_name()
    }
    fn check_key(&self, bytes: &[u8]) -> Result<(), KeyError> {
        R::Key::from_bytes(bytes).map(|_| ())
    }

    async fn capture(&self, conn: &mut AsyncPgConnection) -> Result<EncodedSource, BodyError> {
        Ok(match self.repair.capture_bound(conn).await? {
            SourceSet::Empty => EncodedSource::Empty,
            SourceSet::Bounded { upper, rows } => EncodedSource::Bounded {
                upper: upper.to_bytes(),
                upper_json: upper.to_json(),
                rows,
            },
        })
    }

    fn partitions(&self) -> u32 {
        self.repair.partitions()
    }

    async fn server_batch(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, BodyError> {
        let batch = self.repair.server_batch(conn).await?;
        if batch.is_some() && R::Key::type_name() != i64::type_name() {
            // The procedure encodes its checkpoints as `bigint` keys; any
            // other key would be stored in the wrong encoding (REG-4).
            return Err(BodyError::Repair(RepairError::Fatal(format!(
                "a loop inside the server needs a bigint key, the repair's key is {}",
                R::Key::type_name()
            ))));
        }
        Ok(batch)
    }

    fn journal(&self) -> Option<Journal> {
        self.repair.journal()
    }

    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &[u8],
        partitions: u32,
    ) -> Result<Vec<Vec<u8>>, BodyError> {
        let bound = R::Key::from_bytes(bound)?;
        let points = self.repair.split_points(conn, &bound, partitions).await?;
        Ok(points.iter().map(Key::to_bytes).collect())
    }

    async fn batch(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<SelectedBatch, BodyError> {
        let after = after.map(R::Key::from_bytes).transpose()?;
        let bound = R::Key::from_bytes(bound)?;
        let form = match self.repair.batches() {
            Batches::OneStatement(form) => {
                return self
                    .one_statement(form, &*conn, after.as_ref(), &bound, limit)
                    .await;
            }
            Batches::TwoStatements(form) => form,
        };
        let limit = nonzero(limit)?;
        let keys = form
            .select_keys(conn, after.as_ref(), &bound, limit)
            .await?;
        // EX-3/EX-4 enforced here, on the production path: a repair cannot
        // widen a batch or step outside (checkpoint, bound].
        check_selection(&keys, after.as_ref(), &bound, limit)?;
        if keys.is_empty() {
            return Ok(SelectedBatch {
                keys: 0,
                last: None,
            });
        }
        match &self.capture {
            None => form.mutate(conn, &keys).await?,
            Some(capture) => self.mutate_journaled(capture, form, conn, &keys).await?,
        }
        let last = keys.last().map(|k| (k.to_bytes(), k.to_json()));
        Ok(SelectedBatch {
            keys: keys.len(),
            last,
        })
    }

    async fn batch_ahead(
        &self,
        conn: &AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<Option<SelectedBatch>, BodyError> {
        // The two-statement form needs the selected keys back before it can
        // mutate, so nothing of it can go ahead of the commit.
        let Batches::OneStatement(form) = self.repair.batches() else {
            return Ok(None);
        };
        let after = after.map(R::Key::from_bytes).transpose()?;
        let bound = R::Key::from_bytes(bound)?;
        self.one_statement(form, conn, after.as_ref(), &bound, limit)
            .await
            .map(Some)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&[u8]>,
    ) -> Result<Validation, BodyError> {
        let bound = bound.map(R::Key::from_bytes).transpose()?;
        Ok(self.repair.validate(conn, bound.as_ref()).await?)
    }

    async fn blocking_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        limit: u32,
    ) -> Result<Vec<serde_json::Value>, BodyError> {
        let after = after.map(R::Key::from_bytes).transpose()?;
        let bound = R::Key::from_bytes(bound)?;
        let keys = self
            .repair
            .blocking_keys(conn, after.as_ref(), &bound, limit)
            .await?;
        Ok(keys
            .iter()
            .take(limit as usize)
            .map(crate::key::Key::to_json)
            .collect())
    }

    async fn remaining_rows(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&[u8]>,
        bound: &[u8],
        exact: bool,
    ) -> Result<RowCount, BodyError> {
        let after = after.map(R::Key::from_bytes).transpose()?;
        let bound = R::Key::from_bytes(bound)?;
        Ok(self
            .repair
            .remaining_rows(conn, after.as_ref(), &bound, exact)
            .await?)
    }
}

/// The batch limit of this batch, never 0 (EX-4).
fn nonzero(limit: u32) -> Result<u32, SelectionError> {
    match limit {
        0 => Err(SelectionError::ZeroLimit),
        limit => Ok(limit),
    }
}

impl<R: Repair> Erased<R> {
    /// `mutate` with the journal written around it (UNDO-1), on the
    /// batch's transaction: the selected rows' images read FOR UPDATE
    /// before, read again after, and one journal entry of those that changed.
    async fn mutate_journaled(
        &self,
        capture: &Capture,
        form: &dyn super::SelectThenMutate<R::Key>,
        conn: &mut AsyncPgConnection,
        keys: &[R::Key],
    ) -> Result<(), BodyError> {
        let row_keys = capture.row_keys(keys);
        let before = journal_images(conn, &capture.before_sql, &row_keys)
            .await
            .map_err(journal_error)?;
        form.mutate(conn, keys).await?;
        let after: std::collections::HashMap<String, serde_json::Value> =
            journal_images(conn, &capture.after_sql, &row_keys)
                .await
                .map_err(journal_error)?
                .into_iter()
                .map(|(key, image)| (key.to_string(), image))
                .collect();
        // A row the mutation deleted has no after-image: nothing to restore.
        let (mut keys, mut befores, mut afters) = (Vec::new(), Vec::new(), Vec::new());
        for (key, image) in before {
            if let Some(now) = after.get(&key.to_string()) {
                befores.push(image);
                afters.push(now.clone());
                keys.push(key);
            }
        }
        journal_insert(conn, &self.id, &keys, &befores, &afters)
            .await
            .map_err(journal_error)?;
        Ok(())
    }

    /// One batch of the one-statement form, its summary checked.
    async fn one_statement(
        &self,
        form: &dyn SelectAndMutate<R::Key>,
        mut conn: &AsyncPgConnection,
        after: Option<&R::Key>,
        bound: &R::Key,
        limit: u32,
    ) -> Result<SelectedBatch, BodyError> {
        let limit = nonzero(limit)?;
        let mutated = form
            .select_and_mutate(&mut conn, after, bound, limit)
            .await?;
        // EX-3/EX-4 on the summary: the mutation already ran, so a broken
        // summary rolls the whole batch back.
        Ok(match check_mutated(&mutated, after, bound, limit)? {
            None => SelectedBatch {
                keys: 0,
                last: None,
            },
            Some((last, count)) => SelectedBatch {
                keys: count as usize,
                last: Some((last.to_bytes(), last.to_json())),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::{SqlRepair, SqlRepairBuilder};
    use crate::throttle::sizing::BatchTarget;
    use std::time::Duration;

    fn events() -> SqlRepairBuilder {
        SqlRepair::new("events.fix.v1", "events")
            .key("id")
            .set("n = 0")
            .validate_where("n <> 0")
    }

    /// The repair behind the engine's face, registered under an ID other
    /// than the one the repair answers, so the two cannot be confused.
    fn erased(repair: SqlRepair) -> Erased<SqlRepair> {
        Erased {
            id: "registered.v1".into(),
            repair,
            capture: None,
        }
    }

    /// REG-3: the engine's face of a repair answers with the ID checked at
    /// registration, and passes every other answer through from the repair
    /// unchanged: the engine reads the batch size, target, overlap, tables
    /// and partitions only through it.
    #[test]
    fn reg03_erased_repair_forwards_the_repairs_answers() {
        let plain = erased(events().build().expect("valid"));
        assert_eq!(plain.id(), "registered.v1");
        assert_eq!(plain.description(), "SQL repair of events, by id");
        assert!(!plain.overlap_commits());
        assert_eq!(plain.batch_limit(), 1000);
        assert_eq!(plain.batch_target(), None);
        assert_eq!(plain.tables(), vec!["events".to_string()]);
        assert_eq!(plain.partitions(), 1);

        let target = BatchTarget {
            duration: Duration::from_millis(80),
            min: 5,
            max: 500,
        };
        let tuned = erased(
            events()
                .description("reset n")
                .batch_size(250)
                .target_batch(target.duration, target.min, target.max)
                .overlap_commits(true)
                .partitions(4)
                .build()
                .expect("valid"),
        );
        assert_eq!(tuned.description(), "reset n");
        assert!(tuned.overlap_commits());
        assert_eq!(tuned.batch_limit(), 250);
        assert_eq!(tuned.batch_target(), Some(target));
        assert_eq!(tuned.partitions(), 4);
    }

    /// REG-4: the face names the repair's key type and refuses a stored key
    /// of another type or a malformed one, and takes one of its own.
    #[test]
    fn reg04_erased_repair_checks_stored_keys_against_its_key_type() {
        let plain = erased(events().build().expect("valid"));
        assert_eq!(plain.key_type(), i64::type_name());
        assert!(plain.check_key(&7i64.to_bytes()).is_ok());
        assert!(plain.check_key(&"7".to_string().to_bytes()).is_err());
        assert!(plain.check_key(&[]).is_err());
    }

    /// EX-4: a batch limit of 0 cannot make progress and is refused before
    /// any statement runs; any other limit passes through unchanged.
    #[test]
    fn ex04_a_zero_batch_limit_is_refused() {
        assert_eq!(nonzero(0), Err(SelectionError::ZeroLimit));
        assert_eq!(nonzero(1), Ok(1));
        assert_eq!(nonzero(7), Ok(7));
        assert_eq!(nonzero(u32::MAX), Ok(u32::MAX));
    }
}
