//! A Durable Object's SQLite storage as a [`Database`], and an alarm kept at
//! the outbox's next due time.
//!
//! Everything here runs inside the object, next to its data: statements are
//! synchronous calls into the object's own SQLite, so a batch costs no
//! network round trip and no subrequest.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Array, Date, Function, Object, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::worker_sys::DurableObjectStorage;
use worker::worker_sys::types::SqlStorage;

use crate::database::js_values::{cell, from_js, js_error, to_js};
use crate::database::value::Value;
use crate::database::{Database, Dialect, Outcome, Rows, Statement};
use crate::error::{Error, Result};
use crate::future::BoxFuture;
use crate::time::Timestamp;

/// The SQLite database of one Durable Object (`state.storage().sql()`),
/// for objects declared with `new_sqlite_classes`.
///
/// # Atomicity
/// Every call runs inside the storage's `transactionSync`: the statements
/// of a [`batch_atomic`](Database::batch_atomic) commit together, or a
/// failing one rolls back those before it. Statements are synchronous, so
/// no other event of the object interleaves with a call.
///
/// # The alarm
/// With [`wake_for`](DurableObjectDatabase::wake_for) (given an outbox's
/// [`NextDue`], from `Outbox::next_due`), every call that writes also reads
/// the outbox's next due time and sets the object's alarm to it (or deletes
/// the alarm when nothing is due) inside the same `transactionSync`: the
/// rows and the alarm commit together, and a failure of either rolls both
/// back. Enqueues, settles, replays, erasures and your own batches all move
/// it; a claim moves it to the end of its lease, so a drain that dies
/// mid-way wakes the object when its rows come back. The alarm then belongs
/// to the outbox: do not set it for anything else. The `alarm()` handler
/// calls `Drainer::run_alarm`.
///
/// # Numbers
/// The storage API passes numbers as JavaScript doubles, so integers beyond
/// ±2^53 are refused, as on D1.
pub struct DurableObjectDatabase {
    storage: DurableObjectStorage,
    sql: SqlStorage,
    wake: Option<Rc<Wake>>,
}

/// What keeps an object's alarm at an outbox's next due time: the query
/// that reads it. Made by `Outbox::next_due`.
#[derive(Debug, Clone, PartialEq)]
pub struct NextDue {
    /// What the alarm follows (the outbox's table), for errors.
    label: String,
    /// One row whose `due_at` is the earliest due time in Unix ms, or NULL.
    query: Statement,
}

impl NextDue {
    /// The query `query`, reading one row whose column `due_at` is the
    /// earliest due time of `label` in Unix ms (NULL when nothing is due).
    /// A table that does not exist yet has nothing due.
    pub fn new(label: impl Into<String>, query: Statement) -> Self {
        NextDue {
            label: label.into(),
            query,
        }
    }
}

/// Keeps the object's alarm at the earliest due time of one outbox.
struct Wake {
    next_due: NextDue,
    /// What this handle last made of the alarm, to skip doing it again:
    /// `Some(Some(ms))` set, `Some(None)` deleted, `None` unknown.
    armed: Cell<Option<Option<i64>>>,
}

impl std::fmt::Debug for DurableObjectDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableObjectDatabase")
            .field(
                "wakes_for",
                &self.wake.as_ref().map(|wake| &wake.next_due.label),
            )
            .finish_non_exhaustive()
    }
}

impl DurableObjectDatabase {
    /// The SQL storage of the object `state` belongs to.
    pub fn new(state: &worker::State) -> Self {
        let storage =
            JsValue::from(state.storage().as_raw()).unchecked_into::<DurableObjectStorage>();
        let sql = storage.sql();
        DurableObjectDatabase {
            storage,
            sql,
            wake: None,
        }
    }

    /// This handle as the shared one [`Outbox`](crate::outbox::Outbox) and
    /// [`Inbox`](crate::inbox::Inbox) take (`Arc<DurableObjectDatabase>` coerces to
    /// `Arc<dyn Database>`); keep a clone for `Drainer::run_alarm`. Use one
    /// handle per object instance: it remembers the alarm it set.
    pub fn shared(self) -> std::sync::Arc<Self> {
        std::sync::Arc::new(self)
    }

    /// Keeps the object's alarm at the next due time `next_due` reads
    /// (`Outbox::next_due`). One outbox per object owns the alarm.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the alarm already follows another outbox.
    pub fn wake_for(mut self, next_due: NextDue) -> Result<Self> {
        if let Some(wake) = &self.wake {
            if wake.next_due == next_due {
                return Ok(self);
            }
            return Err(Error::invalid(
                "wake_for",
                format!(
                    "the alarm already follows the outbox \"{}\": one outbox per object owns it",
                    wake.next_due.label
                ),
            ));
        }
        self.wake = Some(Rc::new(Wake {
            next_due,
            armed: Cell::new(None),
        }));
        Ok(self)
    }

