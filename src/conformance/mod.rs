//! The conformance suite: one set of cases every [`Database`] adapter runs,
//! so the outbox and inbox behave the same on SQLite and on D1.
//!
//! Cases are plain async functions over a [`Harness`]; they need no
//! particular runtime, so the SQLite adapter runs them under `cargo test`
//! and the D1 adapter runs the very same cases inside workerd. Differences
//! between backends are [`Capabilities`] flags, never copies of a case.
//!
//! Every case works in its own tables (named after the case's position), so
//! cases can share one database.

mod attempts;
mod audit;
mod batch;
mod batched;
mod browse;
mod claim;
mod dead_letters;
mod delivery;
mod destinations;
mod drain;
mod endpoints;
mod enqueue;
mod fleet;
mod inbox;
mod malformed;
mod ordering;
mod pause;
mod port;
mod promises;
mod rollups;
mod sealed;
mod settle;
mod stats;
mod subject;
mod telemetry;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;

use crate::database::counting::{CallCounts, CountingDatabase};
use crate::database::{Database, Rows, Statement};
use crate::error::Error;
use crate::inbox::Inbox;
use crate::manual_clock::ManualClock;
use crate::outbox::{Message, Outbox, OutboxBuilder};
use crate::random::FastRandom;
use crate::retry::{ExponentialBackoff, RetryPolicy};
use crate::time::Timestamp;

/// What a backend can and cannot do, where that changes an expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether every `i64` round-trips. D1 keeps numbers as doubles, so it
    /// must refuse integers beyond ±2^53 instead.
    pub exact_i64: bool,
    /// Whether a column without `STRICT` holds a value of any type (SQLite),
    /// so a hand-made table can hold a row the outbox cannot decode. Postgres
    /// columns are typed: such rows cannot exist there.
    pub dynamic_typing: bool,
}

impl Capabilities {
    /// Native SQLite.
    pub const SQLITE: Capabilities = Capabilities {
        exact_i64: true,
        dynamic_typing: true,
    };
    /// Cloudflare D1.
    pub const D1: Capabilities = Capabilities {
        exact_i64: false,
        dynamic_typing: true,
    };
    /// A Durable Object's SQL storage (numbers cross as JavaScript doubles).
    pub const DURABLE_OBJECT: Capabilities = Capabilities {
        exact_i64: false,
        dynamic_typing: true,
    };
    /// PostgreSQL, natively or through Hyperdrive.
    pub const POSTGRES: Capabilities = Capabilities {
        exact_i64: true,
        dynamic_typing: false,
    };
}

/// Why a case failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure(format!("unexpected error: {error}"))
    }
}

/// A case's result.
pub type CaseResult = Result<(), Failure>;

/// Fails the case with a message unless `condition` holds.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err($crate::conformance::Failure(format!(
                "{} (at {}:{})",
                format!($($message)+),
                file!(),
                line!()
            )));
        }
    };
}

/// Fails the case unless both sides are equal, showing both.
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {{
        let (left, right) = (&$left, &$right);
        if left != right {
            return Err($crate::conformance::Failure(format!(
                "{} != {}: {:?} != {:?} (at {}:{})",
                stringify!($left),
                stringify!($right),
                left,
                right,
                file!(),
                line!()
            )));
        }
    }};
}

pub(crate) use {ensure, ensure_eq};

/// One named case.
#[derive(Clone, Copy)]
pub struct Case {
    /// `area::what_it_shows`.
    pub name: &'static str,
    run: fn(Harness) -> LocalBoxFuture<'static, CaseResult>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl Case {
    /// Runs the case on `db`, in tables of its own.
    pub async fn run(&self, db: Arc<dyn Database>, capabilities: Capabilities) -> CaseResult {
        let index = cases()
            .iter()
            .position(|case| case.name == self.name)
            .unwrap_or(0);
        (self.run)(Harness::new(db, index, capabilities)).await
    }
}

