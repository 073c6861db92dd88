//! Durable flows started in Cloudflare Workflows: on Workers, the
//! `WorkflowDeliverer` creates one Workflow instance a message, **its
//! instance id the message's id** and its params the message's payload.
//!
//! A relay that runs twice (a reply lost, a lease ended) starts one
//! instance: when `create` fails, the deliverer asks for the instance by its
//! id, and an instance that is there counts as delivered. The `worker`
//! crate has no Workflows binding; this module binds `create({ id, params })`
//! and `get(id)` itself.

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod deliverer;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use deliverer::{WorkflowBinding, WorkflowDeliverer};

use sha2::{Digest, Sha256};

use crate::verdict::Delivery;

/// The most characters of a Workflow instance id.
pub const MAX_INSTANCE_ID_CHARS: usize = 100;

/// The Workflow instance id of outbox message `id`: the id itself when
/// Workflows takes it (`^[a-zA-Z0-9_][a-zA-Z0-9-_]*$`, at most
/// [`MAX_INSTANCE_ID_CHARS`]: every generated message id); otherwise the id
/// with each other character written as `-`, cut to fit, and 16 hex digits
/// of its SHA-256 (an endpoint delivery `evt_1:ep_2` becomes
/// `xevt_1-ep_2-…`). The same message always gets the same instance id;
/// two ids share one only if one was made to look like the other's mapping.
pub fn instance_id_of(id: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let taken = !id.is_empty()
        && id.len() <= MAX_INSTANCE_ID_CHARS
        && !id.starts_with('-')
        && id.chars().all(allowed);
    if taken {
        return id.to_owned();
    }
    let digest = Sha256::digest(id.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let mapped: String = id
        .chars()
        .map(|c| if allowed(c) { c } else { '-' })
        .take(MAX_INSTANCE_ID_CHARS - hash.len() - 2)
        .collect();
    // Mapped ids start with `x`, which no generated (ULID) id does.
    format!("x{mapped}-{hash}")
}

/// The verdict of a failed `create` whose instance is not there either, by
/// what the error says: a rate limit (`rate limit`, `too many requests`,
/// `throttl…`, or the code `429`) is [unavailable](Delivery::Unavailable)
/// (no attempt spent); a request Workflows will never take (`invalid`, `too
/// large`, `not serializable`, `could not be cloned`) is
/// [permanent](Delivery::Permanent); anything else is
/// [retried](Delivery::Retry).
pub fn verdict_of(error: &str) -> Delivery {
    verdict_for(None, None, error)
}

/// [`verdict_of`]`(error)`, its message naming `workflow`; neither the
/// Workflow's name nor the `instance` id is read, so neither can steer the
/// verdict.
pub(crate) fn verdict_for(workflow: Option<&str>, instance: Option<&str>, error: &str) -> Delivery {
    let said = match instance {
        Some(instance) if !instance.is_empty() => error.replace(instance, "<instance>"),
        _ => error.to_owned(),
    }
    .to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|word| said.contains(word));
    // 429 as a word of its own, not digits inside an id.
    let code_429 = said
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| word == "429");
    let error = match workflow {
        Some(name) => format!("the {name} instance was not created: {error}"),
        None => format!("the Workflow instance was not created: {error}"),
    };
    if code_429 || says(&["rate limit", "too many requests", "throttl"]) {
        Delivery::unavailable(error, None)
    } else if says(&[
        "invalid",
        "too large",
        "not serializable",
        "could not be cloned",
    ]) {
        Delivery::permanent(error)
    } else {
        Delivery::retry(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_id_is_its_own_instance_id() {
        assert_eq!(instance_id_of("01JABCDEF"), "01JABCDEF");
        assert_eq!(instance_id_of("order_1-a"), "order_1-a");
    }

    #[test]
    fn other_ids_map_to_valid_distinct_stable_instance_ids() {
        let valid = |id: &str| {
            id.len() <= MAX_INSTANCE_ID_CHARS
                && id
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        let long = "a".repeat(300);
        let ids = [
            "evt_1:ep_2",
            "evt_1-ep_2x",
            "-lead",
            "",
            long.as_str(),
            "évt 1",
        ];
        let mapped: Vec<String> = ids.iter().map(|id| instance_id_of(id)).collect();
        for (id, instance) in ids.iter().zip(&mapped) {
            assert!(valid(instance), "{id:?} → {instance:?}");
            assert_eq!(&instance_id_of(id), instance, "stable");
        }
        assert!(mapped[0].starts_with("xevt_1-ep_2-"), "{}", mapped[0]);
        let distinct: std::collections::HashSet<&String> = mapped.iter().collect();
        assert_eq!(distinct.len(), mapped.len());
    }

    #[test]
    fn create_errors_map_to_verdicts() {
        assert!(matches!(
            verdict_of("Workflow instance has invalid id"),
            Delivery::Permanent { .. }
        ));
        assert!(matches!(
            verdict_of("429 Too Many Requests"),
            Delivery::Unavailable { .. }
        ));
        assert!(matches!(
            verdict_of("internal error"),
            Delivery::Retry { .. }
        ));
        // Digits that merely hold 429 are no status.
        assert!(matches!(
            verdict_of("instance 14290 failed"),
            Delivery::Retry { .. }
        ));
        assert!(matches!(
            verdict_of("instance x01J429K failed"),
            Delivery::Retry { .. }
        ));
        // Neither the instance id nor the Workflow's own name is read.
        let echoed = verdict_for(
            None,
            Some("invalid-7"),
            "instance invalid-7: internal error",
        );
        assert!(matches!(echoed, Delivery::Retry { .. }), "{echoed:?}");
        let outage = verdict_for(Some("CACHE_INVALIDATION"), None, "internal error");
        assert!(matches!(outage, Delivery::Retry { .. }), "{outage:?}");
        assert!(
            outage
                .error()
                .is_some_and(|e| e.contains("CACHE_INVALIDATION"))
        );
    }
}
