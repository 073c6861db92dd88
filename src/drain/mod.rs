//! The drain, shared by the immediate attempt (`wait_until`) and the
//! scheduled drain (cron).
//!
//! # How a drain runs
//! - **Streaming.** Up to `concurrency` deliveries stay in flight across
//!   claims: no batch waits for its slowest delivery. Finished outcomes are
//!   settled after at most `flush_interval` (and always before their leases
//!   end), and ride along with the next claim in the same atomic call, so a
//!   drain of no-op deliveries costs about one database call per batch.
//! - **Crashes lose little.** A drainer that dies loses only outcomes not yet
//!   settled; their rows come back when their leases end.
//! - **Suspects go in halving groups.** A row whose lease expired without a
//!   settle may have killed its drainer. Suspects are delivered in groups
//!   (64, halved for each further unsettled lease) with nothing else in
//!   flight, and settled at once: a crash splits its group, so poison is
//!   found in O(log n) crashes; only a suspect delivered alone spends its
//!   attempt up front, so a poison message dies after the policy's attempts
//!   and costs no other message one.
//! - **Failing receivers cost no attempts; failing messages do.** A per-run
//!   [`CircuitBreaker`] per topic stops delivering a topic whose receiver
//!   fails repeatedly and hands its messages back free of attempts; several
//!   messages failing in turn spend nothing, one message failing again and
//!   again spends its attempts at the policy's pace (see `CircuitBreaker`).
//! - **Per destination.** With
//!   [`DestinationLimits`], at most so many requests are in flight to one
//!   destination (as [`Deliver::destination`] names it) and at most so many
//!   start per second, across topics; the breaker counts a topic's failures
//!   per destination, so one failing receiver of a topic that fans out stops
//!   only its own messages.
//! - **Limits.** No delivery starts unless it can time out and be settled
//!   before the deadline and its lease, checked at the instant it starts;
//!   claims stop at the query budget, the message cap or the deadline;
//!   transient settle errors are retried.

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod alarm;
mod breaker;
mod call;
mod deliver;
mod destinations;
mod dispatch;
pub(crate) mod drainer;
mod intake;
mod ledger;
pub(crate) mod limits;
mod parts;
mod report;
mod run;
mod settle;

pub use deliver::{
    AttemptLog, AttemptRecord, BatchLimits, Deliver, DeliverBatch, DeliverFn, deliver_fn,
};
pub use destinations::DestinationLimits;
pub use drainer::DrainerBuilder;
pub use limits::CircuitBreaker;
pub(crate) use limits::DrainLimits;
pub use report::{DrainReport, StopReason};
