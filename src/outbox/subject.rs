//! A subject's rows in the outbox: export and erasure.

use sea_query::{Expr, ExprTrait, Func, Order, Query};

use super::records::{COLUMNS, StoredMessage};
use super::{Outbox, col, state};
use crate::database::Statement;
use crate::erasure::as_strs;
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
    /// [`Error::MalformedRow`](crate::error::Error::MalformedRow) naming an
    /// undecodable row; database errors.
    pub async fn export_subject(&self, subject: &str) -> Result<Vec<StoredMessage>> {
        let statement = {
            let mut select = Query::select();
            select
                .columns(COLUMNS)
                .from(self.table_name())
                .and_where(crate::sql::one_of(
                    col::SUBJECT,
                    &as_strs(&self.subject_forms(subject)),
                ))
                .order_by(col::CREATED_AT, Order::Asc)
                .order_by(col::ID, Order::Asc);
            self.render(&select)?
        };
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
        let table = self.table_name();
        let now = self.now().as_unix_millis();
        // The subject's rows leased right now, with an ordering key.
        let in_flight = |query: &mut sea_query::SelectStatement| {
            query
                .and_where(crate::sql::one_of(("erased", col::SUBJECT), &forms))
                .and_where(Expr::col(("erased", col::STATE)).eq(state::READY))
                .and_where(Expr::col(("erased", col::LEASE_TOKEN)).is_not_null())
                .and_where(Expr::col(("erased", col::DUE_AT)).gt(now))
                .and_where(Expr::col(("erased", col::ORDERING_KEY)).is_not_null());
        };
        let mut lease_end = Query::select();
        lease_end
            .expr(Expr::col(("erased", col::DUE_AT)).max())
            .from_as(table.clone(), "erased")
            .and_where(
                Expr::col(("erased", col::ORDERING_KEY)).equals((table.clone(), col::ORDERING_KEY)),
            );
        in_flight(&mut lease_end);
        let mut keys = Query::select();
        keys.column(("erased", col::ORDERING_KEY))
            .from_as(table.clone(), "erased");
        in_flight(&mut keys);
        let mut hold = Query::update();
        hold.table(table.clone())
            .value(
                col::DUE_AT,
                Func::greatest([Expr::col((table.clone(), col::DUE_AT)), lease_end.into()]),
            )
            .and_where(Expr::col(col::STATE).eq(state::WAITING))
            .and_where(Expr::col(col::ORDERING_KEY).in_subquery(keys));

        // Counted by the ids it returns: D1 counts a trigger's deletes (a
        // sealed message's data key) among a statement's changes.
        let mut delete = Query::delete();
        delete
            .from_table(table)
            .and_where(crate::sql::one_of(col::SUBJECT, &forms))
            .returning_col(col::ID);
        // The events it published to endpoints, kept for their recovery.
        let mut events = Query::delete();
        events
            .from_table(crate::sql::endpoints::events_table(self.table()))
            .and_where(crate::sql::one_of(
                crate::sql::endpoints::event_col::SUBJECT,
                &forms,
            ));
        Ok(vec![
            self.tombstones().tombstone(raw_subject, self.now())?,
            self.render(&hold)?,
            self.render(&delete)?,
            self.promote_all_heads()?,
            self.render(&events)?,
            crate::sql::attempts::erase(self.table(), self.dialect(), &forms)?,
            // Last: what makes every copy of its sealed payloads unreadable.
            crate::sql::keys::forget_subject(self.table(), self.dialect(), &stored)?,
        ])
    }
}
