//! A person's data across the outbox and the inbox: export and erasure.
//!
//! Rows are found by the `subject` given at enqueue (or inbox claim) time.
//! Rows enqueued without a subject belong to nobody's export.
//!
//! # After an erasure
//! Once an erasure of a subject commits, nothing the library writes carries
//! that subject for [`ERASURE_MEMORY`] (30 days): a batch (or
//! [`Inbox::process_once`], [`Outbox::enqueue_alone`], a
//! `QueueConsumer`'s effect) that would
//! write an outbox message or an inbox key carrying it fails whole with
//! [`Error::SubjectErased`], so work still in
//! flight (an event in a Queue, a handler that read the subject before the
//! erasure) brings nothing of it back. Every erasure records a tombstone
//! for this in the database's [`ERASED_SUBJECTS`] table: the subject key and
//! the erasure's time, nothing else; drains (and [`Inbox::purge`]) forget it
//! after [`ERASURE_MEMORY`]. Your own rows are yours to guard (a batch
//! carrying a message or key of the subject is refused whole, your rows
//! with it).
//!
//! Limits: a delivery already under way when the erasure commits cannot be
//! recalled (the receiver may still get it); rows written without a subject
//! are not guarded; work arriving after [`ERASURE_MEMORY`] is written again;
//! subject keys should be opaque ids, since tombstones keep them.

use serde::Serialize;

pub use crate::erasure::{ERASED_SUBJECTS, ERASURE_MEMORY};

use crate::batch::Batch;
use crate::endpoint::PublishedEvent;
use crate::error::{Error, Result};
use crate::inbox::{Inbox, InboxEntry};
use crate::outbox::{LoggedAttempt, Outbox, StoredMessage};
use crate::time::Timestamp;

/// Everything stored about one subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubjectExport {
    /// The subject.
    pub subject: String,
    /// Its outbox messages, in any state.
    pub outbox: Vec<StoredMessage>,
    /// Its inbox keys.
    pub inbox: Vec<InboxEntry>,
    /// The events of it published to endpoints, while they are kept.
    pub events: Vec<PublishedEvent>,
    /// The attempt log of its messages.
    pub attempts: Vec<LoggedAttempt>,
    /// When it was last erased, while its tombstone is kept.
    pub erased_at: Option<Timestamp>,
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
/// [`Error::MalformedRow`] naming an undecodable row; database errors.
pub async fn export_subject(
    outbox: &Outbox,
    inbox: &Inbox,
    subject: &str,
) -> Result<SubjectExport> {
    Ok(SubjectExport {
        subject: subject.to_owned(),
        outbox: outbox.export_subject(subject).await?,
        inbox: inbox.export_subject(subject).await?,
        events: crate::endpoint::events_of_subject(outbox, subject).await?,
        attempts: outbox
            .logged_attempts(outbox.attempts_of_subject_statement(subject)?)
            .await?,
        erased_at: erased_at(outbox, subject).await?,
    })
}

/// When `subject` was last erased from `outbox`'s database, while its
/// tombstone is kept.
pub(crate) async fn erased_at(outbox: &Outbox, subject: &str) -> Result<Option<Timestamp>> {
    let tombstones = outbox.tombstones();
    let rows = outbox.database().query(&tombstones.read(subject)?).await?;
    rows.first()
        .map(|row| row.get("erased_at"))
        .transpose()
        .map_err(|error: Error| error.in_row(tombstones.table().as_str(), None))
}

/// Removes every row of `subject` from `outbox` and `inbox` in one atomic
/// batch on the outbox's database (the inbox must live there too), and
/// records its tombstone: afterwards no row of the subject is left in
/// either, and none is written again (see [After an erasure](self#after-an-erasure)).
/// To erase your own rows in the same
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
