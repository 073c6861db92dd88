//! A [`Database`] wrapper that fails calls on purpose, as a network or a
//! database does: for testing what code does when a call is lost. It can
//! also run code around each call (to time it, or to read the database
//! before it and check what it did), so a test needs no wrapper of its own.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Database, Outcome, Rows, Statement};
use crate::error::{Error, Result, RetryAdvice};
use crate::future::{BoxFuture, MaybeSend, MaybeSync};
use crate::random::{FastRandom, RandomSource};
use crate::time::Timer;

/// When an injected failure strikes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// Before the call runs: nothing changed.
    Before,
    /// After the call committed: the change stands, the reply is lost (the
    /// caller cannot tell this from [`Strike::Before`]).
    AfterCommit,
}

/// Which calls an injected failure strikes, counted from the moment the
/// fault is [injected](FaultyDatabase::inject).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// None: every call goes through.
    None,
    /// Calls number `first ..= first + count - 1` (the next call is number
    /// 1), each struck as `strike` says.
    Calls {
        /// The first call to fail (1 for the next one).
        first: u64,
        /// How many calls in a row fail (`u64::MAX` for every one after).
        count: u64,
        /// When each is struck.
        strike: Strike,
    },
    /// Each call fails with `probability`; of those, `after_commit` (a
    /// share, 0 to 1) after committing. Drawn from a source seeded with
    /// `seed`, so a run is repeatable.
    Random {
        /// The chance that a call fails (0 to 1).
        probability: f64,
        /// The share of failures struck after the commit.
        after_commit: f64,
        /// The seed of the draws.
        seed: u64,
    },
    /// Each call's fate chosen by a function of its statements: to strike
    /// only some calls (the settles, say), or to draw from a source the
    /// test seeds for everything else too. Made by [`Fault::chosen`].
    Chosen(Chooser),
}

impl Fault {
    /// A fault whose `choose` decides each call's fate from its statements
    /// (`None`: it goes through).
    pub fn chosen(choose: impl Fn(&[Statement]) -> Option<Strike> + Send + Sync + 'static) -> Self {
        Fault::Chosen(Chooser(Arc::new(choose)))
    }
}

type Choose = dyn Fn(&[Statement]) -> Option<Strike> + Send + Sync;

/// The function of a [`Fault::Chosen`]; equal only to its own clones.
#[derive(Clone)]
pub struct Chooser(Arc<Choose>);

impl PartialEq for Chooser {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Chooser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chooser(..)")
    }
}

/// Code run around each call a [`FaultyDatabase`] lets through (a call
/// struck before it runs never reaches it).
///
/// `call` is the call on the wrapped database, its result given as one
/// [`Outcome`] per statement whatever the call's kind (a query's rows, an
/// execute's count). `around` returns what the caller is given: `call`'s
/// result as a rule. It may also read or write through `inner`, the wrapped
/// database (those calls are neither faulted nor seen by the hooks), or run
/// other statements in `call`'s place. A fault struck after the commit
/// strikes once `around` returns.
pub trait Around: MaybeSend + MaybeSync {
    /// Runs around one call of `statements`.
    fn around<'a>(
        &'a self,
        inner: &'a dyn Database,
        statements: &'a [Statement],
        call: BoxFuture<'a, Result<Vec<Outcome>>>,
    ) -> BoxFuture<'a, Result<Vec<Outcome>>>;
}

/// A call's result as one outcome per statement, and back.
trait AsOutcomes: Sized {
    fn into_outcomes(self) -> Vec<Outcome>;
    fn from_outcomes(outcomes: Vec<Outcome>) -> Self;
}

impl AsOutcomes for Vec<Outcome> {
    fn into_outcomes(self) -> Vec<Outcome> {
        self
    }
    fn from_outcomes(outcomes: Vec<Outcome>) -> Self {
        outcomes
    }
}

impl AsOutcomes for Outcome {
    fn into_outcomes(self) -> Vec<Outcome> {
        vec![self]
    }
    fn from_outcomes(mut outcomes: Vec<Outcome>) -> Self {
        outcomes.pop().unwrap_or_default()
    }
}

