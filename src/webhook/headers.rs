//! Where a receiver's request headers come from.

use crate::future::MaybeSync;

/// A request's headers, looked up by lower-case name: a closure
/// (`|name| …`), on Workers a `worker::Headers`, and (feature `http`, on
/// any target) an `http::HeaderMap`. `Sync` natively, so an
/// inbox's future holding it stays `Send` (see [`crate::future`]).
pub trait HeaderSource: MaybeSync {
    /// The value of header `name`, if present.
    fn header(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String> + MaybeSync> HeaderSource for F {
    fn header(&self, name: &str) -> Option<String> {
        self(name)
    }
}

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl HeaderSource for worker::Headers {
    fn header(&self, name: &str) -> Option<String> {
        self.get(name).ok().flatten()
    }
}

/// The headers of an `http::Request` (axum, hyper, reqwest): a header that
/// is not valid text counts as absent.
#[cfg(feature = "http")]
impl HeaderSource for http::HeaderMap {
    fn header(&self, name: &str) -> Option<String> {
        self.get(name)?.to_str().ok().map(str::to_owned)
    }
}
