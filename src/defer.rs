//! "Do this after the response": the seam between the outbox and the
//! runtime that runs background work.
//!
//! A deferred task is an opportunity, not a promise: the runtime may drop it
//! (eviction, deadline, shutdown). Deferred outbox deliveries are safe to
//! lose because the message is already stored; a drain delivers it later.

use crate::future::BoxFuture;

/// Runs a task after the current request, if the runtime lets it.
pub trait Defer {
    /// Hands `task` to the runtime. Never blocks; never fails the caller.
    fn defer(&self, task: BoxFuture<'static, ()>);
}

/// Defers onto a tokio runtime with `tokio::spawn`.
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
#[derive(Debug, Clone)]
pub struct TokioDefer {
    runtime: tokio::runtime::Handle,
}

#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
impl TokioDefer {
    /// Defers onto `runtime`.
    pub fn new(runtime: tokio::runtime::Handle) -> Self {
        TokioDefer { runtime }
    }

    /// Defers onto the runtime the caller is running on.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) when called
    /// outside a tokio runtime.
    pub fn current() -> crate::error::Result<Self> {
        tokio::runtime::Handle::try_current()
            .map(Self::new)
            .map_err(|error| crate::error::Error::invalid("runtime", error.to_string()))
    }
}

#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
impl Defer for TokioDefer {
    fn defer(&self, task: BoxFuture<'static, ()>) {
        drop(self.runtime.spawn(task));
    }
}

/// Defers with the Workers runtime's `ctx.wait_until`: the task may run for
/// up to 30 s after the response is sent.
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
#[derive(Debug)]
pub struct WaitUntil<'a> {
    context: &'a worker::Context,
}

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl<'a> WaitUntil<'a> {
    /// Defers with `context`'s `wait_until`.
    pub fn new(context: &'a worker::Context) -> Self {
        WaitUntil { context }
    }
}

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl Defer for WaitUntil<'_> {
    fn defer(&self, task: BoxFuture<'static, ()>) {
        self.context.wait_until(task);
    }
}
