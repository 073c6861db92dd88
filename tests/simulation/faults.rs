//! A `Database` wrapper that injects faults and watches every settle.

use std::sync::{Arc, Mutex, PoisonError};

use workers_outbox::database::{Outcome, Rows};
use workers_outbox::future::BoxFuture;
use workers_outbox::{Database, Error, RetryAdvice, Statement, Value};

use crate::ledger::Ledger;
use crate::random::SimRandom;

/// Fails a share of calls with a retryable error: most before running them,
/// some after they committed (the caller cannot tell which).
pub(crate) struct FaultyDatabase {
    inner: Arc<dyn Database>,
    random: SimRandom,
    error_rate: f64,
    ledger: Arc<Mutex<Ledger>>,
}

impl FaultyDatabase {
    pub(crate) fn new(
        inner: Arc<dyn Database>,
        random: SimRandom,
        error_rate: f64,
        ledger: Arc<Mutex<Ledger>>,
    ) -> Self {
        FaultyDatabase {
            inner,
            random,
            error_rate,
            ledger,
        }
    }

    fn fault(&self) -> Option<bool> {
        if self.random.chance(self.error_rate) {
            // Some(true): fail after committing.
            Some(self.random.chance(0.25))
        } else {
            None
        }
    }

    fn injected(&self, after_commit: bool) -> Error {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        if after_commit {
            ledger.faults.db_errors_after_commit += 1;
        } else {
            ledger.faults.db_errors_before += 1;
        }
        Error::unavailable("injected: Network connection lost.", RetryAdvice::Now)
    }

    /// Records every applied settle whose token was not the row's lease.
    async fn watch_settles(
        &self,
        statements: &[Statement],
        outcomes: &[Outcome],
        before: &[Option<String>],
    ) {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        for ((statement, outcome), current) in statements.iter().zip(outcomes).zip(before) {
            if let Some((_, token)) = settle_target(statement)
                && outcome.rows_affected > 0
                && current.as_deref() != Some(token.as_str())
            {
                ledger.stale_settles_applied += 1;
            }
        }
    }

    /// The row's lease token before a settle touches it.
    async fn current_tokens(&self, statements: &[Statement]) -> Result<Vec<Option<String>>, Error> {
        let mut tokens = Vec::with_capacity(statements.len());
        for statement in statements {
            let token = match settle_target(statement) {
                Some((id, _)) => {
                    let rows = self
                        .inner
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

impl Database for FaultyDatabase {
    fn dialect(&self) -> workers_outbox::Dialect {
        self.inner.dialect()
    }

    /// A write and its faults, as [`execute`](Database::execute) (which the
    /// library calls) sees them.
    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome, Error>> {
        Box::pin(async move {
            let mut outcomes = self.batch_atomic(std::slice::from_ref(statement)).await?;
            Ok(outcomes.pop().unwrap_or_default())
        })
    }

    /// Through the `batch_atomic` override below, which must stay (the
    /// provided one would call this again).
    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>, Error>> {
        self.batch_atomic(statements)
    }

    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let outcomes = self.batch_atomic(std::slice::from_ref(statement)).await?;
            Ok(outcomes.first().map_or(0, |o| o.rows_affected))
        })
    }

    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows, Error>> {
        Box::pin(async move {
            match self.fault() {
                Some(false) => Err(self.injected(false)),
                Some(true) => {
                    self.inner.query(statement).await?;
                    Err(self.injected(true))
                }
                None => self.inner.query(statement).await,
            }
        })
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>, Error>> {
        Box::pin(async move {
            let fault = self.fault();
            if fault == Some(false) {
                return Err(self.injected(false));
            }
            let before = self.current_tokens(statements).await?;
            let outcomes = self.inner.batch_atomic(statements).await?;
            self.watch_settles(statements, &outcomes, &before).await;
            if fault == Some(true) {
                return Err(self.injected(true));
            }
            Ok(outcomes)
        })
    }
}
