//! JSON responses, and the HTTP status for each library error.

use serde::Serialize;
use worker::{Response, Result};
use workers_outbox::Error;

pub(crate) fn json<T: Serialize>(status: u16, body: &T) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

pub(crate) fn json_error(status: u16, message: &str) -> Result<Response> {
    json(status, &serde_json::json!({ "error": message }))
}

/// The response for a library error: the caller's fault (4xx), a passing
/// fault worth retrying (503), or ours (500).
pub(crate) fn error_response(error: &Error) -> Result<Response> {
    let status = match error {
        Error::InvalidInput { .. } => 400,
        Error::NotFound { .. } => 404,
        Error::Conflict { .. } | Error::LeaseLost { .. } => 409,
        Error::Unavailable { .. } => 503,
        _ => 500,
    };
    if status >= 500 {
        log::error!("request failed: {error}");
    }
    let response = json_error(status, &error.to_string())?;
    if status == 503 {
        let mut response = response;
        response.headers_mut().set("retry-after", "1")?;
        return Ok(response);
    }
    Ok(response)
}

/// Reads a request body of at most `limit` bytes.
///
/// # Errors
/// A 413 response for a larger body.
pub(crate) async fn read_body(
    request: &mut worker::Request,
    limit: usize,
) -> Result<std::result::Result<Vec<u8>, Response>> {
    let declared = request
        .headers()
        .get("content-length")?
        .and_then(|length| length.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Ok(Err(too_large(limit)?));
    }
    let body = request.bytes().await?;
    if body.len() > limit {
        return Ok(Err(too_large(limit)?));
    }
    Ok(Ok(body))
}

fn too_large(limit: usize) -> Result<Response> {
    json_error(413, &format!("the body is over {limit} bytes"))
}
