//! A person's data across the outbox and the inbox: export and erasure.
//!
//! Rows are found by the `subject` given at enqueue (or inbox claim) time.
//! Rows enqueued without a subject belong to nobody's export.

use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
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
    })
}

/// Removes every row of `subject` from `outbox` and `inbox` in one atomic
/// batch: afterwards no row of the subject is left in either.
///
/// # Errors
/// [`Error::InvalidInput`] if the two live in different databases (erase
/// each on its own then); database errors (a transient one may have
/// committed: erasing again is safe).
pub async fn erase_subject(outbox: &Outbox, inbox: &Inbox, subject: &str) -> Result<Erased> {
    if !std::ptr::addr_eq(
        Arc::as_ptr(outbox.database()),
        Arc::as_ptr(inbox.database()),
    ) {
        return Err(Error::invalid(
            "inbox",
            "it lives in another database than the outbox; erase each on its own",
        ));
    }
    let mut statements = outbox.erase_subject_statements(subject)?;
    let outbox_statements = statements.len();
    statements.push(inbox.erase_subject_statement(subject)?);
    let outcomes = outbox.database().batch_atomic(&statements).await?;
    Ok(Erased {
        outbox: outcomes
            .get(Outbox::ERASE_DELETE)
            .map_or(0, |outcome| outcome.rows_affected),
        inbox: outcomes
            .get(outbox_statements)
            .map_or(0, |outcome| outcome.rows_affected),
    })
}
