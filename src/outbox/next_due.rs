//! The query that keeps a Durable Object's alarm at an outbox's next due
//! time.

use sea_query::{Expr, ExprTrait, Func, Query};

use super::{Outbox, col, state};
use crate::database::Dialect;
use crate::database::durable_object::NextDue;
use crate::error::Result;
use crate::identifier::TableName;

impl Outbox {
    /// What keeps a Durable Object's alarm at the next due time of the
    /// outbox in `table`, for
    /// [`DurableObjectDatabase::wake_for`](crate::DurableObjectDatabase::wake_for).
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) for a bad table
    /// name.
    pub fn next_due(table: &str) -> Result<NextDue> {
        let table = TableName::new(table)?;
        let mut select = Query::select();
        select
            .expr_as(Func::min(Expr::col(col::DUE_AT)), "due_at")
            .from(table.as_str().to_owned())
            .and_where(Expr::col(col::STATE).eq(state::READY))
            .and_where(crate::sql::paused::topic_not_paused(&table));
        Ok(NextDue::new(
            table.as_str(),
            Dialect::Sqlite.render(&select)?,
        ))
    }
}
