//! The console as a `tower::Service` (feature `tower`), for axum and hyper.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::Console;
use super::router::{self, Admission, MAX_BODY};

/// Answers every request as [`Console::handle`] does, reading a body only
/// once the request was admitted, and at most 64 KiB of it (413 past that,
/// without reading on). Never fails: its errors
/// are responses. Mount it where the console's prefix is routed without
/// stripping the prefix (axum: `route_service`, `fallback_service`).
impl<B> tower_service::Service<http::Request<B>> for Console
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let console = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let (grant, changes) = match router::admit(&console, &parts).await {
                Admission::Answered(response) => return Ok(response),
                Admission::Api { grant, changes } => (grant, changes),
            };
            let body = if changes {
                match Limited::new(body, MAX_BODY).collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(error) if error.is::<LengthLimitError>() => return Ok(router::too_large()),
                    Err(_) => {
                        return Ok(router::failure(
                            http::StatusCode::BAD_REQUEST,
                            "the request body could not be read",
                        ));
                    }
                }
            } else {
                Default::default()
            };
            Ok(router::answer(&console, &parts, &grant, &body).await)
        })
    }
}
