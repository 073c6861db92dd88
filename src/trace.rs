//! W3C Trace Context (`traceparent`, `tracestate`) carried from the request
//! that enqueued a message to whoever receives it: stored with the message,
//! sent by [`HttpDeliverer`](crate::http) as headers and by the Queue relay
//! inside the [`Envelope`](crate::queue::Envelope).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::webhook::HeaderSource;

/// The `traceparent` header.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header.
pub const TRACESTATE: &str = "tracestate";

/// A validated W3C trace context: a `traceparent` (version 00 or a later
/// version's first four fields) and an optional `tracestate`. Built only by
/// [`parse`](TraceContext::parse), so a malformed value never travels on.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Carried", into = "Carried")]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// The wire form, checked on the way in.
#[derive(Serialize, Deserialize)]
struct Carried {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TryFrom<Carried> for TraceContext {
    type Error = Error;
    fn try_from(carried: Carried) -> Result<Self> {
        TraceContext::parse(&carried.traceparent, carried.tracestate.as_deref())
    }
}

impl From<TraceContext> for Carried {
    fn from(trace: TraceContext) -> Self {
        Carried {
            traceparent: trace.traceparent,
            tracestate: trace.tracestate,
        }
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent)
            .field("tracestate", &self.tracestate)
            .finish()
    }
}

/// The longest `tracestate` kept (the W3C limit for propagation).
const MAX_TRACESTATE: usize = 512;
/// The longest `traceparent` of a later version accepted.
const MAX_TRACEPARENT: usize = 256;