impl AsOutcomes for Rows {
    fn into_outcomes(self) -> Vec<Outcome> {
        Outcome {
            rows_affected: 0,
            rows: self,
        }
        .into_outcomes()
    }
    fn from_outcomes(outcomes: Vec<Outcome>) -> Self {
        Outcome::from_outcomes(outcomes).rows
    }
}

impl AsOutcomes for u64 {
    fn into_outcomes(self) -> Vec<Outcome> {
        Outcome {
            rows_affected: self,
            rows: Rows::default(),
        }
        .into_outcomes()
    }
    fn from_outcomes(outcomes: Vec<Outcome>) -> Self {
        Outcome::from_outcomes(outcomes).rows_affected
    }
}

/// What went through a [`FaultyDatabase`], and what it struck.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Struck {
    /// Calls made since the fault was injected (each `execute`, `query` and
    /// batch is one).
    pub calls: u64,
    /// Calls failed before they ran.
    pub before: u64,
    /// Calls failed after they committed.
    pub after_commit: u64,
}

type Hook = dyn Fn(&[Statement]) + Send + Sync;

/// Wraps any [`Database`] and fails calls as a [`Fault`] says, with the
/// [`RetryAdvice`] chosen (default: [`RetryAdvice::Now`], as D1's "Network
/// connection lost."). It can also delay every call, show every call's
/// statements to a hook before they run, and run code [around](Around)
/// each call that goes through. It implements [`Database`] itself,
/// so it stacks with any adapter and with
/// [`CountingDatabase`](super::counting::CountingDatabase). Clones share the
/// fault and the counts.
///
/// A user testing a handler against a lost reply:
/// ```
/// # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
/// # fn main() -> workers_outbox::Result<()> {
/// # futures_util::FutureExt::now_or_never(async {
/// use std::sync::Arc;
/// use workers_outbox::testing::{Fault, FaultyDatabase, Strike};
/// use workers_outbox::{Batch, Message, Outbox, SqliteDatabase};
///
/// let db = Arc::new(FaultyDatabase::new(SqliteDatabase::open_in_memory()?));
/// let outbox = Outbox::builder(db.clone(), "outbox").build()?;
/// outbox.create_schema().await?;
///
/// // The handler's commit lands, but its reply is lost.
/// db.inject(Fault::Calls { first: 1, count: 1, strike: Strike::AfterCommit });
/// let mut batch = Batch::new(db.clone());
/// let _ = batch.enqueue(&outbox, Message::raw_json("mail", r#"{"to":"ada@example.com"}"#))?;
/// assert!(batch.commit().await.is_err_and(|error| error.is_retryable()));
/// assert_eq!(db.struck().after_commit, 1);
/// // It committed all the same: a retrying handler must expect that.
/// assert_eq!(outbox.stats().await?.pending, 1);
/// # Ok(()) }).expect("SQLite futures complete at once")
/// # }
/// # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
/// # fn main() {}
/// ```
#[derive(Clone)]
pub struct FaultyDatabase<D> {
    inner: D,
    state: Arc<Mutex<State>>,
    advice: RetryAdvice,
    delay: Option<(Arc<dyn Timer>, Duration)>,
    hook: Option<Arc<Hook>>,
    around: Option<Arc<dyn Around>>,
}

struct State {
    fault: Fault,
    random: Option<FastRandom>,
    struck: Struck,
}

impl<D: Database> FaultyDatabase<D> {
    /// Wraps `inner`, failing nothing until a fault is injected.
    pub fn new(inner: D) -> Self {
        FaultyDatabase {
            inner,
            state: Arc::new(Mutex::new(State {
                fault: Fault::None,
                random: None,
                struck: Struck::default(),
            })),
            advice: RetryAdvice::Now,
            delay: None,
            hook: None,
            around: None,
        }
    }

