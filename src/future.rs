//! The crate's `Send` story, decided once.
//!
//! Futures that touch JavaScript (D1, `fetch`, timers) are not `Send`, and on
//! `wasm32` there is only one thread, so `Send` buys nothing there. Natively,
//! the same traits must work under a multi-threaded tokio runtime, where
//! `tokio::spawn` needs `Send` futures.
//!
//! So every trait object and boxed future in this crate is `Send + Sync` on
//! native targets and carries no thread bounds on `wasm32`. Implementors
//! write the same code for both; [`MaybeSend`] and [`MaybeSync`] are blanket
//! implemented, and [`BoxFuture`] picks the right bound for the target.

use std::future::Future;
use std::pin::Pin;

/// `Send` on native targets; no bound on `wasm32`.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSend: Send {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + ?Sized> MaybeSend for T {}

/// `Send` on native targets; no bound on `wasm32`.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSend {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSend for T {}

/// `Sync` on native targets; no bound on `wasm32`.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSync: Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Sync + ?Sized> MaybeSync for T {}

/// `Sync` on native targets; no bound on `wasm32`.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSync for T {}

/// A boxed future: `Send` on native targets, unbounded on `wasm32`.
#[cfg(not(target_arch = "wasm32"))]
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed future: `Send` on native targets, unbounded on `wasm32`.
#[cfg(target_arch = "wasm32")]
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
