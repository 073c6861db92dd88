//! The port itself: what one statement did, and the trait every adapter
//! implements.

use std::sync::Arc;

use super::{Dialect, Rows, Statement};
use crate::error::Result;
use crate::future::{BoxFuture, MaybeSend, MaybeSync};

/// What one statement of a batch did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Rows inserted, updated or deleted (0 for a read).
    pub rows_affected: u64,
    /// Rows the statement returned (`SELECT`, or `… RETURNING`).
    pub rows: Rows,
}

/// A SQL database: SQLite, D1, a Durable Object's storage or Postgres.
///
/// # Contract
/// Every adapter (SQLite, D1, and any other) keeps these promises, and runs
/// the [conformance suite](crate::conformance) to show it:
///
/// - **Atomicity.** Each call is atomic. [`batch_atomic`](Database::batch_atomic)
///   runs its statements in order inside one transaction: all of them commit,
///   or none does. This is the only multi-statement atomic unit (D1 has no
///   interactive transactions), so anything that must happen together goes
///   into one batch.
/// - **One after another.** On the SQLite dialect a batch's statements run
///   consecutively on one connection, with no other write between them, so
///   `changes()` in a statement is the number of rows the write before it
///   changed (a settle's rollup count rides on its delete this way).
/// - **Visibility.** Once a call returns `Ok`, its writes are durable and
///   visible to every later call through any handle to the same database.
/// - **An error may have committed.** A call refused by the database
///   ([`RetryAdvice::Never`](crate::error::RetryAdvice::Never): a constraint, bad SQL) wrote
///   nothing. A transient failure ([`Error::Unavailable`](crate::error::Error::Unavailable))
///   leaves the outcome unknown: D1 can report a lost connection after the
///   batch committed. So:
///   - the outbox's own statements are safe to send again: settles and
///     isolations are fenced by their lease and write absolute values; a
///     claim is never sent again (its rows come back, attempts unspent,
///     when its lease ends);
///   - an inbox key is first-writer-wins: a replayed effect batch fails on
///     the key, and the effect stays applied once;
///   - a caller's own business batch must be made safe to replay before it
///     is retried: give its messages a caller id ([`Message::id`](crate::outbox::Message::id):
///     a replay after a commit fails with `Conflict`, which tells you it
///     committed) or a dedup key, write business rows with a natural key,
///     or read back whether the batch committed. Never assume it did not.
/// - **Results.** `run` reports what one statement changed and returned: the
///   rows of a `SELECT` or of a write with `RETURNING` (whose writes
///   commit); `run_atomic` returns one [`Outcome`] per statement, in order.
///   `execute`, `query` and `batch_atomic` are provided on top of them (an
///   empty batch succeeds without touching the database, and never reaches
///   `run_atomic`).
/// - **Values.** Values round-trip exactly. A value the backend cannot hold
///   exactly (D1 keeps numbers as doubles: integers beyond ±2^53) is refused
///   with [`Error::InvalidInput`](crate::error::Error::InvalidInput), never rounded.
/// - **Errors.** Failures map to [`Error`](crate::error::Error): uniqueness
///   violations to `Conflict` (naming the constraint as `table.column`),
///   transient faults to `Unavailable` with the right
///   [`RetryAdvice`](crate::error::RetryAdvice) advice, everything else to `Database`.
///
/// # `Send`
/// JavaScript futures are not `Send`. The trait is `Send + Sync` with `Send`
/// futures on native targets (so it works under tokio's multi-threaded
/// runtime) and has no thread bounds on `wasm32`; see [`crate::future`].
pub trait Database: MaybeSend + MaybeSync {
    /// The SQL this database speaks: statements given to it are in this
    /// dialect, and the outbox and inbox render theirs for it. A wrapper
    /// around another adapter returns the inner one's.
    fn dialect(&self) -> Dialect;

    /// Runs one statement: the rows it changed and the rows it returned.
    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>>;

    /// Runs `statements` (at least one) in order as one transaction: all
    /// commit or none do.
    fn run_atomic<'a>(&'a self, statements: &'a [Statement])
    -> BoxFuture<'a, Result<Vec<Outcome>>>;

    /// Runs one statement and returns how many rows it changed.
    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move { Ok(self.run(statement).await?.rows_affected) })
    }

    /// Runs one statement and returns the rows it produced.
    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
        Box::pin(async move { Ok(self.run(statement).await?.rows) })
    }

    /// Runs `statements` in order as one transaction: all commit or none
    /// do. An empty batch touches nothing.
    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        if statements.is_empty() {
            return Box::pin(async { Ok(Vec::new()) });
        }
        self.run_atomic(statements)
    }
}

impl<T: Database + ?Sized> Database for Arc<T> {
    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        (**self).run(statement)
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        (**self).run_atomic(statements)
    }

    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
        (**self).execute(statement)
    }

    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
        (**self).query(statement)
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        (**self).batch_atomic(statements)
    }
}