    /// What an injected failure advises the caller (default: retry now).
    #[must_use]
    pub fn advice(mut self, advice: RetryAdvice) -> Self {
        self.advice = advice;
        self
    }

    /// Delays every call by `delay`, on `timer`.
    #[must_use]
    pub fn delay(mut self, timer: Arc<dyn Timer>, delay: Duration) -> Self {
        self.delay = Some((timer, delay));
        self
    }

    /// Shows every call's statements to `hook` before the call runs (a
    /// failure struck before it runs included).
    #[must_use]
    pub fn on_call(mut self, hook: impl Fn(&[Statement]) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Runs `around` around every call that is not struck before it runs.
    #[must_use]
    pub fn around(mut self, around: impl Around + 'static) -> Self {
        self.around = Some(Arc::new(around));
        self
    }

    /// From now on, fails calls as `fault` says; counting starts again.
    pub fn inject(&self, fault: Fault) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.random = match &fault {
            Fault::Random { seed, .. } => Some(FastRandom::seeded(*seed)),
            _ => None,
        };
        state.fault = fault;
        state.struck = Struck::default();
    }

    /// What went through since the fault was injected.
    pub fn struck(&self) -> Struck {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .struck
    }

    /// The wrapped database.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Counts a call and decides its fate: `None` to go through.
    fn decide(&self, statements: &[Statement]) -> Option<Strike> {
        let chooser = match &self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fault
        {
            Fault::Chosen(chooser) => Some(chooser.clone()),
            _ => None,
        };
        // Chosen outside the lock: the function may ask what was struck.
        let chosen = chooser.and_then(|Chooser(choose)| choose(statements));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.struck.calls += 1;
        let call = state.struck.calls;
        let strike = match &state.fault {
            Fault::None => None,
            Fault::Chosen(_) => chosen,
            Fault::Calls {
                first,
                count,
                strike,
            } => {
                // Call 0 does not exist: a fault from 0 starts at the next.
                let first = (*first).max(1);
                (call >= first && call - first < *count).then_some(*strike)
            }
            Fault::Random {
                probability,
                after_commit,
                ..
            } => {
                let (probability, after_commit) = (*probability, *after_commit);
                state.random.as_ref().and_then(|random| {
                    let draw = |share: f64| (random.next_u64() as f64 / u64::MAX as f64) < share;
                    draw(probability).then(|| {
                        if draw(after_commit) {
                            Strike::AfterCommit
                        } else {
                            Strike::Before
                        }
                    })
                })
            }
        };
        if strike == Some(Strike::Before) {
            state.struck.before += 1;
        }
        strike
    }

    /// A call struck after it committed did commit.
    fn committed_and_lost(&self) -> Error {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.struck.after_commit += 1;
        self.lost()
    }

    fn lost(&self) -> Error {
        Error::unavailable("injected: Network connection lost.", self.advice)
    }

    /// Makes the call `call` builds on the inner database, under the
    /// fault; the inner call is not even built when struck before it runs.
    fn through<'a, T: AsOutcomes + MaybeSend + 'a, F>(
        &'a self,
        statements: &'a [Statement],
        call: impl FnOnce() -> F + MaybeSend + 'a,
    ) -> BoxFuture<'a, Result<T>>
    where
        F: Future<Output = Result<T>> + MaybeSend + 'a,
    {
        Box::pin(async move {
            if let Some((timer, delay)) = &self.delay {
                timer.sleep(*delay).await;
            }
            if let Some(hook) = &self.hook {
                hook(statements);
            }
            let strike = self.decide(statements);
            if strike == Some(Strike::Before) {
                return Err(self.lost());
            }
            let result = match &self.around {
                None => call().await,
                Some(around) => {
                    let call = Box::pin(async move { call().await.map(T::into_outcomes) });
                    let inner: &dyn Database = &self.inner;
                    around
                        .around(inner, statements, call)
                        .await
                        .map(T::from_outcomes)
                }
            };
            match strike {
                Some(Strike::AfterCommit) => {
                    result?;
                    Err(self.committed_and_lost())
                }
                _ => result,
            }
        })
    }
}