macro_rules! cases {
    ($($area:ident :: $case:ident),+ $(,)?) => {
        vec![$(Case {
            name: concat!(stringify!($area), "::", stringify!($case)),
            run: |harness| Box::pin($area::$case(harness)),
        }),+]
    };
}

/// Every case, in a stable order.
pub fn cases() -> Vec<Case> {
    cases![
        port::batch_is_all_or_nothing,
        port::a_statement_reads_the_changes_of_the_one_before,
        port::values_round_trip_exactly,
        port::writes_return_rows,
        port::empty_batch_touches_nothing,
        port::errors_say_whether_to_retry,
        enqueue::enqueue_commits_with_the_state_change,
        enqueue::dedup_key_makes_a_repeat_a_no_op,
        enqueue::not_before_delays_delivery,
        enqueue::caller_ids_are_unique,
        enqueue::bad_input_is_refused_and_writes_nothing,
        enqueue::sql_in_text_is_stored_verbatim,
        enqueue::pre_leased_message_settles_in_one_round_trip,
        enqueue::pre_leased_duplicate_is_not_confirmed,
        claim::one_round_trip_per_claim_whatever_the_batch,
        claim::takes_due_rows_oldest_first_up_to_the_limit,
        claim::sub_second_due_times_order_correctly,
        claim::leased_rows_are_skipped_until_the_lease_expires,
        claim::overlapping_claims_never_share_a_row,
        claim::claim_searches_and_never_scans,
        claim::bad_limits_and_leases_are_refused,
        settle::complete_deletes_the_row,
        settle::retry_reschedules_with_jittered_backoff,
        settle::failure_on_the_last_attempt_parks_the_message,
        settle::permanent_failure_parks_the_message,
        settle::stale_holder_is_fenced_and_changes_nothing,
        settle::batched_settle_is_one_round_trip_and_reports_each_row,
        settle::expired_lease_settles_if_nobody_took_it,
        settle::unsettled_leases_spend_attempts_only_when_alone,
        settle::released_lease_does_not_count_an_attempt,
        dead_letters::dead_messages_are_listed_and_replayed,
        dead_letters::replaying_an_unknown_id_is_not_found,
        dead_letters::purge_and_replay_all,
        dead_letters::dead_letters_page_in_order,
        ordering::keyed_messages_go_one_at_a_time_in_order,
        ordering::a_dead_message_blocks_its_key_until_replayed,
        ordering::purging_a_dead_head_releases_its_key,
        stats::stats_count_each_state,
        stats::due_count_is_bounded,
        subject::export_and_erase_reach_every_row_of_a_subject,
        inbox::first_writer_wins_and_repeats_change_nothing,
        inbox::duplicate_is_told_apart_from_other_conflicts,
        inbox::seen_and_purge,
        inbox::bad_keys_are_refused,
        malformed::malformed_rows_are_named_and_buried,
        malformed::times_out_of_range_are_refused,
        drain::drains_everything_and_reports,
        drain::stops_at_its_query_budget,
        drain::stops_at_its_message_cap,
        drain::settles_each_outcome,
        drain::slow_delivery_times_out_and_is_retried,
        drain::respects_its_deadline,
        drain::overlapping_drains_never_deliver_a_leased_row,
        drain::immediate_delivery_costs_one_call,
        delivery::outcomes_ride_along_with_the_next_claim,
        delivery::a_poison_message_costs_no_other_message_an_attempt,
        delivery::suspects_without_poison_are_all_delivered_in_one_drain,
        delivery::one_poison_among_64_suspects_is_found_in_seven_crashes,
        delivery::a_lost_claim_spends_no_attempt,
        delivery::a_long_outage_kills_no_message,
        delivery::a_recovered_receivers_held_messages_are_due_at_once,
        delivery::a_throttling_storm_kills_no_message,
        delivery::retry_after_waits_at_least_the_backoff,
        delivery::a_transient_settle_error_is_retried,
        delivery::a_claim_whose_reply_is_lost_is_read_back,
        ordering::erasing_an_in_flight_message_holds_its_key_until_its_lease_ends,
        batch::parts_are_read_through_their_tickets,
        batch::a_ticket_of_another_batch_is_refused,
        batch::inbox_keys_go_first_and_a_repeat_writes_nothing,
        batch::an_erasure_counts_what_it_removed,
        batch::typed_topics_are_routed_and_decoded,
        batched::batch_calls_stay_within_their_limits,
        batched::a_hung_batch_call_times_out_all_its_messages,
        promises::no_delivery_starts_on_a_lease_without_room,
        promises::no_batch_call_starts_on_a_lease_without_room,
        promises::a_message_failing_alone_dies_at_the_policys_pace,
        promises::the_head_of_a_key_failing_alone_dies_and_its_key_waits_as_ordered,
        promises::a_poison_webhook_among_healthy_ones_dies_alone,
        subject::nothing_carrying_an_erased_subject_is_written_again,
        subject::each_erasure_records_a_tombstone,
        subject::a_tombstone_is_forgotten_after_its_memory,
        pause::a_paused_topic_is_not_drained_and_spends_nothing,
        pause::resuming_makes_its_held_messages_due_at_once,
        pause::resuming_makes_the_messages_a_pausing_drain_held_due_at_once,
        pause::a_gone_destination_pauses_its_topic_without_spending,
        pause::a_stale_holders_gone_pauses_nothing,
        pause::a_leased_enqueue_of_a_paused_topic_is_not_delivered_at_once,
        endpoints::an_event_fans_out_in_the_business_batch_or_not_at_all,
        endpoints::one_endpoints_gone_disables_it_and_no_other,
        endpoints::a_disabled_endpoint_spends_no_attempts_and_loses_nothing,
        endpoints::a_rotated_secret_signs_beside_the_old_until_it_expires,
        endpoints::a_delivery_uses_its_endpoints_url_and_secret_at_the_attempt,
        endpoints::platform_endpoints_are_allowed_stored_and_fanned_out_alike,
        endpoints::an_endpoint_answers_to_its_owner_only,
        endpoints::bad_endpoints_and_events_are_refused_and_write_nothing,
        endpoints::an_endpoint_is_given_the_events_since_a_time,
        endpoints::an_ordering_key_orders_each_endpoints_deliveries_alone,
        endpoints::operational_events_reach_the_operators_endpoints,
        endpoints::a_receiver_failing_too_long_is_told_once_and_then_its_recovery,
        endpoints::messages_a_claim_parks_as_dead_are_told_in_its_batch,
        endpoints::an_operators_own_failing_endpoint_is_not_reported,
        endpoints::a_filter_lets_through_only_the_events_it_matches,
        endpoints::every_owners_endpoints_page_and_a_test_event_reaches_one,
        audit::an_audit_entry_commits_with_its_change_once_or_not_at_all,
        endpoints::alerts_are_told_once_per_window_by_the_sweep_of_a_drain,
        attempts::failures_are_logged_in_the_settle_call_and_bounded_per_message,
        attempts::the_attempt_log_is_kept_for_its_retention_and_erased_with_its_subject,
        attempts::hostile_answers_are_logged_in_bounded_statements_and_settle,
        destinations::a_failing_receiver_of_a_fanned_out_topic_stops_only_its_own_messages,
        destinations::destination_limits_hold_across_topics_and_spare_other_destinations,
        destinations::a_destination_s_own_rate_holds_without_the_drainer_s_limits,
        destinations::a_slow_destination_gives_its_backlog_back_and_stalls_no_other,
        enqueue::a_trace_context_travels_with_the_message,
        rollups::settles_count_what_they_changed,
        rollups::a_claim_of_many_topics_is_deleted_at_once_and_counted_once,
        rollups::a_stale_holder_counts_nothing_and_a_lost_lease_counts_once,
        rollups::a_claims_deaths_are_counted_with_it,
        rollups::a_drain_counts_durations_suspects_and_trips,
        rollups::minutes_fold_into_hours_and_old_hours_are_forgotten,
        rollups::rollups_off_write_nothing,
        rollups::bad_ranges_are_refused,
        telemetry::a_drain_tells_its_sinks_what_it_settled,
        telemetry::a_claims_deaths_are_told,
        telemetry::a_stale_holders_settle_is_told_as_lease_lost,
        browse::overview_counts_each_state_up_to_its_cap,
        browse::pages_walk_the_key_in_order_and_go_on_after_a_bounded_walk,
        browse::dead_letters_are_grouped_and_acted_on_by_selection,
        browse::scheduled_messages_are_made_due_now_and_no_other,
        browse::inbox_keys_are_counted_up_to_a_cap,
        browse::a_waiting_message_names_the_head_it_waits_on,
        browse::a_message_is_found_by_its_key_in_any_state,
        browse::dead_letters_are_counted_and_taken_by_filter,
        fleet::a_members_drain_reports_its_outbox_to_the_fleet,
        fleet::the_fleet_pages_by_name_dead_letters_and_oldest_due,
        sealed::sealed_payloads_are_stored_sealed_and_delivered_clear,
        sealed::rotation_reseals_old_values_and_rewraps_data_keys,
        sealed::a_payload_that_does_not_open_is_held_not_dead,
        sealed::a_copy_taken_before_an_erasure_cannot_open_the_erased_subjects_payloads,
        sealed::tombstones_and_hashed_keys_match_and_name_nobody,
        sealed::giving_a_ring_loses_no_erasure_of_rows_written_before,
        endpoints::a_filter_reads_sealed_events_at_publish_and_in_a_recovery,
    ]
}

