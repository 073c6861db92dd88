//! A person's data across the outbox and the inbox: export and erasure.
//!
//! Rows are found by the `subject` given at enqueue (or inbox claim) time.
//! Rows enqueued without a subject belong to nobody's export.

use serde::Serialize;

use crate::batch::Batch;
use crate::error::Result;
use crate::inbox::{Inbox, InboxEntry};
use crate::outbox::{Outbox, StoredMessage};

/// Everything stored about one subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubjectExport {
    /// The subject.
    pub subject: String,
    /// Its outbox messages, in any state.
    pub outbox: Vec<StoredMessage>,
    /// Its inbox keys.
    pub inbox: Vec<InboxEntry>,
}

/// How many rows an erasure removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Erased {
    /// Outbox messages removed.
    pub outbox: u64,
    /// Inbox keys removed.
    pub inbox: u64,
}

/// Every row of `subject` in `outbox` and `inbox`.
///
/// # Errors
/// [`Error::MalformedRow`](crate::Error::MalformedRow) naming an undecodable row; database errors.
pub async fn export_subject(
    outbox: &Outbox,
    inbox: &Inbox,
    subject: &str,
) -> Result<SubjectExport> {
    Ok(SubjectExport {
        subject: subject.to_owned(),
        outbox: outbox.export_subject(subject).await?,
        inbox: inbox.export_subject(subject).await?,
    })
}

/// Removes every row of `subject` from `outbox` and `inbox` in one atomic
/// batch on the outbox's database (the inbox must live there too): afterwards
/// no row of the subject is left in either. To erase your own rows in the same
/// batch, build it yourself with [`Batch::erase_outbox_subject`] and
/// [`Batch::erase_inbox_subject`].
///
/// # Errors
/// Database errors (a transient one may have committed: erasing again is
/// safe).
pub async fn erase_subject(outbox: &Outbox, inbox: &Inbox, subject: &str) -> Result<Erased> {
    let mut batch = Batch::new(outbox.database().clone());
    let in_outbox = batch.erase_outbox_subject(outbox, subject)?;
    let in_inbox = batch.erase_inbox_subject(inbox, subject)?;
    let committed = batch.commit().await?;
    Ok(Erased {
        outbox: committed.erased(&in_outbox)?,
        inbox: committed.erased(&in_inbox)?,
    })
}
