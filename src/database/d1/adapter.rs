//! The D1 adapter: the [`Database`] port over a Workers D1 binding.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::worker_sys::{D1Database as D1Sys, D1PreparedStatement, D1Result};

use crate::database::js_values::{cell, js_error, to_js};
use crate::database::value::Value;
use crate::database::{Database, Dialect, Outcome, Rows, Statement};
use crate::error::{Error, Result};
use crate::future::BoxFuture;

/// What this handle has cost so far, from D1's own result metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct D1Usage {
    /// Calls to D1 (each `execute`, `query` and `batch_atomic`): each one a
    /// subrequest counted against the invocation's query limit.
    pub calls: u64,
    /// Statements those calls carried.
    pub statements: u64,
    /// Rows D1 reports read (billed).
    pub rows_read: u64,
    /// Rows D1 reports written, index entries included (billed).
    pub rows_written: u64,
}

/// A D1 database.
///
/// A [`batch_atomic`](Database::batch_atomic) is one D1 `batch()`: one
/// subrequest, one SQL transaction. Failures are classified from D1's
/// messages (see `classify.rs`).
pub struct D1Database {
    db: D1Sys,
    usage: Rc<Cell<D1Usage>>,
}

impl std::fmt::Debug for D1Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("D1Database")
            .field("usage", &self.usage.get())
            .finish_non_exhaustive()
    }
}

impl D1Database {
    /// Wraps a D1 binding (`env.d1("DB")?`).
    pub fn new(binding: worker::D1Database) -> Self {
        D1Database {
            db: binding.unchecked_into::<D1Sys>(),
            usage: Rc::default(),
        }
    }

    /// Wraps a D1 binding as the shared handle [`Outbox`](crate::outbox::Outbox) and
    /// [`Inbox`](crate::inbox::Inbox) take. (`Arc` keeps one type for both targets;
    /// on `wasm32` nothing crosses threads.)
    pub fn shared(binding: worker::D1Database) -> std::sync::Arc<dyn Database> {
        std::sync::Arc::new(Self::new(binding))
    }

    /// A shared handle (as [`shared`](D1Database::shared)) on a D1 session (the Sessions API) whose first query may be
    /// answered by any replica (`first-unconstrained`): each later query of
    /// the session sees at least what the earlier ones saw, and writes go
    /// to the primary. For reads that may lag a moment, such as an operator
    /// console's (`Outbox::through`); a drainer's
    /// claims and settles go through a plain handle. Where no replica is
    /// enabled, D1 answers every query from the primary.
    ///
    /// # Errors
    /// [`Error::Database`] when the binding has no
    /// Sessions API (`withSession`), or refuses the session.
    pub fn replica_reads(binding: worker::D1Database) -> Result<std::sync::Arc<dyn Database>> {
        let db = binding.unchecked_into::<D1Sys>();
        let with_session = Reflect::get(&db, &JsValue::from_str("withSession"))
            .map_err(js_error)?
            .dyn_into::<js_sys::Function>()
            .map_err(|_| Error::database("this D1 binding has no Sessions API (withSession)"))?;
        let session = with_session
            .call1(&db, &JsValue::from_str("first-unconstrained"))
            .map_err(js_error)?;
        Ok(std::sync::Arc::new(D1Database {
            db: session.unchecked_into::<D1Sys>(),
            usage: Rc::default(),
        }))
    }

    /// Calls, statements, and rows read and written so far.
    pub fn usage(&self) -> D1Usage {
        self.usage.get()
    }

    fn prepare(&self, statement: &Statement) -> Result<D1PreparedStatement> {
        let values = statement
            .values()
            .iter()
            .map(to_js)
            .collect::<Result<Array>>()?;
        let prepared = self.db.prepare(statement.sql()).map_err(js_error)?;
        prepared.bind(values).map_err(js_error)
    }

    fn record(&self, statements: usize, results: &[D1Result]) {
        let mut usage = self.usage.get();
        usage.calls += 1;
        usage.statements += statements as u64;
        for result in results {
            usage.rows_read += meta_number(result, "rows_read");
            usage.rows_written += meta_number(result, "rows_written");
        }
        self.usage.set(usage);
    }

