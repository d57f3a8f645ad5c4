//! Schema-compatibility check for `serve --migrate off` (docs/CONTRACT.md section 8):
//! with migrations off, a missing table or column must fail startup clearly,
//! naming what is missing, because a backfill never changes schema.

use diesel::sql_types::{Array, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use std::fmt;

/// The columns of `events` the application and its repairs use, with their
/// `information_schema.columns.data_type`.
const EVENTS_COLUMNS: &[(&str, &str)] = &[
    ("id", "bigint"),
    ("created_at", "timestamp with time zone"),
    ("author", "text"),
    ("kind", "integer"),
    ("content", "text"),
    ("tags", "jsonb"),
    ("author_norm", "text"),
    ("content_len", "integer"),
    ("tag_count", "integer"),
    ("touch_count", "integer"),
];

/// The framework's own tables (created by [`backfill::__private::store::MIGRATIONS`]).
const FRAMEWORK_TABLES: &[&str] = &["backfill", "backfill_audit", "backfill_request"];

/// One incompatibility between the database and what this build needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaItem {
    /// A table does not exist (in the current schema).
    MissingTable(String),
    /// A column does not exist.
    MissingColumn { table: String, column: String },
    /// A column exists with a different type.
    WrongType {
        table: String,
        column: String,
        expected: String,
        found: String,
    },
}

impl fmt::Display for SchemaItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaItem::MissingTable(table) => write!(f, "missing table {table}"),
            SchemaItem::MissingColumn { table, column } => {
                write!(f, "missing column {table}.{column}")
            }
            SchemaItem::WrongType {
                table,
                column,
                expected,
                found,
            } => write!(
                f,
                "column {table}.{column} has type {found}, expected {expected}"
            ),
        }
    }
}

/// Why the schema check did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema lacks what this build needs; every item is named.
    #[error("schema is not compatible: {}", join(.0))]
    Incompatible(Vec<SchemaItem>),
    /// The catalog could not be read (redacted description).
    #[error("could not read the schema catalog: {0}")]
    Database(String),
}

impl SchemaError {
    /// The incompatibilities found (empty for [`SchemaError::Database`]).
    pub fn items(&self) -> &[SchemaItem] {
        match self {
            SchemaError::Incompatible(items) => items,
            SchemaError::Database(_) => &[],
        }
    }
}

fn join(items: &[SchemaItem]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(QueryableByName)]
struct ColumnRow {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    column_name: String,
    #[diesel(sql_type = Text)]
    data_type: String,
}

/// Verify through `information_schema` that the example's `events` table
/// has every column the application and its repairs need (with the right
/// types) and that the framework's tables exist. Read-only; it never
/// creates or alters anything. Names every missing item at once, so one
/// failed startup tells the operator everything.
pub async fn check_schema(conn: &mut AsyncPgConnection) -> Result<(), SchemaError> {
    let mut tables: Vec<&str> = FRAMEWORK_TABLES.to_vec();
    tables.push("events");
    // current_schema(): the tables are created unqualified, so they live in
    // the first schema of the search_path, which is where queries find them.
    let rows: Vec<ColumnRow> = diesel::sql_query(
        "SELECT table_name::text AS table_name, column_name::text AS column_name, \
                data_type::text AS data_type \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = ANY($1)",
    )
    .bind::<Array<Text>, _>(&tables)
    .load(conn)
    .await
    .map_err(|e| SchemaError::Database(backfill::__private::store::describe(&e)))?;

    let mut missing = Vec::new();
    for table in FRAMEWORK_TABLES {
        if !rows.iter().any(|r| r.table_name == *table) {
            missing.push(SchemaItem::MissingTable((*table).to_string()));
        }
    }
    if !rows.iter().any(|r| r.table_name == "events") {
        missing.push(SchemaItem::MissingTable("events".into()));
    } else {
        for (column, expected) in EVENTS_COLUMNS {
            match rows
                .iter()
                .find(|r| r.table_name == "events" && r.column_name == *column)
            {
                None => missing.push(SchemaItem::MissingColumn {
                    table: "events".into(),
                    column: (*column).to_string(),
                }),
                Some(r) if r.data_type != *expected => missing.push(SchemaItem::WrongType {
                    table: "events".into(),
                    column: (*column).to_string(),
                    expected: (*expected).to_string(),
                    found: r.data_type.clone(),
                }),
                Some(_) => {}
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(SchemaError::Incompatible(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfg05_errors_name_what_is_missing() {
        let e = SchemaError::Incompatible(vec![
            SchemaItem::MissingColumn {
                table: "events".into(),
                column: "author_norm".into(),
            },
            SchemaItem::MissingTable("backfill".into()),
        ]);
        assert_eq!(
            e.to_string(),
            "schema is not compatible: missing column events.author_norm; missing table backfill"
        );
    }
}