    /// Tells this handle the alarm that woke the object is gone (the
    /// runtime deletes it unless the `alarm()` handler sets it again), so
    /// the next write sets it whatever this handle last set.
    pub fn alarm_fired(&self) {
        if let Some(wake) = &self.wake {
            wake.armed.set(None);
        }
    }

    /// Sets the alarm to the outbox's next due time now, whatever this
    /// handle last set (a no-op without
    /// [`wake_for`](DurableObjectDatabase::wake_for)). Writes through this
    /// handle do this themselves; call it after writing to the outbox by
    /// other means.
    ///
    /// # Errors
    /// A failure to read the next due time or to set the alarm.
    pub async fn rearm(&self) -> Result<()> {
        if let Some(wake) = &self.wake {
            wake.armed.set(None);
        }
        let pending = arm(&self.storage, &self.sql, self.wake.as_deref())?;
        await_alarm(pending, self.wake.as_deref()).await
    }

    /// Sets the alarm no later than `at`: earlier if the outbox's next
    /// message falls due sooner (as this handle last set it), else at `at`,
    /// for work of the object's own that waits (an owed fleet report). A
    /// later write moves it to the next due time again.
    ///
    /// # Errors
    /// A failure to set the alarm.
    pub async fn wake_by(&self, at: Timestamp) -> Result<()> {
        let at_ms = at.as_unix_millis();
        if let Some(wake) = &self.wake
            && let Some(Some(armed)) = wake.armed.get()
            && armed <= at_ms
        {
            return Ok(());
        }
        #[allow(clippy::cast_precision_loss)]
        let promise = self
            .storage
            .set_alarm(Date::new(&JsValue::from_f64(at_ms as f64)), Object::new())
            .map_err(js_error)?;
        if let Some(wake) = &self.wake {
            wake.armed.set(Some(Some(at_ms)));
        }
        await_alarm(Some(promise), self.wake.as_deref()).await
    }

    /// When the outbox's next message falls due, if any is ready.
    ///
    /// # Errors
    /// A failure to read the outbox table.
    pub fn next_due(&self) -> Result<Option<Timestamp>> {
        next_due(&self.sql, self.wake.as_deref())
    }

    /// Runs `statements` in one `transactionSync` which, if they wrote, also
    /// moves the alarm: a failure anywhere rolls everything back.
    fn transaction(
        &self,
        statements: &[Statement],
    ) -> Result<(Vec<Outcome>, Option<js_sys::Promise>)> {
        let sql = self.sql.clone();
        let storage: DurableObjectStorage = self.storage.clone().unchecked_into();
        let wake = self.wake.clone();
        let owned: Vec<Statement> = statements.to_vec();
        type Done = (Vec<Outcome>, Option<js_sys::Promise>);
        let done: Rc<RefCell<Option<Done>>> = Rc::default();
        let failure: Rc<RefCell<Option<Error>>> = Rc::default();
        let (done_in, failure_in) = (Rc::clone(&done), Rc::clone(&failure));
        let body = Closure::<dyn FnMut() -> std::result::Result<JsValue, JsValue>>::new(
            move || -> std::result::Result<JsValue, JsValue> {
                let result = (|| {
                    let mut outcomes = Vec::with_capacity(owned.len());
                    for statement in &owned {
                        outcomes.push(run_statement(&sql, statement)?);
                    }
                    let wrote = outcomes.iter().any(|outcome| outcome.rows_affected > 0);
                    let alarm = if wrote {
                        arm(&storage, &sql, wake.as_deref())?
                    } else {
                        None
                    };
                    Ok((outcomes, alarm))
                })();
                match result {
                    Ok(finished) => {
                        *done_in.borrow_mut() = Some(finished);
                        Ok(JsValue::UNDEFINED)
                    }
                    Err(error) => {
                        *failure_in.borrow_mut() = Some(error);
                        // Throwing rolls the transaction back.
                        Err(JsValue::from_str("workers-outbox: statement failed"))
                    }
                }
            },
        );
        let transaction_sync: Function =
            Reflect::get(&self.storage, &JsValue::from_str("transactionSync"))
                .map_err(js_error)?
                .dyn_into()
                .map_err(|_| {
                    Error::database(
                        "this storage has no transactionSync: declare the object's class \
                              with new_sqlite_classes",
                    )
                })?;
        let result = transaction_sync.call1(&self.storage, body.as_ref().unchecked_ref());
        if let Some(error) = failure.borrow_mut().take() {
            if let Some(wake) = &self.wake {
                // The alarm change, if any was made, rolled back with it.
                wake.armed.set(None);
            }
            return Err(error);
        }
        result.map_err(js_error)?;
        let finished = done.borrow_mut().take();
        finished.ok_or_else(|| {
            Error::internal("transactionSync returned without running the statements")
        })
    }

