//! The page, its script and style (in the crate: nothing is fetched from
//! elsewhere), and the headers every console response carries.

use http::{HeaderValue, Response, StatusCode, header};

const HTML: &str = include_str!("assets/console.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");
const ICON: &str = include_str!("assets/favicon.svg");

/// Scripts, styles and requests of the console's own origin only; no
/// framing, no plugins, no forms posted elsewhere.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

pub(super) fn html() -> Response<String> {
    text(StatusCode::OK, "text/html; charset=utf-8", HTML.to_owned())
}

pub(super) fn script() -> Response<String> {
    text(
        StatusCode::OK,
        "text/javascript; charset=utf-8",
        SCRIPT.to_owned(),
    )
}

pub(super) fn style() -> Response<String> {
    text(StatusCode::OK, "text/css; charset=utf-8", STYLE.to_owned())
}

pub(super) fn icon() -> Response<String> {
    text(StatusCode::OK, "image/svg+xml", ICON.to_owned())
}

pub(super) fn json(status: StatusCode, body: &serde_json::Value) -> Response<String> {
    text(status, "application/json", body.to_string())
}

pub(super) fn redirect(to: &str) -> Response<String> {
    let mut response = text(StatusCode::PERMANENT_REDIRECT, "text/plain", String::new());
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
