//! The console in a Worker's fetch handler.

use super::Console;

impl Console {
    /// Answers a Worker's request (see [`handle`](Console::handle)).
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
        // A body is read only where the API reads one, and not past its bound.
        let declared = request
            .headers()
            .get("content-length")?
            .and_then(|length| length.parse::<usize>().ok());
        let reads_body = !matches!(request.method(), worker::Method::Get | worker::Method::Head);
        let body = match declared {
            _ if !reads_body => Vec::new(),
            Some(length) if length > super::api::MAX_BODY => {
                return worker::Response::error("the body is over 64 KiB", 413);
            }
            _ => request.bytes().await?,
        };
        let request = builder.body(body).map_err(|error| {
            worker::Error::RustError(format!("a request the console cannot read: {error}"))
        })?;
        let response = self.handle(request).await;
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
}
