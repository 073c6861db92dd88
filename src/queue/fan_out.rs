//! Fanned-out drains: a cron run asks for K concurrent drains through a
//! Queue of drain requests, and each request's consumer invocation runs one
//! drain with its own connections and query budget.

use serde::{Deserialize, Serialize};

/// How many concurrent drains a backlog gets.
///
/// Drains of one outbox are already safe together (leases, fencing); each
/// fanned-out drain is one consumer invocation of the drain-request Queue
/// (declare its consumer with `max_batch_size = 1` and `max_concurrency`
/// at least `max_drains`). Queues scales consumer invocations itself, so K
/// requested drains run at most K at once, not always K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FanOut {
    /// The most drains asked for at once.
    pub max_drains: u32,
    /// Due messages one drain is counted on to deliver (about what it
    /// delivers within its deadline: 6 in flight × 45 s ÷ delivery time).
    pub messages_per_drain: u32,
}

impl Default for FanOut {
    /// Up to 16 drains of 1,000 messages each.
    fn default() -> Self {
        FanOut {
            max_drains: 16,
            messages_per_drain: 1_000,
        }
    }
}

impl FanOut {
    /// Drains for `due` due messages: none for none, then one per
    /// `messages_per_drain`, at most `max_drains`.
    pub fn drains_for(&self, due: u64) -> u32 {
        if due == 0 || self.max_drains == 0 {
            return 0;
        }
        let per = u64::from(self.messages_per_drain.max(1));
        let wanted = due.div_ceil(per);
        u32::try_from(wanted).map_or(self.max_drains, |wanted| wanted.clamp(1, self.max_drains))
    }
}

/// One drain asked for: the body of a drain-request Queue message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    /// Which of the run's drains this is (from 0).
    pub index: u32,
    /// How many the run asked for.
    pub of: u32,
    /// When it was asked for (epoch milliseconds).
    pub requested_at: i64,
}

/// Sends `drains` drain requests to `queue` (100 to a `send_batch`). A
/// drain-request consumer should ack a request older than a cron period
/// without draining: the next run asks afresh.
///
/// # Errors
/// [`Error::Unavailable`](crate::error::Error::Unavailable) if the Queue refused
/// them (the next cron run asks again).
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub async fn request_drains(
    queue: &worker::Queue,
    drains: u32,
    now: crate::time::Timestamp,
) -> crate::error::Result<()> {
    let requests: Vec<DrainRequest> = (0..drains)
        .map(|index| DrainRequest {
            index,
            of: drains,
            requested_at: now.as_unix_millis(),
        })
        .collect();
    // `send_batch` takes at most 100 messages.
    for chunk in requests.chunks(super::MAX_BATCH_MESSAGES) {
        queue.send_batch(chunk.to_vec()).await.map_err(|error| {
            crate::error::Error::unavailable(
                format!("could not request drains: {error}"),
                crate::error::RetryAdvice::AfterBackoff,
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_grow_with_the_backlog_up_to_the_maximum() {
        let fan_out = FanOut {
            max_drains: 16,
            messages_per_drain: 1_000,
        };
        let drains: Vec<u32> = [0, 1, 999, 1_000, 1_001, 4_500, 16_000, 1_000_000, u64::MAX]
            .iter()
            .map(|&due| fan_out.drains_for(due))
            .collect();
        assert_eq!(drains, [0, 1, 1, 1, 2, 5, 16, 16, 16]);
        let none = FanOut {
            max_drains: 0,
            ..fan_out
        };
        assert_eq!(none.drains_for(10), 0);
        let zero_per = FanOut {
            messages_per_drain: 0,
            ..fan_out
        };
        assert_eq!(zero_per.drains_for(3), 3);
    }
}