    async fn call(&self, statements: &[Statement]) -> Result<Vec<Outcome>> {
        let (outcomes, alarm) = self.transaction(statements)?;
        await_alarm(alarm, self.wake.as_deref()).await?;
        Ok(outcomes)
    }
}

/// The outbox's next due time, if it has a ready row.
fn next_due(sql: &SqlStorage, wake: Option<&Wake>) -> Result<Option<Timestamp>> {
    let Some(wake) = wake else {
        return Ok(None);
    };
    let due = match run_statement(sql, &wake.next_due.query) {
        Ok(outcome) => outcome
            .rows
            .first()
            .map(|row| row.get::<Option<i64>>("due_at"))
            .transpose()?
            .flatten(),
        Err(Error::Database { message, .. }) if message.contains("no such table") => None,
        Err(error) => return Err(error),
    };
    due.map(Timestamp::from_unix_millis).transpose()
}

/// Reads the next due time and, if it differs from the alarm this handle
/// set, asks the runtime to move the alarm (inside the caller's
/// transaction, when there is one); returns the runtime's promise.
fn arm(
    storage: &DurableObjectStorage,
    sql: &SqlStorage,
    wake: Option<&Wake>,
) -> Result<Option<js_sys::Promise>> {
    let Some(wake) = wake else {
        return Ok(None);
    };
    let next = next_due(sql, Some(wake))?.map(Timestamp::as_unix_millis);
    if wake.armed.get() == Some(next) {
        return Ok(None);
    }
    let options = Object::new();
    let promise = match next {
        #[allow(clippy::cast_precision_loss)]
        Some(at) => storage.set_alarm(Date::new(&JsValue::from_f64(at as f64)), options),
        None => storage.delete_alarm(options),
    }
    .map_err(js_error)?;
    wake.armed.set(Some(next));
    Ok(Some(promise))
}

impl Database for DurableObjectDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(async move {
            let mut outcomes = self.call(std::slice::from_ref(statement)).await?;
            outcomes
                .pop()
                .ok_or_else(|| Error::internal("a statement ran without an outcome"))
        })
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        Box::pin(self.call(statements))
    }
}

/// Waits for the runtime to confirm an alarm change. Should it fail, the
/// rows are written and the alarm is unknown: the handle forgets what it
/// set, so the next write sets it again, and the error is transient.
async fn await_alarm(alarm: Option<js_sys::Promise>, wake: Option<&Wake>) -> Result<()> {
    let Some(promise) = alarm else {
        return Ok(());
    };
    JsFuture::from(promise).await.map(drop).map_err(|error| {
        if let Some(wake) = wake {
            wake.armed.set(None);
        }
        Error::unavailable(
            format!(
                "the rows were written but the alarm was not set: {}",
                js_error(error)
            ),
            crate::error::RetryAdvice::Now,
        )
    })
}

/// One statement, synchronously: its rows, and the rows it changed (the
/// difference in SQLite's `total_changes()`: the rows it inserted, updated
/// or deleted, not index entries; rows changed by triggers and foreign-key
/// cascades count too).
fn run_statement(sql: &SqlStorage, statement: &Statement) -> Result<Outcome> {
    let before = total_changes(sql)?;
    let bindings = statement
        .values()
        .iter()
        .map(to_js)
        .collect::<Result<Array>>()?;
    let cursor = sql.exec(statement.sql(), bindings).map_err(js_error)?;
    let columns: Vec<String> = cursor
        .column_names()
        .iter()
        .filter_map(|name| name.as_string())
        .collect();
    let mut rows = Vec::new();
    let raw = cursor.raw();
    loop {
        let next = raw.next().map_err(js_error)?;
        if next.done() {
            break;
        }
        let values: Array = next.value().unchecked_into();
        let row = values
            .iter()
            .zip(&columns)
            .map(|(value, column)| cell(&value, column))
            .collect::<Result<Vec<Value>>>()?;
        rows.push(row);
    }
    let rows_affected = total_changes(sql)?.saturating_sub(before);
    Ok(Outcome {
        rows_affected,
        rows: Rows::new(columns, rows)?,
    })
}

fn total_changes(sql: &SqlStorage) -> Result<u64> {
    let cursor = sql
        .exec("SELECT total_changes()", Array::new())
        .map_err(js_error)?;
    let row: Array = cursor
        .raw()
        .next()
        .map_err(js_error)?
        .value()
        .unchecked_into();
    match from_js(&row.get(0)) {
        Ok(Value::Integer(changes)) => Ok(u64::try_from(changes).unwrap_or(0)),
        other => Err(Error::database(format!(
            "total_changes() returned {other:?}"
        ))),
    }
}
