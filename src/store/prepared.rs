//! Prepared-statement caching for raw SQL.
//!
//! diesel marks every `sql_query` as unsafe to cache, so diesel-async
//! prepares it again on every execution: a Parse/Describe round trip before
//! the Bind/Execute one. For statements whose text is fixed (the parameters
//! are binds, never spliced in) that second round trip buys nothing.
//! [`cached`] wraps such a query so the connection's statement cache keeps
//! it, keyed by its SQL text and bind types: one round trip per execution.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::QueryResult;

/// A raw SQL query (`diesel::sql_query(..).bind(..)..`) whose prepared
/// statement the connection caches. Build it with [`cached`].
#[derive(Debug, Clone)]
pub struct Cached<Q>(Q);

/// Cache the prepared statement of `query` on the connection.
///
/// Only for SQL text that does not vary with data: the cache is keyed by
/// the text, so splicing values into it would grow the cache without bound
/// (bind them instead). Table names chosen once per process are fine.
pub fn cached<Q>(query: Q) -> Cached<Q> {
    Cached(query)
}

impl<Q: QueryFragment<Pg>> QueryFragment<Pg> for Cached<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    // The inner `sql_query` declares itself uncacheable only because diesel
    // cannot know whether its text is fixed; the caller of `cached` vouches
    // that it is.
    fn is_safe_to_cache_prepared(&self, _backend: &Pg) -> QueryResult<bool> {
        Ok(true)
    }
}

// No static query ID: the statement cache then keys by SQL text and bind
// types, which is exactly the identity of a raw statement.
impl<Q> QueryId for Cached<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Cached<Q> {
    type SqlType = Q::SqlType;
}
