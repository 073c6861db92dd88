//! What every handler is given, and the actions a route's path names.

use super::Console;
use super::access::Grant;
use super::audit::Change;
use super::wire::Query;

/// What a handler is given: the console, the caller's grant, the query and
/// headers, the body (empty for a read) and the change it makes, audited.
pub(super) struct Call<'a> {
    pub(super) console: &'a Console,
    pub(super) grant: &'a Grant,
    pub(super) query: &'a Query,
    pub(super) headers: &'a http::HeaderMap,
    pub(super) body: &'a [u8],
    pub(super) change: Change,
}

/// A dead-letter action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeadAction {
    Replay,
    Purge,
}

/// A topic's switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopicAction {
    Pause,
    Resume,
}

/// What may be done to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndpointAction {
    Enable,
    Disable,
    Pause,
    Test,
    Recover,
    Rotate,
}

impl EndpointAction {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            EndpointAction::Enable => "enable",
            EndpointAction::Disable => "disable",
            EndpointAction::Pause => "pause",
            EndpointAction::Test => "test",
            EndpointAction::Recover => "recover",
            EndpointAction::Rotate => "rotate",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        [
            EndpointAction::Enable,
            EndpointAction::Disable,
            EndpointAction::Pause,
            EndpointAction::Test,
            EndpointAction::Recover,
            EndpointAction::Rotate,
        ]
        .into_iter()
        .find(|action| action.as_str() == text)
    }
}