impl<D: Database> Database for FaultyDatabase<D> {
    fn dialect(&self) -> super::Dialect {
        self.inner.dialect()
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        self.through(std::slice::from_ref(statement), || {
            self.inner.run(statement)
        })
    }

    // The provided calls go to the inner database's, which may override them.
    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
        self.through(std::slice::from_ref(statement), || {
            self.inner.execute(statement)
        })
    }

    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
        self.through(std::slice::from_ref(statement), || {
            self.inner.query(statement)
        })
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        if statements.is_empty() {
            // Touches nothing, and is no call (as `CountingDatabase` counts).
            return Box::pin(async { Ok(Vec::new()) });
        }
        self.through(statements, || self.inner.batch_atomic(statements))
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        if statements.is_empty() {
            return Box::pin(async { Ok(Vec::new()) });
        }
        self.through(statements, || self.inner.run_atomic(statements))
    }
}

impl<D> std::fmt::Debug for FaultyDatabase<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("FaultyDatabase")
            .field("fault", &state.fault)
            .field("struck", &state.struck)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "sqlite", not(target_arch = "wasm32")))]
mod tests {
    use std::sync::Mutex;

    use futures_util::FutureExt;

    use super::*;
    use crate::database::sqlite::SqliteDatabase;

    fn db() -> FaultyDatabase<SqliteDatabase> {
        let db = FaultyDatabase::new(SqliteDatabase::open_in_memory().expect("SQLite"));
        let create = Statement::new("CREATE TABLE t (n INTEGER)", vec![]);
        db.execute(&create)
            .now_or_never()
            .expect("sync")
            .expect("table");
        db
    }

    fn insert(db: &FaultyDatabase<SqliteDatabase>) -> Result<u64> {
        let insert = Statement::new("INSERT INTO t (n) VALUES (1)", vec![]);
        db.execute(&insert).now_or_never().expect("sync")
    }

    fn rows(db: &FaultyDatabase<SqliteDatabase>) -> usize {
        let select = Statement::new("SELECT n FROM t", vec![]);
        let rows = db.inner().query(&select).now_or_never().expect("sync");
        rows.expect("rows").len()
    }

    #[test]
    fn chosen_calls_fail_before_or_after_their_commit() {
        let db = db();
        db.inject(Fault::Calls {
            first: 2,
            count: 2,
            strike: Strike::Before,
        });
        assert!(insert(&db).is_ok());
        let error = insert(&db).expect_err("the second call fails");
        assert!(error.is_retryable());
        assert!(insert(&db).is_err());
        assert!(insert(&db).is_ok());
        assert_eq!(rows(&db), 2, "the failed calls changed nothing");
        db.inject(Fault::Calls {
            first: 1,
            count: 1,
            strike: Strike::AfterCommit,
        });
        assert!(insert(&db).is_err());
        assert_eq!(rows(&db), 3, "it committed all the same");
        let struck = db.struck();
        assert_eq!(
            (struck.calls, struck.before, struck.after_commit),
            (1, 0, 1)
        );
        let nothing = db.batch_atomic(&[]).now_or_never().expect("sync");
        assert!(nothing.is_ok_and(|outcomes| outcomes.is_empty()));
        assert_eq!(db.struck().calls, 1, "an empty batch is no call");
        // A call struck after its commit that fails on its own committed
        // nothing, and is not counted as committed.
        db.inject(Fault::Calls {
            first: 0,
            count: 1,
            strike: Strike::AfterCommit,
        });
        let bad = Statement::new("INSERT INTO missing (n) VALUES (1)", vec![]);
        assert!(db.execute(&bad).now_or_never().expect("sync").is_err());
        assert_eq!(db.struck().after_commit, 0);
    }

