//! The inbox: the first writer wins; a repeat changes nothing.

use std::time::Duration;

use super::{CaseResult, Failure, Harness, ensure, ensure_eq};
use crate::database::Statement;
use crate::error::Error;
use crate::inbox::Processed;

async fn effects_table(h: &Harness) -> Result<String, Failure> {
    let table = h.table("credits");
    h.sql(
        &format!(
            "CREATE TABLE \"{table}\" (id INTEGER PRIMARY KEY, account TEXT UNIQUE, amount INTEGER)"
        ),
        vec![],
    )
    .await?;
    Ok(table)
}

fn credit(h: &Harness, table: &str, account: &str) -> Statement {
    h.statement(
        &format!("INSERT INTO \"{table}\" (account, amount) VALUES (?, 5)"),
        vec![account.into()],
    )
}

pub(crate) async fn first_writer_wins_and_repeats_change_nothing(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    let credits = effects_table(&h).await?;
    let first = inbox
        .process_once("payment-9", Some("acct-1"), &[credit(&h, &credits, "a")])
        .await?;
    ensure!(
        matches!(&first, Processed::Applied(outcomes) if outcomes.len() == 1 && outcomes[0].rows_affected == 1),
        "got {first:?}"
    );
    let repeat = inbox
        .process_once("payment-9", Some("acct-1"), &[credit(&h, &credits, "b")])
        .await?;
    ensure_eq!(repeat, Processed::AlreadyProcessed);
    ensure_eq!(h.count(&credits).await?, 1);
    Ok(())
}

pub(crate) async fn duplicate_is_told_apart_from_other_conflicts(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    let credits = effects_table(&h).await?;
    let db = h.db();
    let claim = inbox.key_statement("m-1", None)?;
    db.batch_atomic(&[claim.statements(), &[credit(&h, &credits, "a")]].concat())
        .await?;
    let repeat = inbox.key_statement("m-1", None)?;
    let error = db
        .batch_atomic(&[repeat.statements(), &[credit(&h, &credits, "z")]].concat())
        .await
        .err()
        .ok_or_else(|| Failure("a repeated key was accepted".into()))?;
    ensure!(
        repeat.is_duplicate(&error),
        "{error:?} not seen as a duplicate"
    );
    // A new key whose effect conflicts is not a duplicate, and rolls back.
    let fresh = inbox.key_statement("m-2", None)?;
    let error = db
        .batch_atomic(&[fresh.statements(), &[credit(&h, &credits, "a")]].concat())
        .await
        .err()
        .ok_or_else(|| Failure("a conflicting effect was accepted".into()))?;
    ensure!(
        !fresh.is_duplicate(&error),
        "{error:?} taken for a duplicate"
    );
    ensure!(!inbox.seen("m-2").await?, "the failed batch kept its key");
    ensure_eq!(h.count(&credits).await?, 1);
    Ok(())
}

pub(crate) async fn seen_and_purge(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    inbox.process_once("old", None, &[]).await?;
    h.clock().advance(Duration::from_secs(3600));
    inbox.process_once("new", None, &[]).await?;
    ensure!(
        inbox.seen("old").await? && inbox.seen("new").await?,
        "keys not seen"
    );
    ensure!(!inbox.seen("never").await?, "an unknown key was seen");
    ensure_eq!(inbox.purge(h.later(Duration::ZERO)?).await?, 1);
    ensure!(!inbox.seen("old").await?, "a purged key is still seen");
    ensure!(inbox.seen("new").await?, "a recent key was purged");
    Ok(())
}

pub(crate) async fn bad_keys_are_refused(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    for (key, subject, expected) in [
        ("", None, "inbox key"),
        (&*"k".repeat(300), None, "inbox key"),
        ("ok", Some(""), "subject"),
    ] {
        match inbox.key_statement(key, subject) {
            Err(Error::InvalidInput { what, .. }) => ensure_eq!(what, expected),
            other => return Err(Failure(format!("{key:?}: got {other:?}"))),
        }
    }
    ensure_eq!(h.count(inbox.table().as_str()).await?, 0);
    Ok(())
}
