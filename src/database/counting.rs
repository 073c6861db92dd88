//! A [`Database`] wrapper that counts round trips and statements.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Database, Outcome, Rows, Statement};
use crate::error::Result;
use crate::future::BoxFuture;

/// Round trips and statements sent through a [`CountingDatabase`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls to the database: each `execute`, `query` and non-empty
    /// `batch_atomic` is one round trip (one D1 subrequest).
    pub round_trips: u64,
    /// Statements those calls carried.
    pub statements: u64,
}

/// Wraps a database and counts what goes through it. Clones share counts.
///
/// It implements [`Database`] itself, so it stacks with any adapter; the
/// drain's query budget and the tests' round-trip assertions read it.
#[derive(Clone)]
pub struct CountingDatabase<D> {
    inner: D,
    round_trips: Arc<AtomicU64>,
    statements: Arc<AtomicU64>,
}

impl<D: Database> CountingDatabase<D> {
    /// Counts calls to `inner`, starting from zero.
    pub fn new(inner: D) -> Self {
        CountingDatabase {
            inner,
            round_trips: Arc::default(),
            statements: Arc::default(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> CallCounts {
        CallCounts {
            round_trips: self.round_trips.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
        }
    }

    fn record(&self, statements: usize) {
        if statements > 0 {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            self.statements
                .fetch_add(statements as u64, Ordering::Relaxed);
        }
    }
}

impl<D: Database> Database for CountingDatabase<D> {
    fn dialect(&self) -> super::Dialect {
        self.inner.dialect()
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        self.record(1);
        self.inner.run(statement)
    }

    // The provided calls go to the inner database's, which may override them.
    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
        self.record(1);
        self.inner.execute(statement)
    }

    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
        self.record(1);
        self.inner.query(statement)
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        self.record(statements.len());
        self.inner.batch_atomic(statements)
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        self.record(statements.len());
        self.inner.run_atomic(statements)
    }
}

impl<D> std::fmt::Debug for CountingDatabase<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingDatabase")
            .field("round_trips", &self.round_trips.load(Ordering::Relaxed))
            .field("statements", &self.statements.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
