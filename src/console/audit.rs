//! The console's share of the audit log: each change is made through an
//! audited handle, so its entry (who, role, route, what it selected)
//! commits with it; what it did is recorded after; operators read the log.

use serde_json::{Value as Json, json};

use super::access::Grant;
use crate::database::Statement;
use crate::endpoint::Endpoints;
use crate::error::Result;
use crate::outbox::{Audit, AuditKey, Outbox};

/// A change being made: its entry, and the outbox whose log it went to once
/// the change was made through an audited handle.
pub(super) struct Change {
    audit: Audit,
    written: Option<(Outbox, AuditKey)>,
}

impl Change {
    /// The change `grant` asks for at `route` with `body`, selecting what
    /// the body names (a secret left out).
    pub(super) fn new(grant: &Grant, route: &str, body: &[u8]) -> Self {
        let mut selection: Json = serde_json::from_slice(body).unwrap_or(Json::Null);
        if let Some(fields) = selection.as_object_mut() {
            fields.remove("secret");
        }
        let role = match grant.role {
            super::Role::Viewer => "viewer",
            super::Role::Operator => "operator",
        };
        Change {
            audit: Audit::new(grant.identity.clone(), role, route, selection),
            written: None,
        }
    }

    /// `outbox`, through a handle whose first write carries the entry.
    pub(super) fn outbox(&mut self, outbox: &Outbox) -> Result<Outbox> {
        let (audited, key) = outbox.audited(&self.audit)?;
        self.written = Some((outbox.clone(), key));
        Ok(audited)
    }

    /// `endpoints`, through a handle whose first write carries the entry.
    pub(super) fn endpoints(&mut self, endpoints: &Endpoints) -> Result<Endpoints> {
        let (audited, key) = endpoints.audited(&self.audit)?;
        self.written = Some((endpoints.outbox().clone(), key));
        Ok(audited)
    }

    /// The entry as a statement of `outbox`'s log, for a batch the console
    /// builds itself.
    pub(super) fn statement(&mut self, outbox: &Outbox) -> Result<Statement> {
        let (statement, key) = outbox.audit_statement(&self.audit)?;
        self.written = Some((outbox.clone(), key));
        Ok(statement)
    }

    /// Records `did` as the result of the change, if its entry was
    /// written (a request that wrote nothing, a filter that matched no
    /// letter, has none). A failure is logged, not answered: the change
    /// stands.
    pub(super) async fn record(self, did: &Json) {
        let Some((outbox, key)) = self.written else {
            return;
        };
        match outbox.record_audit_result(&key, did).await {
            Ok(()) | Err(crate::error::Error::NotFound { .. }) => {}
            Err(error) => log::warn!(
                "{}",
                json!({
                    "event": "outbox.console.audit_result_lost",
                    "entry": key.to_string(), "error": error.to_string(),
                })
            ),
        }
    }
}

/// What an answer says a change did: its plain values and its maps of
/// counts (never an endpoint, a payload or a list).
pub(super) fn what_it_did(answer: &Json) -> Json {
    let plain = |value: &Json| match value {
        Json::Object(fields) => fields.values().all(Json::is_number),
        Json::Array(_) => false,
        _ => true,
    };
    Json::Object(
        answer
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, value)| plain(value))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    )
}
