//! The console in a Worker's fetch handler.

use futures_util::StreamExt;

use super::Console;
use super::router::{self, Admission, MAX_BODY};

impl Console {
    /// Answers a Worker's request (see [`handle`](Console::handle)). A
    /// body is read only after the request was admitted (credentials, role,
    /// origin), and never past 64 KiB: a longer one, declared or streamed,
    /// is answered 413 without reading on.
    ///
    /// ```ignore
    /// if console.serves(&request.path()) {
    ///     return console.handle_worker(request).await;
    /// }
    /// ```
    ///
    /// # Errors
    /// Only when the request's body cannot be read or the response built
    /// (a runtime failure); everything else is a response.
    pub async fn handle_worker(
        &self,
        mut request: worker::Request,
    ) -> worker::Result<worker::Response> {
        let url = request.url()?;
        let mut builder = http::Request::builder()
            .method(request.method().as_ref())
            .uri(url.as_str());
        for (name, value) in request.headers().entries() {
            builder = builder.header(name, value);
        }
        let (parts, ()) = builder
            .body(())
            .map_err(|error| {
                worker::Error::RustError(format!("a request the console cannot read: {error}"))
            })?
            .into_parts();
        let response = match router::admit(self, &parts).await {
            Admission::Answered(response) => response,
            Admission::Api { grant, changes } => {
                let body = if changes {
                    bounded_body(&mut request).await?
                } else {
                    Some(Vec::new())
                };
                match body {
                    Some(body) => router::answer(self, &parts, &grant, &body).await,
                    None => router::too_large(),
                }
            }
        };
        worker_response(response)
    }
}

/// The body, or `None` once it is (or declares itself) over [`MAX_BODY`]:
/// what is past the bound is never read.
async fn bounded_body(request: &mut worker::Request) -> worker::Result<Option<Vec<u8>>> {
    let declared = request
        .headers()
        .get("content-length")?
        .and_then(|length| length.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY) {
        return Ok(None);
    }
    if request.inner().body().is_none() {
        return Ok(Some(Vec::new()));
    }
    let mut stream = request.stream()?;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > MAX_BODY {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

fn worker_response(response: http::Response<String>) -> worker::Result<worker::Response> {
    let headers = worker::Headers::new();
    for (name, value) in response.headers() {
        if let Ok(value) = value.to_str() {
            headers.set(name.as_str(), value)?;
        }
    }
    let status = response.status().as_u16();
    Ok(
        worker::Response::from_bytes(response.into_body().into_bytes())?
            .with_status(status)
            .with_headers(headers),
    )
}
