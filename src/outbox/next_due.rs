//! The query that keeps a Durable Object's alarm at an outbox's next due
//! time.

use super::Outbox;
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
        Ok(NextDue::new(
            table.as_str(),
            crate::sql::stats::next_due(&table)?,
        ))
    }
}
