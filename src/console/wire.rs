//! What the API reads from requests and writes into answers, shared by its
//! routes.

use serde_json::{Value as Json, json};

use super::Console;
use crate::error::{Error, Result};

/// Adds `payload_bytes` and `keys_hidden` to a message's JSON, and blanks
/// its payload and the keys the application chose (dedup and ordering keys,
/// often an address) unless the console shows payloads.
pub(super) fn hide_personal(console: &Console, message: &mut Json) {
    let bytes = message["payload"].as_str().map_or(0, str::len);
    message["payload_bytes"] = json!(bytes);
    let hidden = !console.inner.show_payloads;
    message["keys_hidden"] = json!(hidden);
    if hidden {
        for field in ["payload", "dedup_key", "ordering_key"] {
            message[field] = Json::Null;
        }
    }
}

/// Refuses text with a NUL (Postgres cannot store one: it would be a 500).
pub(super) fn no_nul(what: &'static str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::invalid(what, "holds a NUL character"));
    }
    Ok(())
}

pub(super) fn read_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|error| Error::invalid("request body", error.to_string()))
}
