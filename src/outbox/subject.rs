//! A subject's rows in the outbox: export and erasure.

use sea_query::{Expr, ExprTrait, Order, Query};

use super::records::{COLUMNS, StoredMessage, decode};
use super::{Outbox, col};
use crate::database::Statement;
use crate::error::Result;

impl Outbox {
    /// Every message of `subject`, in any state (pending, leased, waiting,
    /// dead), oldest first.
    ///
    /// The outbox holds only undelivered and dead messages, so `subject`
    /// has no index: this reads the table once, which keeps the enqueue hot
    /// path free of index writes.
    ///
    /// # Errors
    /// [`Error::MalformedRow`](crate::Error::MalformedRow) naming an
    /// undecodable row; database errors.
    pub async fn export_subject(&self, subject: &str) -> Result<Vec<StoredMessage>> {
        let mut select = Query::select();
        select
            .columns(COLUMNS)
            .from(self.table_name())
            .and_where(Expr::col(col::SUBJECT).eq(subject))
            .order_by(col::CREATED_AT, Order::Asc)
            .order_by(col::ID, Order::Asc);
        let rows = self
            .inner
            .db
            .query(&Statement::from_query(&select)?)
            .await?;
        let now = self.now();
        rows.iter()
            .map(|row| decode(row, self.table().as_str(), now))
            .collect()
    }

    /// Deletes every message of `subject`; returns how many.
    ///
    /// # Errors
    /// Database errors; then nothing was deleted.
    pub async fn erase_subject(&self, subject: &str) -> Result<u64> {
        let outcomes = self
            .inner
            .db
            .batch_atomic(&self.erase_subject_statements(subject)?)
            .await?;
        Ok(outcomes.first().map_or(0, |outcome| outcome.rows_affected))
    }

    /// The statements of [`erase_subject`](Outbox::erase_subject): the
    /// delete first, then the release of rows its ordering keys held back.
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub fn erase_subject_statements(&self, subject: &str) -> Result<Vec<Statement>> {
        let mut delete = Query::delete();
        delete
            .from_table(self.table_name())
            .and_where(Expr::col(col::SUBJECT).eq(subject));
        Ok(vec![
            Statement::from_query(&delete)?,
            self.promote_all_heads()?,
        ])
    }
}