/// What a case works with: the database (counted), a manual clock, seeded
/// randomness, and table names of its own.
pub struct Harness {
    db: Arc<dyn Database>,
    counting: CountingDatabase<Arc<dyn Database>>,
    counted: Arc<dyn Database>,
    clock: ManualClock,
    random: Arc<FastRandom>,
    prefix: String,
    capabilities: Capabilities,
}

/// When every case's clock starts: 2023-11-14T22:13:20Z.
pub const START: i64 = 1_700_000_000_000;
/// The name (after the case's prefix) of the case's own tombstone table:
/// each case's erasures guard its own subjects only.
pub const TOMBSTONES: &str = "erased_subjects";
/// The lease cases use unless they need another.
pub const LEASE: Duration = Duration::from_secs(30);

impl Harness {
    fn new(db: Arc<dyn Database>, index: usize, capabilities: Capabilities) -> Self {
        let counting = CountingDatabase::new(db.clone());
        Harness {
            counted: Arc::new(counting.clone()),
            counting,
            db,
            clock: ManualClock::new(Timestamp::from_unix_millis(START).unwrap_or(Timestamp::EPOCH)),
            random: Arc::new(FastRandom::seeded(index as u64)),
            prefix: format!("c{index:02}"),
            capabilities,
        }
    }