impl TraceContext {
    /// Checks `traceparent` (and `tracestate`, if given) against W3C Trace
    /// Context: `version-trace_id-parent_id-flags` in lower-case hex, ids
    /// not all zeros, version not `ff`; a `tracestate` of at most 32
    /// `key=value` members in at most 512 printable ASCII characters.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the header and what is wrong.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self> {
        let traceparent = traceparent.trim();
        check_traceparent(traceparent).map_err(|why| Error::invalid(TRACEPARENT, why))?;
        let tracestate = match tracestate.map(str::trim) {
            None | Some("") => None,
            Some(state) => {
                check_tracestate(state).map_err(|why| Error::invalid(TRACESTATE, why))?;
                Some(state.to_owned())
            }
        };
        Ok(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The trace context of an incoming request: `None` when it carries no
    /// `traceparent`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed `traceparent` or
    /// `tracestate`. (W3C asks a receiver to ignore a malformed context and
    /// start a new trace: `.ok().flatten()` does.)
    ///
    /// A malformed `tracestate` is dropped and the `traceparent` kept, as
    /// W3C asks (a `tracestate` must not affect the `traceparent`).
    pub fn from_headers(headers: &dyn HeaderSource) -> Result<Option<Self>> {
        let Some(parent) = headers.header(TRACEPARENT) else {
            return Ok(None);
        };
        let mut trace = Self::parse(&parent, None)?;
        trace.tracestate = headers
            .header(TRACESTATE)
            .and_then(|state| Self::parse(&parent, Some(&state)).ok()?.tracestate);
        Ok(Some(trace))
    }

    /// A stored or received context, read leniently: `None` for a value
    /// that does not parse (it can only come from elsewhere, or from rules
    /// that were looser), so that it never costs its message.
    pub(crate) fn read(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = traceparent?;
        match Self::parse(parent, tracestate) {
            Ok(trace) => Some(trace),
            Err(_) => Self::parse(parent, None).ok(),
        }
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lower-case hex digits.
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or_default()
    }
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn check_traceparent(value: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, parent_id, flags, rest @ ..] = parts.as_slice() else {
        return Err("expected version-trace_id-parent_id-flags".into());
    };
    if version.len() != 2 || !is_hex(version) || *version == "ff" {
        return Err(format!(
            "version {version:?} is not two lower-case hex digits below ff"
        ));
    }
    if *version == "00" && !rest.is_empty() {
        return Err("version 00 has exactly four fields".into());
    }
    // A later version may add fields: of lower-case hex, and not many.
    if value.len() > MAX_TRACEPARENT || rest.iter().any(|field| !is_hex(field)) {
        return Err(format!(
            "the fields after the flags are not lower-case hex, or it is over {MAX_TRACEPARENT} bytes"
        ));
    }
    if trace_id.len() != 32 || !is_hex(trace_id) || trace_id.bytes().all(|b| b == b'0') {
        return Err("the trace id is not 32 lower-case hex digits, not all zero".into());
    }
    if parent_id.len() != 16 || !is_hex(parent_id) || parent_id.bytes().all(|b| b == b'0') {
        return Err("the parent id is not 16 lower-case hex digits, not all zero".into());
    }
    if flags.len() != 2 || !is_hex(flags) {
        return Err(format!("flags {flags:?} are not two lower-case hex digits"));
    }
    Ok(())
}

fn check_tracestate(value: &str) -> std::result::Result<(), String> {
    if value.len() > MAX_TRACESTATE {
        return Err(format!(
            "it is {} bytes; at most {MAX_TRACESTATE}",
            value.len()
        ));
    }
    if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return Err("it holds characters other than printable ASCII".into());
    }
    let members: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|member| !member.is_empty())
        .collect();
    if members.len() > 32 {
        return Err(format!("it has {} members; at most 32", members.len()));
    }
    for member in members {
        match member.split_once('=') {
            Some((key, val)) if !key.is_empty() && !val.is_empty() && !val.contains('=') => {}
            _ => return Err(format!("member {member:?} is not key=value")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_spec_example_parses_and_names_its_trace() {
        let trace = TraceContext::parse(PARENT, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.traceparent(), PARENT);
        assert_eq!(
            trace.tracestate(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        // A later version may add fields, of hex only.
        assert!(TraceContext::parse(&format!("01{}-ab-cd", &PARENT[2..]), None).is_ok());
        for tail in ["-x\r\ny: z", "-what", "-"] {
            let parent = format!("01{}{tail}", &PARENT[2..]);
            assert!(TraceContext::parse(&parent, None).is_err(), "{parent:?}");
        }
        let long = format!("01{}-{}", &PARENT[2..], "a".repeat(300));
        assert!(TraceContext::parse(&long, None).is_err());
    }

    #[test]
    fn malformed_values_are_refused_naming_the_header() {
        let bad_parents = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx-injected: 1",
        ];
        for parent in bad_parents {
            match TraceContext::parse(parent, None) {
                Err(Error::InvalidInput { what, .. }) => {
                    assert_eq!(what, TRACEPARENT, "{parent:?}")
                }
                other => panic!("{parent:?}: {other:?}"),
            }
        }
        for state in [
            "novalue",
            "a=1,=2",
            "a=\u{e9}",
            &"k=v,".repeat(40),
            &"x".repeat(600),
        ] {
            match TraceContext::parse(PARENT, Some(state)) {
                Err(Error::InvalidInput { what, .. }) => assert_eq!(what, TRACESTATE, "{state:?}"),
                other => panic!("{state:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn headers_give_a_context_or_none_and_json_is_checked_on_the_way_in() {
        let none = |_: &str| None;
        assert_eq!(TraceContext::from_headers(&none).ok().flatten(), None);
        let some = |name: &str| (name == TRACEPARENT).then(|| PARENT.to_owned());
        let trace = TraceContext::from_headers(&some).ok().flatten();
        assert_eq!(
            trace.as_ref().map(TraceContext::trace_id),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let bad = |name: &str| (name == TRACEPARENT).then(|| "garbage".to_owned());
        assert!(TraceContext::from_headers(&bad).is_err());
        // A bad tracestate costs only itself.
        let bad_state = |name: &str| match name {
            TRACEPARENT => Some(PARENT.to_owned()),
            TRACESTATE => Some("not a member".to_owned()),
            _ => None,
        };
        let kept = TraceContext::from_headers(&bad_state).ok().flatten();
        assert_eq!(kept.as_ref().map(TraceContext::traceparent), Some(PARENT));
        assert_eq!(kept.as_ref().and_then(TraceContext::tracestate), None);
        // Stored values that do not parse are read as no trace.
        assert_eq!(TraceContext::read(Some("garbage"), None), None);
        let read = TraceContext::read(Some(PARENT), Some("bad state"));
        assert_eq!(read.as_ref().map(TraceContext::traceparent), Some(PARENT));
        let json = serde_json::json!({ "traceparent": "garbage" });
        assert!(serde_json::from_value::<TraceContext>(json).is_err());
    }
}