    #[test]
    fn random_faults_repeat_with_their_seed_and_advise_as_told() {
        let outcomes = || {
            let db = db().advice(RetryAdvice::AfterBackoff);
            db.inject(Fault::Random {
                probability: 0.5,
                after_commit: 0.5,
                seed: 7,
            });
            let results: Vec<bool> = (0..64).map(|_| insert(&db).is_ok()).collect();
            let error = (0..64).find_map(|_| insert(&db).err()).expect("some fail");
            assert_eq!(error.retry_advice(), RetryAdvice::AfterBackoff);
            (results, db.struck())
        };
        let (first, struck) = outcomes();
        assert_eq!(first, outcomes().0, "the same seed, the same faults");
        assert!(struck.before > 0 && struck.after_commit > 0, "{struck:?}");
        assert!(first.iter().any(|ok| *ok));
    }

    #[test]
    fn the_hook_sees_every_call_and_the_delay_waits_on_the_timer() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let clock = crate::manual_clock::ManualClock::new(crate::time::Timestamp::EPOCH);
        let recorded = seen.clone();
        let db = db()
            .on_call(move |statements| {
                let mut seen = recorded.lock().unwrap_or_else(PoisonError::into_inner);
                seen.extend(statements.iter().map(|s| s.sql().to_owned()));
            })
            .delay(Arc::new(clock.clone()), Duration::from_secs(1));
        let insert = Statement::new("INSERT INTO t (n) VALUES (1)", vec![]);
        let mut call = db.execute(&insert);
        assert!((&mut call).now_or_never().is_none(), "waits for the delay");
        assert!(
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
        );
        clock.advance(Duration::from_secs(1));
        let done = call.now_or_never().expect("the delay passed");
        assert_eq!(done.expect("inserted"), 1);
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert_eq!(seen, ["INSERT INTO t (n) VALUES (1)"]);
    }

    /// Counts rows before each call, and answers a query with the count
    /// in place of its own rows.
    struct CountAround(Arc<Mutex<Vec<(i64, u64)>>>);

    impl Around for CountAround {
        fn around<'a>(
            &'a self,
            inner: &'a dyn Database,
            statements: &'a [Statement],
            call: BoxFuture<'a, Result<Vec<Outcome>>>,
        ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
            Box::pin(async move {
                let count = Statement::new("SELECT count(*) AS n FROM t", vec![]);
                let rows = inner.query(&count).await?;
                let before = rows.first().map_or(Ok(0), |row| row.get::<i64>("n"))?;
                if statements[0].sql().starts_with("SELECT") {
                    return inner.run_atomic(std::slice::from_ref(&count)).await;
                }
                let outcomes = call.await?;
                let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
                seen.push((before, outcomes[0].rows_affected));
                Ok(outcomes)
            })
        }
    }

    #[test]
    fn a_chosen_fault_strikes_the_calls_it_picks_and_around_sees_what_goes_through() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let db = db().around(CountAround(seen.clone()));
        db.inject(Fault::chosen(|statements| {
            statements[0]
                .sql()
                .starts_with("INSERT")
                .then_some(Strike::AfterCommit)
        }));
        assert!(insert(&db).is_err(), "struck after its commit");
        assert_eq!(rows(&db), 1, "it committed");
        assert_eq!(
            *seen.lock().unwrap_or_else(PoisonError::into_inner),
            [(0, 1)],
            "around read before the call, and saw the insert's outcome though its reply was lost"
        );
        db.inject(Fault::chosen(|_| Some(Strike::Before)));
        assert!(insert(&db).is_err());
        assert_eq!(rows(&db), 1, "struck before it ran");
        assert_eq!(
            seen.lock().unwrap_or_else(PoisonError::into_inner).len(),
            1,
            "around never saw it"
        );
        db.inject(Fault::None);
        let select = Statement::new("SELECT n FROM t", vec![]);
        let answer = db
            .query(&select)
            .now_or_never()
            .expect("sync")
            .expect("rows");
        assert_eq!(answer.len(), 1, "around answered with its own statement");
        assert!(answer.first().expect("a row").get::<i64>("n").is_ok());
        let struck = db.struck();
        assert_eq!(
            (struck.calls, struck.before, struck.after_commit),
            (1, 0, 0)
        );
    }
}