    /// A table name of this case's own.
    pub fn table(&self, name: &str) -> String {
        format!("{}_{name}", self.prefix)
    }

    /// The case's clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// `duration` from now on the case's clock.
    pub fn later(&self, duration: Duration) -> Result<Timestamp, Failure> {
        use crate::time::Clock;
        Ok(self.clock.now().checked_add(duration)?)
    }

    /// Round trips and statements through the counted handle so far.
    pub fn counts(&self) -> CallCounts {
        self.counting.counts()
    }

    /// The counted database handle.
    pub fn db(&self) -> Arc<dyn Database> {
        self.counted.clone()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// An outbox in `<case>_outbox` with 3 attempts and 1 s ..= 10 s backoff,
    /// its table created.
    pub async fn outbox(&self) -> Result<Outbox, Failure> {
        self.outbox_named("outbox", 3).await
    }

    /// An outbox in `<case>_<name>` allowing `max_attempts`.
    pub async fn outbox_named(&self, name: &str, max_attempts: u32) -> Result<Outbox, Failure> {
        let backoff = ExponentialBackoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        };
        self.outbox_backing_off_by(name, max_attempts, backoff)
            .await
    }

    /// An outbox in `<case>_outbox` whose backoffs grow as in production:
    /// from 30 s to an hour, past a cron's period; 8 attempts.
    pub(crate) async fn outbox_backing_off(&self) -> Result<Outbox, Failure> {
        let backoff = ExponentialBackoff {
            base: Duration::from_secs(30),
            cap: Duration::from_secs(3600),
        };
        self.outbox_backing_off_by("outbox", 8, backoff).await
    }

