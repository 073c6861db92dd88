//! The world's database faults, and the watch on every settle: both
//! through the library's own `FaultyDatabase`.

use std::sync::{Arc, Mutex, PoisonError};

use workers_outbox::database::Outcome;
use workers_outbox::future::BoxFuture;
use workers_outbox::testing::{Around, Fault, FaultyDatabase, Strike};
use workers_outbox::{Database, Error, Statement, Value};

use crate::ledger::Ledger;
use crate::random::SimRandom;

/// `inner`, failing a share (`error_rate`) of calls with a retryable error:
/// most before running them, a quarter after they committed (the caller
/// cannot tell which). The draws come from the world's own `random`, so the
/// seed replays them; every applied settle is checked against the row's
/// lease.
pub(crate) fn faulty(
    inner: Arc<dyn Database>,
    random: SimRandom,
    error_rate: f64,
    ledger: Arc<Mutex<Ledger>>,
) -> FaultyDatabase<Arc<dyn Database>> {
    let db = FaultyDatabase::new(inner).around(SettleWatch { ledger });
    db.inject(Fault::chosen(move |_| {
        random.chance(error_rate).then(|| {
            if random.chance(0.25) {
                Strike::AfterCommit
            } else {
                Strike::Before
            }
        })
    }));
    db
}

/// Records every applied settle whose token was not the row's lease.
struct SettleWatch {
    ledger: Arc<Mutex<Ledger>>,
}

impl Around for SettleWatch {
    fn around<'a>(
        &'a self,
        inner: &'a dyn Database,
        statements: &'a [Statement],
        call: BoxFuture<'a, Result<Vec<Outcome>, Error>>,
    ) -> BoxFuture<'a, Result<Vec<Outcome>, Error>> {
        Box::pin(async move {
            let before = current_tokens(inner, statements).await?;
            let outcomes = call.await?;
            let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
            for ((statement, outcome), current) in statements.iter().zip(&outcomes).zip(&before) {
                if let Some((_, token)) = settle_target(statement)
                    && outcome.rows_affected > 0
                    && current.as_deref() != Some(token.as_str())
                {
                    ledger.stale_settles_applied += 1;
                }
            }
            Ok(outcomes)
        })
    }
}

/// The row's lease token before a settle touches it.
async fn current_tokens(
    inner: &dyn Database,
    statements: &[Statement],
) -> Result<Vec<Option<String>>, Error> {
    let mut tokens = Vec::with_capacity(statements.len());
    for statement in statements {
        let token = match settle_target(statement) {
            Some((id, _)) => {
                let rows = inner
                    .query(&Statement::new(
                        "SELECT lease_token FROM outbox WHERE id = ? AND state = 'ready'",
                        vec![Value::Text(id)],
                    ))
                    .await?;
                rows.first()
                    .and_then(|row| row.get::<Option<String>>("lease_token").ok().flatten())
            }
            None => None,
        };
        tokens.push(token);
    }
    Ok(tokens)
}

/// A settle statement's `(id, token)`: its `WHERE` ends `… "id" = ? AND
/// "lease_token" = ?` (`$n` on Postgres).
fn settle_target(statement: &Statement) -> Option<(String, String)> {
    let placeholder = statement
        .sql()
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['?', '$']);
    if !placeholder.ends_with("\"lease_token\" = ") {
        return None;
    }
    match statement.values() {
        [.., Value::Text(id), Value::Text(token)] => Some((id.clone(), token.clone())),
        _ => None,
    }
}
