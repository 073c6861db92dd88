//! The outbox: outbound work, recorded in the same atomic batch as the state
//! change that caused it, delivered at least once.
//!
//! # Life of a message
//! ```text
//!  enqueue ──► ready ──claim──► leased ──complete──► (deleted)
//!   │            ▲               │  │
//!   │            └────retry──────┘  └──dead / last attempt──► dead ──replay──► ready
//!   │                                                           └──purge──► (deleted)
//!   └─(ordering key taken)─► waiting ──(previous row of the key deleted)──► ready
//! ```
//! - **ready**: deliverable once `due_at` has passed. A claim leases it:
//!   `due_at` moves to the lease's end and a fresh lease token is written, so
//!   later claims skip it until the lease expires. An expired lease makes the
//!   row due again: a crashed drainer loses nothing.
//! - **Fencing**: `complete`, `retry` and `dead` name the lease they hold and
//!   apply only while it still holds; otherwise they return
//!   [`Error::LeaseLost`](crate::error::Error::LeaseLost) and change nothing.
//! - **Attempts** are spent by outcomes that blame the message: a failed
//!   delivery ([`Delivery::Retry`], [`Delivery::RetryAfter`]), not a receiver
//!   that is down or throttling ([`Delivery::Unavailable`]) and not a claim
//!   or settle call that was lost. A claim never leases a row that has used
//!   all its attempts; it parks it as dead instead.
//! - **Suspects**: a row whose lease expired without any settle may have
//!   crashed its drainer. The next claim marks it (`unsettled_leases`), and
//!   the drainer delivers it in a group of suspects whose size halves with
//!   each unsettled lease, down to alone, under a lease that then spends an
//!   attempt up front: a message that kills its drainer every time dies after
//!   the policy's attempts, and costs no other message an attempt.
//! - **Ordering keys**: rows sharing a key are delivered one at a time in
//!   enqueue order. Only the oldest row of a key is ever `ready`; the rest
//!   wait. A dead row keeps blocking its key until it is replayed (and then
//!   delivered) or purged: ordering is never silently broken.
//! - **Paused topics**: while a topic is paused (by an operator, or by a
//!   receiver's [`Delivery::Gone`]), no claim leases its rows and no attempt
//!   is spent; they wait, due, until [`Outbox::resume_topic`].
//! - **Dedup keys**: while a row with a dedup key is in the table (pending,
//!   leased or dead), enqueueing another message with that key does nothing.
//!
//! Delivery is at least once: a delivery whose settle was lost (crash,
//! timeout, expired lease) is repeated. Receivers should be idempotent, e.g.
//! with an [`Inbox`](crate::inbox::Inbox) key or the message id as idempotency key.

mod alerts;
mod attempts;
mod audit;
mod browse;
pub(crate) mod claim;
mod dead_letters;
mod enqueue;
pub(crate) mod handle;
pub(crate) mod message;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod next_due;
pub mod operational;
mod pause;
mod records;
mod rollups;
mod sealing;
mod settle;
mod stats;
mod subject;
mod topics;

pub(crate) use crate::verdict::Delivery;
pub use alerts::Alert;
pub use attempts::LoggedAttempt;
pub use audit::{Audit, AuditEntry, AuditKey};
pub(crate) use browse::check_scan;
pub use browse::{
    BrowseCursor, BrowseFilter, BrowsePage, BrowsedMessage, CappedCount, DeadCount, DeadFilter,
    DeadLetterGroup, DeadLetterGroups, DueNow, Head, Listed, MAX_SCAN, MAX_SELECTION, Overview,
    error_class,
};
pub(crate) use claim::ClaimStatement;
pub(crate) use claim::ClaimedMessage;
pub(crate) use claim::check_lease;
pub use claim::{Claim, HeldMessage, LeaseHandle, MalformedMessage};

/// How long a drain holds a message whose sealed payload does not open
/// ([`HeldMessage`]) before it tries again: 5 minutes, no attempt spent.
pub const HELD_UNSEALABLE_FOR: std::time::Duration = std::time::Duration::from_secs(5 * 60);
pub use enqueue::{Enqueue, Enqueued};
pub(crate) use handle::Outbox;
pub use handle::OutboxBuilder;
pub(crate) use message::Message;
pub use message::MessageLimits;
pub(crate) use message::check_key;
pub use pause::PausedTopic;
pub use records::{MessageState, StoredMessage};
pub use rollups::{Counts, Histogram, Resolution, Rollup};
pub use sealing::{ResealCursor, Resealed};
pub(crate) use settle::PreparedSettle;
pub use settle::SettleReport;
pub(crate) use settle::{DeathCause, Fate, Observed};
pub use stats::{OutboxStats, OutboxSummary};
#[cfg(all(test, feature = "sqlite", not(target_arch = "wasm32")))]
pub(crate) use topics::STREAK_MEMORY;
pub(crate) use topics::{Streak, StreakWrite};

pub(crate) use crate::sql::{col, state};