    async fn run_one(&self, statement: &Statement) -> Result<Outcome> {
        let prepared = self.prepare(statement)?;
        let promise = prepared.all().map_err(js_error)?;
        let result: D1Result = JsFuture::from(promise)
            .await
            .map_err(js_error)?
            .unchecked_into();
        self.record(1, std::slice::from_ref(&result));
        outcome(&result)
    }
}

impl Database for D1Database {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(self.run_one(statement))
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        Box::pin(async move {
            let prepared = statements
                .iter()
                .map(|statement| self.prepare(statement))
                .collect::<Result<Array>>()?;
            let promise = self.db.batch(prepared).map_err(js_error)?;
            let results: Vec<D1Result> = JsFuture::from(promise)
                .await
                .map_err(js_error)?
                .unchecked_into::<Array>()
                .iter()
                .map(JsCast::unchecked_into)
                .collect();
            self.record(statements.len(), &results);
            results.iter().map(outcome).collect()
        })
    }
}

/// Reads one statement's result: rows affected and returned rows.
fn outcome(result: &D1Result) -> Result<Outcome> {
    let rows_affected = meta_number(result, "changes");
    let objects = result.results().map_err(js_error)?.unwrap_or_default();
    let Some(first) = objects.iter().next() else {
        return Ok(Outcome {
            rows_affected,
            rows: Rows::default(),
        });
    };
    let columns: Vec<String> = Object::keys(first.unchecked_ref::<Object>())
        .iter()
        .filter_map(|key| key.as_string())
        .collect();
    let mut rows = Vec::with_capacity(objects.length() as usize);
    for object in objects.iter() {
        let row = columns
            .iter()
            .map(|column| {
                let value = Reflect::get(&object, &JsValue::from_str(column)).map_err(js_error)?;
                cell(&value, column)
            })
            .collect::<Result<Vec<Value>>>()?;
        rows.push(row);
    }
    Ok(Outcome {
        rows_affected,
        rows: Rows::new(columns, rows)?,
    })
}

fn meta_number(result: &D1Result, field: &str) -> u64 {
    result
        .meta()
        .ok()
        .and_then(|meta| Reflect::get(&meta, &JsValue::from_str(field)).ok())
        .and_then(|value| value.as_f64())
        .filter(|number| number.is_finite() && *number >= 0.0)
        .map_or(0, |number| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let whole = number as u64;
            whole
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::error::RetryAdvice;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[wasm_bindgen_test]
    fn worker_errors_become_the_crates_by_their_text() {
        let lost: Error = worker::Error::RustError("Network connection lost.".into()).into();
        assert_eq!(lost.retry_advice(), RetryAdvice::Now, "{lost}");
        let missing: Error = worker::Error::RustError("Binding `DB` is undefined.".into()).into();
        assert!(matches!(missing, Error::Database { .. }), "{missing}");
        assert!(missing.to_string().contains("Binding `DB` is undefined."));
    }

    #[wasm_bindgen_test]
    fn thrown_d1_errors_are_classified() {
        let cases = [
            ("D1_ERROR: Network connection lost.", RetryAdvice::Now),
            (
                "D1_ERROR: D1 DB is overloaded. Requests queued for too long.",
                RetryAdvice::AfterBackoff,
            ),
            (
                "D1_ERROR: no such table: outbox: SQLITE_ERROR",
                RetryAdvice::Never,
            ),
        ];
        for (message, retry) in cases {
            let thrown: JsValue = js_sys::Error::new(message).into();
            assert_eq!(js_error(thrown).retry_advice(), retry, "{message}");
        }
        let unique: JsValue =
            js_sys::Error::new("D1_ERROR: UNIQUE constraint failed: inbox.key: SQLITE_CONSTRAINT")
                .into();
        assert_eq!(
            js_error(unique),
            Error::Conflict {
                constraint: "inbox.key".into()
            }
        );
        // A D1 error wrapped as the cause of another is still read.
        let outer = js_sys::Error::new("D1_ERROR");
        outer.set_cause(&js_sys::Error::new("Network connection lost.").into());
        assert_eq!(js_error(outer.into()).retry_advice(), RetryAdvice::Now);
        assert_eq!(
            js_error(JsValue::from_str("plain text")).retry_advice(),
            RetryAdvice::Never
        );
    }
}
