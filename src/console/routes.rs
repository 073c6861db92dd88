//! The API's routes, one variant each: the path and method it answers, who
//! may call it, and the handler that answers it. The router parses a route,
//! checks its access here once (the credentials and cross-site rules were
//! checked before the body was read), then runs its handler; every handler
//! has one shape, `async fn(&mut Call, …names the path gave) -> Result<Json>`.

use http::Method;
use serde_json::Value as Json;

use super::access::Role;
use super::call::{Call, DeadAction, EndpointAction, TopicAction};
use super::{api, endpoints, fleet, subjects};
use crate::error::Result;

/// One route of the API, with the names its path gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route<'p> {
    /// `GET session`
    Session,
    /// `GET outboxes/{name}`
    Overview(&'p str),
    Live(&'p str),
    /// `GET outboxes/{name}/rollups`
    Rollups(&'p str),
    /// `GET outboxes/{name}/messages`
    Messages(&'p str),
    /// `GET outboxes/{name}/message`
    Message(&'p str),
    /// `POST outboxes/{name}/messages/reschedule`
    Reschedule(&'p str),
    /// `GET outboxes/{name}/dead/groups`
    DeadGroups(&'p str),
    /// `GET outboxes/{name}/dead/count`
    DeadCount(&'p str),
    /// `POST outboxes/{name}/dead/{replay|purge}`
    DeadLetters(&'p str, DeadAction),
    /// `POST outboxes/{name}/topics/{pause|resume}`
    Topic(&'p str, TopicAction),
    /// `GET outboxes/{name}/audit`
    Audit(&'p str),
    /// `GET outboxes/{name}/endpoints`
    Endpoints(&'p str),
    /// `GET outboxes/{name}/endpoint`
    Endpoint(&'p str),
    /// `POST outboxes/{name}/endpoint/{action}`
    EndpointAct(&'p str, EndpointAction),
    /// `GET outboxes/{name}/deliveries`
    Deliveries(&'p str),
    /// `GET outboxes/{name}/delivery`
    Delivery(&'p str),
    /// `POST outboxes/{name}/deliveries/replay`
    ReplayDeliveries(&'p str),
    /// `GET fleet`
    Fleet,
    /// `GET inboxes/{name}`
    InboxCount(&'p str),
    /// `GET inboxes/{name}/keys`
    InboxKey(&'p str),
    /// `GET subjects`
    SubjectExport,
    /// `POST subjects/erase`
    SubjectErase,
}

/// Who may call a route: the least role, and whether a tenant's grant
/// (scoped to one endpoint owner) may, the route then acting for that
/// owner only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Access {
    pub(super) role: Role,
    pub(super) tenants: bool,
    /// What a caller below the role is told.
    pub(super) refusal: &'static str,
}

const READ: Access = Access {
    role: Role::Viewer,
    tenants: false,
    refusal: "",
};
const CHANGE: Access = Access {
    role: Role::Operator,
    tenants: false,
    refusal: "only an operator may change anything",
};
const OWNERS_READ: Access = Access {
    tenants: true,
    ..READ
};
const OWNERS_CHANGE: Access = Access {
    tenants: true,
    ..CHANGE
};

impl<'p> Route<'p> {
    /// The route `method` and `segments` (the path under `api/`) name, if
    /// any. A `HEAD` is its `GET`.
    pub(super) fn parse(method: &Method, segments: &[&'p str]) -> Option<Self> {
        use Route as R;
        let get = method == Method::GET || method == Method::HEAD;
        let post = method == Method::POST;
        Some(match segments {
            ["session"] if get => R::Session,
            ["fleet"] if get => R::Fleet,
            ["subjects"] if get => R::SubjectExport,
            ["subjects", "erase"] if post => R::SubjectErase,
            ["inboxes", name] if get => R::InboxCount(name),
            ["inboxes", name, "keys"] if get => R::InboxKey(name),
            ["outboxes", name, rest @ ..] => match rest {
                [] if get => R::Overview(name),
                ["live"] if get => R::Live(name),
                ["rollups"] if get => R::Rollups(name),
                ["messages"] if get => R::Messages(name),
                ["message"] if get => R::Message(name),
                ["messages", "reschedule"] if post => R::Reschedule(name),
                ["dead", "groups"] if get => R::DeadGroups(name),
                ["dead", "count"] if get => R::DeadCount(name),
                ["dead", "replay"] if post => R::DeadLetters(name, DeadAction::Replay),
                ["dead", "purge"] if post => R::DeadLetters(name, DeadAction::Purge),
                ["topics", "pause"] if post => R::Topic(name, TopicAction::Pause),
                ["topics", "resume"] if post => R::Topic(name, TopicAction::Resume),
                ["audit"] if get => R::Audit(name),
                ["endpoints"] if get => R::Endpoints(name),
                ["endpoint"] if get => R::Endpoint(name),
                ["endpoint", action] if post => {
                    R::EndpointAct(name, EndpointAction::parse(action)?)
                }
                ["deliveries"] if get => R::Deliveries(name),
                ["delivery"] if get => R::Delivery(name),
                ["deliveries", "replay"] if post => R::ReplayDeliveries(name),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Who may call it.
    pub(super) fn access(self) -> Access {
        use Route as R;
        match self {
            R::Session | R::Endpoints(_) | R::Endpoint(_) | R::Deliveries(_) | R::Delivery(_) => {
                OWNERS_READ
            }
            R::EndpointAct(..) | R::ReplayDeliveries(_) => OWNERS_CHANGE,
            R::Audit(_) => Access {
                refusal: "only an operator may read the audit log",
                ..CHANGE
            },
            R::SubjectExport => Access {
                refusal: "only an operator may export a subject's data",
                ..CHANGE
            },
            R::Reschedule(_) | R::DeadLetters(..) | R::Topic(..) | R::SubjectErase => CHANGE,
            R::Overview(_)
            | R::Live(_)
            | R::Rollups(_)
            | R::Messages(_)
            | R::Message(_)
            | R::DeadGroups(_)
            | R::DeadCount(_)
            | R::Fleet
            | R::InboxCount(_)
            | R::InboxKey(_) => READ,
        }
    }

    /// Whether it changes anything (its change is audited and logged).
    pub(super) fn changes(self) -> bool {
        use Route as R;
        matches!(
            self,
            R::Reschedule(_)
                | R::DeadLetters(..)
                | R::Topic(..)
                | R::EndpointAct(..)
                | R::ReplayDeliveries(_)
                | R::SubjectErase
        )
    }

    /// Answers it.
    pub(super) async fn run(self, call: &mut Call<'_>) -> Result<Json> {
        use Route as R;
        match self {
            R::Session => api::session(call).await,
            R::Overview(name) => api::overview(call, name).await,
            R::Live(name) => api::live(call, name).await,
            R::Rollups(name) => api::rollups(call, name).await,
            R::Messages(name) => api::messages(call, name).await,
            R::Message(name) => api::message(call, name).await,
            R::Reschedule(name) => api::reschedule(call, name).await,
            R::DeadGroups(name) => api::groups(call, name).await,
            R::DeadCount(name) => api::dead_count(call, name).await,
            R::DeadLetters(name, action) => api::dead_letters(call, name, action).await,
            R::Topic(name, action) => api::topic_switch(call, name, action).await,
            R::Audit(name) => api::audit_page(call, name).await,
            R::Endpoints(name) => endpoints::list(call, name).await,
            R::Endpoint(name) => endpoints::detail(call, name).await,
            R::EndpointAct(name, action) => endpoints::act(call, name, action).await,
            R::Deliveries(name) => endpoints::deliveries(call, name).await,
            R::Delivery(name) => endpoints::delivery(call, name).await,
            R::ReplayDeliveries(name) => endpoints::replay(call, name).await,
            R::Fleet => fleet::page(call).await,
            R::InboxCount(name) => api::inbox_count(call, name).await,
            R::InboxKey(name) => api::inbox_key(call, name).await,
            R::SubjectExport => subjects::export(call).await,
            R::SubjectErase => subjects::erase(call).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: Method, path: &str) -> Option<Route<'_>> {
        let segments: Vec<&str> = path.split('/').collect();
        Route::parse(&method, &segments)
    }

    #[test]
    fn each_path_names_its_route_for_its_method_only() {
        assert_eq!(
            route(Method::GET, "outboxes/mail"),
            Some(Route::Overview("mail"))
        );
        assert_eq!(route(Method::HEAD, "fleet"), Some(Route::Fleet));
        assert_eq!(
            route(Method::POST, "outboxes/mail/dead/purge"),
            Some(Route::DeadLetters("mail", DeadAction::Purge))
        );
        assert_eq!(
            route(Method::POST, "outboxes/m/endpoint/rotate"),
            Some(Route::EndpointAct("m", EndpointAction::Rotate))
        );
        for (method, path) in [
            (Method::POST, "outboxes/mail"),
            (Method::GET, "outboxes/mail/dead/replay"),
            (Method::POST, "outboxes/m/endpoint/delete"),
            (Method::DELETE, "session"),
            (Method::GET, "outboxes/mail/messages/extra"),
            (Method::GET, ""),
        ] {
            assert_eq!(route(method.clone(), path), None, "{method} {path}");
        }
    }

    #[test]
    fn tenants_reach_their_endpoint_routes_only_and_changes_need_an_operator() {
        let tenants: Vec<&str> = [
            "session",
            "outboxes/m",
            "outboxes/m/messages",
            "outboxes/m/endpoints",
            "outboxes/m/endpoint",
            "outboxes/m/deliveries",
            "outboxes/m/delivery",
            "outboxes/m/audit",
            "fleet",
            "subjects",
            "inboxes/i",
        ]
        .into_iter()
        .filter(|path| route(Method::GET, path).is_some_and(|r| r.access().tenants))
        .collect();
        assert_eq!(
            tenants,
            [
                "session",
                "outboxes/m/endpoints",
                "outboxes/m/endpoint",
                "outboxes/m/deliveries",
                "outboxes/m/delivery"
            ]
        );
        for path in [
            "outboxes/m/dead/replay",
            "outboxes/m/topics/pause",
            "outboxes/m/messages/reschedule",
            "outboxes/m/endpoint/enable",
            "outboxes/m/deliveries/replay",
            "subjects/erase",
        ] {
            let access = route(Method::POST, path).map(Route::access);
            assert_eq!(access.map(|a| a.role), Some(Role::Operator), "{path}");
        }
    }
}