    async fn outbox_backing_off_by(
        &self,
        name: &str,
        max_attempts: u32,
        backoff: ExponentialBackoff,
    ) -> Result<Outbox, Failure> {
        let outbox = self
            .outbox_builder(self.db(), &self.table(name))
            .random(self.random.clone())
            .retry_policy(RetryPolicy::new(max_attempts, backoff)?)
            .build()?;
        self.db.batch_atomic(&outbox.schema_statements()).await?;
        Ok(outbox)
    }

    /// An outbox in `table` of `db` on the case's clock, guarding subjects
    /// with the case's own tombstones.
    pub fn outbox_builder(&self, db: Arc<dyn Database>, table: &str) -> OutboxBuilder {
        Outbox::builder(db, table)
            .tombstones_table(&self.table(TOMBSTONES))
            .clock(Arc::new(self.clock.clone()))
    }

    /// An inbox in `<case>_inbox`, its table created.
    pub async fn inbox(&self) -> Result<Inbox, Failure> {
        let inbox = Inbox::new(self.db(), &self.table("inbox"))?
            .with_tombstones_table(&self.table(TOMBSTONES))?
            .with_clock(Arc::new(self.clock.clone()));
        self.db.batch_atomic(&inbox.schema_statements()).await?;
        Ok(inbox)
    }

    /// Runs raw SQL (see [`statement`](Harness::statement)) on the
    /// uncounted handle.
    pub async fn sql(
        &self,
        sql: &str,
        values: Vec<crate::database::value::Value>,
    ) -> Result<Rows, Failure> {
        Ok(self.db.query(&self.statement(sql, values)).await?)
    }

