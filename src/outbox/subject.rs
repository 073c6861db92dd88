//! A subject's rows in the outbox: export and erasure.

use super::Outbox;
use super::records::StoredMessage;
use crate::database::Statement;
use crate::erasure::as_strs;
use crate::error::Result;
use crate::sql::dead_letters;

impl Outbox {
    /// Every message of `subject`, in any state (pending, leased, waiting,
    /// dead), oldest first.
    ///
    /// The outbox holds only undelivered and dead messages, so `subject`
    /// has no index: this reads the table once, which keeps the enqueue hot
    /// path free of index writes.
    ///
    /// # Errors
    /// [`Error::MalformedRow`](crate::error::Error::MalformedRow) naming an
    /// undecodable row; database errors.
    pub async fn export_subject(&self, subject: &str) -> Result<Vec<StoredMessage>> {
        let statement = dead_letters::export_subject(
            self.table(),
            self.dialect(),
            &as_strs(&self.subject_forms(subject)),
        )?;
        let mut messages = self.stored_messages(statement).await?;
        // Named as asked, also where the table holds its keyed hash.
        for message in &mut messages {
            message.subject = Some(subject.to_owned());
        }
        Ok(messages)
    }

    /// Deletes every message of `subject` and records its tombstone (see
    /// [`subject`](crate::subject)); returns how many messages.
    ///
    /// A message being delivered right now cannot be recalled: its delivery
    /// may still arrive. Its row is gone, and the next message of its
    /// ordering key stays held back until the erased lease would have ended,
    /// so two messages of one key are never in flight together.
    ///
    /// # Errors
    /// Database errors.
    pub async fn erase_subject(&self, subject: &str) -> Result<u64> {
        let outcomes = self
            .inner
            .db
            .batch_atomic(&self.erase_subject_statements(subject)?)
            .await?;
        Ok(outcomes
            .get(Self::ERASE_DELETE)
            .map_or(0, |outcome| outcome.rows.len() as u64))
    }

    /// Where the delete stands in
    /// [`erase_subject_statements`](Outbox::erase_subject_statements): it
    /// returns the id of each message erased (count its rows: its
    /// `rows_affected` may count a trigger's deletes too, as D1 does).
    pub const ERASE_DELETE: usize = 2;

    /// The statements of [`erase_subject`](Outbox::erase_subject), in order:
    /// record the subject's tombstone, hold back the successors of its
    /// in-flight ordered messages, delete, release the rows its ordering
    /// keys held back, then delete the events of the subject published to
    /// [endpoints](crate::endpoint), its attempt log and the data keys its
    /// sealed payloads were sealed under (see [`seal`](crate::seal)).
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub fn erase_subject_statements(&self, raw_subject: &str) -> Result<Vec<Statement>> {
        let stored = self.stored_subject(raw_subject);
        let forms = self.subject_forms(raw_subject);
        let forms = as_strs(&forms);
        Ok(vec![
            self.tombstones().tombstone(raw_subject, self.now())?,
            dead_letters::hold_erased_successors(
                self.table(),
                self.dialect(),
                &forms,
                self.now().as_unix_millis(),
            )?,
            dead_letters::erase_subject(self.table(), self.dialect(), &forms)?,
            self.promote_all_heads()?,
            crate::sql::endpoints::erase_events(self.table(), self.dialect(), &forms)?,
            crate::sql::attempts::erase(self.table(), self.dialect(), &forms)?,
            // Last: what makes every copy of its sealed payloads unreadable.
            crate::sql::keys::forget_subject(self.table(), self.dialect(), &stored)?,
        ])
    }
}
