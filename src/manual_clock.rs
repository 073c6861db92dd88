//! A clock that tests move by hand, which is also their timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::future::BoxFuture;
use crate::time::{Clock, Timer, Timestamp};

/// A clock that only moves when told to: for tests and simulations
/// (feature `testing`).
///
/// It is also a [`Timer`] on its own time: a sleep completes once the clock
/// has been set or advanced past the sleep's deadline. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    shared: Arc<Mutex<ManualState>>,
}

#[derive(Debug)]
struct ManualState {
    now: Timestamp,
    sleepers: Vec<Waker>,
    /// Woken when something starts sleeping (see `someone_sleeps`).
    watchers: Vec<Waker>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            shared: Arc::new(Mutex::new(ManualState {
                now: start,
                sleepers: Vec::new(),
                watchers: Vec::new(),
            })),
        }
    }

    /// Moves the clock to `time` (forwards or backwards) and wakes sleepers.
    pub fn set(&self, time: Timestamp) {
        let sleepers = {
            let mut state = self.lock();
            state.now = time;
            std::mem::take(&mut state.sleepers)
        };
        sleepers.into_iter().for_each(Waker::wake);
    }

    /// Moves the clock forward by `duration`, stopping at [`Timestamp::MAX`].
    pub fn advance(&self, duration: Duration) {
        let next = self.now().checked_add(duration).unwrap_or(Timestamp::MAX);
        self.set(next);
    }

    /// Resolves once something sleeps on this clock: for a driver that
    /// moves time only while the code under test waits for it.
    #[cfg(feature = "conformance")]
    pub(crate) fn someone_sleeps(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut state = self.lock();
            if state.sleepers.is_empty() {
                state.watchers.push(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ManualState> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.lock().now
    }
}

impl Timer for ManualClock {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let deadline = self.now().checked_add(duration).unwrap_or(Timestamp::MAX);
        Box::pin(ManualSleep {
            clock: self.clone(),
            deadline,
        })
    }
}

struct ManualSleep {
    clock: ManualClock,
    deadline: Timestamp,
}

impl Future for ManualSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.clock.lock();
        if state.now >= self.deadline {
            Poll::Ready(())
        } else {
            state.sleepers.push(cx.waker().clone());
            let watchers = std::mem::take(&mut state.watchers);
            drop(state);
            watchers.into_iter().for_each(Waker::wake);
            Poll::Pending
        }
    }
}