    /// A statement from SQL written for SQLite, in the database's dialect:
    /// for Postgres, `?` placeholders are numbered and a `CREATE TABLE`'s
    /// SQLite types become Postgres ones (`INTEGER` → `BIGINT`, an
    /// `INTEGER PRIMARY KEY` numbered by default as in SQLite, `REAL` →
    /// `DOUBLE PRECISION`, `BLOB` → `BYTEA`, no `WITHOUT ROWID`).
    pub fn statement(&self, sql: &str, values: Vec<crate::database::value::Value>) -> Statement {
        let dialect = self.db.dialect();
        let mut sql = dialect.number_placeholders(sql);
        if dialect == crate::database::Dialect::Postgres && sql.starts_with("CREATE TABLE") {
            sql = sql
                .replace(" WITHOUT ROWID", "")
                .replace(
                    " INTEGER PRIMARY KEY",
                    " BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                )
                .replace(" INTEGER", " BIGINT")
                .replace(" REAL", " DOUBLE PRECISION")
                .replace(" BLOB", " BYTEA");
        }
        Statement::new(sql, values)
    }

    /// Every row of `table`, in primary-key order: to prove a table unchanged.
    pub async fn snapshot(&self, outbox: &Outbox) -> Result<Rows, Failure> {
        self.sql(
            &format!(
                "SELECT * FROM \"{}\" ORDER BY state, due_at, id",
                outbox.table()
            ),
            vec![],
        )
        .await
    }

    /// How many rows `table` holds.
    pub async fn count(&self, table: &str) -> Result<i64, Failure> {
        let rows = self
            .sql(&format!("SELECT COUNT(*) AS n FROM \"{table}\""), vec![])
            .await?;
        Ok(rows
            .first()
            .map(|row| row.get::<i64>("n"))
            .transpose()?
            .unwrap_or(0))
    }
}

/// Enqueues a plain message on its own and returns its id.
pub(crate) async fn enqueue(outbox: &Outbox, topic: &str) -> Result<String, Failure> {
    enqueue_message(outbox, Message::raw_json(topic, "{}")).await
}

/// Enqueues `message` on its own and returns its id.
pub(crate) async fn enqueue_message(outbox: &Outbox, message: Message) -> Result<String, Failure> {
    let enqueued = outbox.enqueue_alone(message).await?;
    ensure!(enqueued.written, "the enqueue wrote no row");
    Ok(enqueued.id)
}

/// Fills `outbox` with one message in each state: one dead, one leased,
/// the due head of ordering key `k` with one waiting behind it, one
/// scheduled ten minutes on, and `more_due` more due; then lets 7 s pass.
pub(crate) async fn one_in_each_state(
    h: &Harness,
    outbox: &Outbox,
    more_due: usize,
) -> Result<(), Failure> {
    for _ in 0..2 + more_due {
        enqueue(outbox, "dies").await?;
    }
    let claim = outbox.claim(2, LEASE).await?;
    let first = claim
        .messages
        .first()
        .ok_or_else(|| Failure("the claim took nothing".into()))?;
    outbox.bury(first.lease(), "400").await?; // one dead, one leased
    enqueue_message(outbox, Message::raw_json("m", "{}").ordering_key("k")).await?;
    enqueue_message(outbox, Message::raw_json("m", "{}").ordering_key("k")).await?; // waiting
    let later = h.later(Duration::from_secs(600))?;
    enqueue_message(outbox, Message::raw_json("m", "{}").not_before(later)).await?;
    h.clock().advance(Duration::from_secs(7));
    Ok(())
}

/// Enqueues `message` leased to the caller, alone in a batch: the leased
/// message if its row was written.
pub(crate) async fn enqueue_leased(
    h: &Harness,
    outbox: &Outbox,
    message: Message,
) -> Result<Option<crate::outbox::ClaimedMessage>, Failure> {
    let mut batch = crate::batch::Batch::new(h.db());
    let ticket = batch.enqueue_leased(outbox, message, LEASE)?;
    Ok(batch.commit().await?.claimed(ticket)?)
}

/// Gives the other tasks on the executor one turn, whatever the executor.
pub async fn yield_now() {
    struct YieldOnce(bool);
    impl std::future::Future for YieldOnce {
        type Output = ();
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<()> {
            if self.0 {
                std::task::Poll::Ready(())
            } else {
                self.0 = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }
    }
    YieldOnce(false).await;
}

/// The ids of a claim's messages, in claim order.
/// A drainer of `outbox` through `deliver` on the case's clock, with the
/// drain cases' limits and `concurrency` deliveries at once.
pub(crate) fn drainer_through(
    h: &Harness,
    outbox: &Outbox,
    deliver: impl crate::drain::Deliver + 'static,
    concurrency: usize,
) -> Result<crate::drain::drainer::Drainer, Failure> {
    Ok(
        crate::drain::drainer::Drainer::builder(outbox.clone(), deliver)
            .timer(Arc::new(h.clock().clone()))
            .limits(crate::drain::DrainLimits {
                concurrency,
                ..drain::limits()
            })
            .build()?,
    )
}

pub(crate) fn ids(claim: &crate::outbox::Claim) -> Vec<String> {
    claim.messages.iter().map(|m| m.id.clone()).collect()
}
