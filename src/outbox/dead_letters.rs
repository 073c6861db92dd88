//! Dead letters: listing, replaying and purging parked messages.

use super::Outbox;
use super::records::StoredMessage;
use crate::database::Statement;
use crate::error::{Error, Result};
use crate::sql::dead_letters;
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
        let statement = dead_letters::list_dead(
            self.table(),
            self.dialect(),
            limit,
            after.map(|after| (after.due_at.as_unix_millis(), after.id.as_str())),
        )?;
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
        let statements = [
            dead_letters::purge_dead(self.table(), self.dialect(), older_than.as_unix_millis())?,
            self.promote_all_heads()?,
        ];
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes
            .first()
            .map_or(0, |outcome| outcome.rows.len() as u64))
    }

    /// Every stored message, oldest first (reads the whole table: for
    /// tests).
    #[cfg(all(feature = "testing", feature = "sqlite", not(target_arch = "wasm32")))]
    pub(crate) async fn every_message(&self) -> Result<Vec<StoredMessage>> {
        let statement = dead_letters::every_message(self.table(), self.dialect())?;
        self.stored_messages(statement).await
    }

    pub(crate) fn replay_statement(&self, id: Option<&str>) -> Result<Statement> {
        dead_letters::replay(
            self.table(),
            self.dialect(),
            self.now().as_unix_millis(),
            id,
        )
    }
}
