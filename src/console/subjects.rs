//! A subject's data through the console: export, and erasure in one atomic
//! batch per database with the application's own rows.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value as Json, json};

use super::call::Call;
use super::views::{InboxKeyView, MessageView, Seen};
use super::wire::{no_nul, read_body};
use crate::batch::{Batch, OfErasure, OfStatement, Ticket};
use crate::database::Database;
use crate::error::{Error, Result};
use crate::future::{BoxFuture, MaybeSend, MaybeSync};
use crate::time::Timestamp;

/// The application's own rows of a subject (an account, its profile…), so
/// that the console's export shows them and its erasure removes them in
/// the same atomic batch as the subject's messages and inbox keys.
///
/// # Contract
/// [`erase`](SubjectRows::erase) only adds statements to the batch it is
/// given (it commits nothing itself): if the batch fails, none of them and
/// none of the library's deletes happened.
pub trait SubjectRows: MaybeSend + MaybeSync {
    /// The application's rows of `subject` as JSON (`null` when it has none).
    fn export<'a>(&'a self, subject: &'a str) -> BoxFuture<'a, Result<Json>>;

    /// Adds the statements deleting the application's rows of `subject` to
    /// `batch`; each named, so the console reports its rows affected under
    /// that name.
    ///
    /// # Errors
    /// If a statement cannot be built: nothing is committed then.
    fn erase(
        &self,
        batch: &mut Batch,
        subject: &str,
    ) -> Result<Vec<(&'static str, Ticket<OfStatement>)>>;
}

impl<R: SubjectRows + ?Sized> SubjectRows for Arc<R> {
    fn export<'a>(&'a self, subject: &'a str) -> BoxFuture<'a, Result<Json>> {
        (**self).export(subject)
    }

    fn erase(
        &self,
        batch: &mut Batch,
        subject: &str,
    ) -> Result<Vec<(&'static str, Ticket<OfStatement>)>> {
        (**self).erase(batch, subject)
    }
}

/// Everything the console's outboxes, inboxes and [`SubjectRows`] hold of
/// `subject`. Payloads follow the console's `show_payloads`.
pub(super) async fn export(call: &mut Call<'_>) -> Result<Json> {
    let console = call.console;
    let subject = call
        .query
        .get("subject")
        .ok_or_else(|| Error::invalid("subject", "give ?subject="))?;
    check_subject(subject)?;
    let inner = &console.inner;
    let mut outboxes = Map::new();
    let mut erased_at: Option<Timestamp> = None;
    for (name, outbox) in &inner.outboxes {
        let messages = outbox.export_subject(subject).await?;
        let seen = Seen::by(console, call.grant);
        let shown: Vec<MessageView<'_>> = messages
            .iter()
            .map(|message| MessageView::stored(message, seen))
            .collect();
        outboxes.insert(name.clone(), json!(shown));
        erased_at = erased_at.max(crate::subject::erased_at(outbox, subject).await?);
    }
    let mut inboxes = Map::new();
    for (name, inbox) in &inner.inboxes {
        let keys = inbox.export_subject(subject).await?;
        let keys: Vec<InboxKeyView<'_>> = keys.iter().map(InboxKeyView::from).collect();
        inboxes.insert(name.clone(), json!(keys));
    }
    let application = match &inner.subject_rows {
        Some(rows) => rows.export(subject).await?,
        None => Json::Null,
    };
    Ok(json!({
        "subject": subject,
        "outboxes": outboxes,
        "inboxes": inboxes,
        "application": application,
        "erased_at_ms": erased_at.map(|at| at.as_unix_millis()),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Erasure {
    subject: String,
}

/// What one batch erases: on which database, and its tickets by name.
struct PerDatabase {
    db: Arc<dyn Database>,
    batch: Batch,
    outboxes: Vec<(String, Ticket<OfErasure>)>,
    inboxes: Vec<(String, Ticket<OfErasure>)>,
    application: Vec<(&'static str, Ticket<OfStatement>)>,
}

/// Erases the subject named in `body` from every outbox and inbox of the
/// console and from the application's rows: one atomic batch per database
/// handle (the same `Arc`: two handles on one database are two batches),
/// the application's rows in the batch of the first outbox's handle (or
/// the first inbox's), committed last. Erasing again is safe.
pub(super) async fn erase(call: &mut Call<'_>) -> Result<Json> {
    let console = call.console;
    let change = &mut call.change;
    let Erasure { subject } = read_body(call.body)?;
    check_subject(&subject)?;
    let inner = &console.inner;
    let mut batches: Vec<PerDatabase> = Vec::new();
    for (name, outbox) in &inner.outboxes {
        let part = batch_on(&mut batches, outbox.database());
        let ticket = part.batch.erase_outbox_subject(outbox, &subject)?;
        part.outboxes.push((name.clone(), ticket));
    }
    for (name, inbox) in &inner.inboxes {
        let part = batch_on(&mut batches, inbox.database());
        let ticket = part.batch.erase_inbox_subject(inbox, &subject)?;
        part.inboxes.push((name.clone(), ticket));
    }
    // The erasure's audit entry commits with the first outbox's part.
    if let Some((_, outbox)) = inner.outboxes.first() {
        let entry = change.statement(outbox)?;
        batch_on(&mut batches, outbox.database()).batch.push(entry);
    }
    if let Some(rows) = &inner.subject_rows {
        let Some(first) = batches.first_mut() else {
            return Err(Error::invalid(
                "console",
                "the application's rows are erased in an outbox's or inbox's batch: register one",
            ));
        };
        first.application = rows.erase(&mut first.batch, &subject)?;
    }
    // The batch with the application's rows commits last: if another
    // fails first, the subject's account is still there to erase again.
    batches.rotate_left(1);
    let (mut outboxes, mut inboxes, mut application) = (Map::new(), Map::new(), Map::new());
    for part in batches {
        let committed = part.batch.commit().await?;
        for (name, ticket) in &part.outboxes {
            outboxes.insert(name.clone(), json!(committed.erased(ticket)?));
        }
        for (name, ticket) in &part.inboxes {
            inboxes.insert(name.clone(), json!(committed.erased(ticket)?));
        }
        for (name, ticket) in &part.application {
            let rows = committed.outcome(ticket)?.rows_affected;
            application.insert((*name).to_owned(), json!(rows));
        }
    }
    Ok(json!({ "outboxes": outboxes, "inboxes": inboxes, "application": application }))
}

/// The batch on `db` (the same handle, not merely an equal one), added
/// when there is none yet.
fn batch_on<'a>(batches: &'a mut Vec<PerDatabase>, db: &Arc<dyn Database>) -> &'a mut PerDatabase {
    let same = |known: &PerDatabase| std::ptr::addr_eq(Arc::as_ptr(&known.db), Arc::as_ptr(db));
    let at = match batches.iter().position(same) {
        Some(at) => at,
        None => {
            batches.push(PerDatabase {
                db: db.clone(),
                batch: Batch::new(db.clone()),
                outboxes: Vec::new(),
                inboxes: Vec::new(),
                application: Vec::new(),
            });
            batches.len() - 1
        }
    };
    &mut batches[at]
}

fn check_subject(subject: &str) -> Result<()> {
    if subject.is_empty() {
        return Err(Error::invalid("subject", "give a subject"));
    }
    no_nul("subject", subject)
}
