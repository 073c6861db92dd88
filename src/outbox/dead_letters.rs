//! Dead letters: listing, replaying and purging parked messages.

use sea_query::{Expr, ExprTrait, Order, Query};

use super::records::{COLUMNS, StoredMessage};
use super::{Outbox, col, state};
use crate::database::Statement;
use crate::error::{Error, Result};
use crate::sql;
use crate::sql::claim_floor;
use crate::time::Timestamp;

impl Outbox {
    /// Up to `limit` dead messages in the order they died, starting after
    /// `after` (the last message of the previous page), with their last
    /// error.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `1 <= limit <= MAX_CLAIM`;
    /// [`Error::MalformedRow`] naming an undecodable row; database errors.
    pub async fn list_dead(
        &self,
        limit: u32,
        after: Option<&StoredMessage>,
    ) -> Result<Vec<StoredMessage>> {
        if !(1..=Self::MAX_CLAIM).contains(&limit) {
            return Err(Error::invalid(
                "page size",
                format!("{limit} is outside 1 ..= {}", Self::MAX_CLAIM),
            ));
        }
        // Built apart from the await: sea-query's builders are not `Send`.
        let statement = {
            let mut select = Query::select();
            select
                .columns(COLUMNS)
                .from(self.table_name())
                .and_where(sql::state_is(state::DEAD))
                .order_by(col::DUE_AT, Order::Asc)
                .order_by(col::ID, Order::Asc)
                .limit(u64::from(limit));
            if let Some(after) = after {
                let died = after.due_at.as_unix_millis();
                select.and_where(
                    Expr::col(col::DUE_AT).gt(died).or(Expr::col(col::DUE_AT)
                        .eq(died)
                        .and(Expr::col(col::ID).gt(after.id.as_str()))),
                );
            }
            self.render(&select)?
        };
        self.stored_messages(statement).await
    }

    /// Makes the dead message `id` deliverable again now, with a fresh count
    /// of attempts.
    ///
    /// # Errors
    /// [`Error::NotFound`] if no dead message has that id; database errors.
    pub async fn replay(&self, id: &str) -> Result<()> {
        let replayed = self
            .inner
            .db
            .execute(&self.replay_statement(Some(id))?)
            .await?;
        if replayed == 0 {
            return Err(Error::NotFound {
                what: "dead message",
                id: id.to_owned(),
            });
        }
        Ok(())
    }

    /// Makes every dead message deliverable again; returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub async fn replay_all(&self) -> Result<u64> {
        self.inner.db.execute(&self.replay_statement(None)?).await
    }

    /// Deletes dead messages that died before `older_than`; returns how
    /// many. Rows their ordering keys held back become ready.
    ///
    /// # Errors
    /// Database errors (a transient one may have committed: purging again is
    /// safe).
    pub async fn purge_dead(&self, older_than: Timestamp) -> Result<u64> {
        let statements = {
            let mut delete = Query::delete();
            delete
                .from_table(self.table_name())
                .and_where(sql::state_is(state::DEAD))
                .and_where(Expr::col(col::DUE_AT).lt(older_than.as_unix_millis()))
                // Counted by its rows: D1 counts a trigger's deletes among
                // a statement's changes.
                .returning_col(col::ID);
            [self.render(&delete)?, self.promote_all_heads()?]
        };
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes
            .first()
            .map_or(0, |outcome| outcome.rows.len() as u64))
    }

    /// Every stored message, oldest first (reads the whole table: for
    /// tests).
    #[cfg(all(feature = "testing", feature = "sqlite", not(target_arch = "wasm32")))]
    pub(crate) async fn every_message(&self) -> Result<Vec<StoredMessage>> {
        let statement = {
            let mut select = Query::select();
            select
                .columns(COLUMNS)
                .from(self.table_name())
                .order_by(col::CREATED_AT, Order::Asc)
                .order_by(col::ID, Order::Asc);
            self.render(&select)?
        };
        self.stored_messages(statement).await
    }

    pub(crate) fn replay_statement(&self, id: Option<&str>) -> Result<Statement> {
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::STATE, state::READY)
            .value(col::DUE_AT, self.now().as_unix_millis())
            .value(col::ATTEMPTS, 0)
            .value(col::DEFERRALS, 0)
            .value(col::LEASE_TOKEN, Option::<String>::None)
            .and_where(sql::state_is(state::DEAD));
        if let Some(id) = id {
            update.and_where(Expr::col(col::ID).eq(id));
        }
        claim_floor::mark(
            self.dialect(),
            self.table(),
            &mut update,
            self.now().as_unix_millis().into(),
        );
        self.render(&update)
    }
}
