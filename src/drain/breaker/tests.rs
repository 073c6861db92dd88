use std::time::Duration;

use super::*;
use crate::verdict::Delivery;

fn lease(id: &str, until: i64) -> LeaseHandle {
    LeaseHandle {
        id: id.into(),
        topic: "topic".into(),
        token: "t".into(),
        until: Timestamp::from_unix_millis(until).unwrap_or(Timestamp::EPOCH),
        attempt: 1,
        ordering_key: None,
        deferrals: 0,
        created_at: Timestamp::EPOCH,
        became_due: None,
        unsettled: Some(0),
    }
}

fn failure(id: &str) -> Settle {
    (lease(id, 1_000), Delivery::retry("500").into())
}

fn charged(settles: &[Settle]) -> Vec<bool> {
    settles
        .iter()
        .map(|(_, fate)| matches!(fate, Fate::Reschedule { charged: true, .. }))
        .collect()
}

/// A breaker whose run has read an empty memory.
fn breaker() -> Breaker {
    let mut breaker = Breaker::new(Some(CircuitBreaker {
        failures: 3,
        cooldown: Duration::from_secs(60),
    }));
    breaker.remember(BTreeMap::new());
    breaker
}

#[test]
fn failures_before_an_answer_are_the_messages_own() {
    let mut breaker = breaker();
    assert!(breaker.failed("mail", failure("a")).is_empty());
    assert!(breaker.failed("mail", failure("b")).is_empty());
    assert_eq!(charged(&breaker.answered("mail")), [true, true]);
    assert!(!breaker.is_open("mail"));
}

#[test]
fn a_streak_of_distinct_messages_trips_the_topic_and_spends_nothing() {
    let mut breaker = breaker();
    breaker.failed("mail", failure("a"));
    breaker.failed("mail", failure("b"));
    let handed_back = breaker.failed("mail", failure("c"));
    assert_eq!(charged(&handed_back), [false, false, false]);
    assert!(handed_back.iter().all(|(_, fate)| matches!(
        fate,
        Fate::Reschedule { not_before: Some(wait), .. } if *wait == Duration::from_secs(60)
    )));
    assert!(breaker.is_open("mail") && !breaker.is_open("webhook"));
    assert_eq!(charged(&breaker.failed("mail", failure("d"))), [false]);
    assert_eq!(breaker.tripped(), ["mail"]);
}

#[test]
fn one_message_failing_again_and_again_never_trips() {
    let mut breaker = breaker();
    for _ in 0..10 {
        assert_eq!(
            charged(&failed_now(&mut breaker, "mail", failure("a"))),
            [true]
        );
    }
    assert!(!breaker.is_open("mail"));
}

#[test]
fn a_streak_that_does_not_trip_is_settled_as_reported() {
    let mut breaker = breaker();
    breaker.failed("mail", failure("a"));
    breaker.failed(
        "webhook",
        (lease("b", 5_000), Delivery::retry("500").into()),
    );
    let expiring =
        breaker.take_expiring(Timestamp::from_unix_millis(2_000).unwrap_or(Timestamp::EPOCH));
    assert_eq!(charged(&expiring), [true]);
    assert_eq!(charged(&breaker.take_all()), [true]);
    assert!(breaker.take_all().is_empty());
}

#[test]
fn held_failures_settled_early_still_count_toward_the_streak() {
    let mut breaker = breaker();
    breaker.failed("mail", failure("a"));
    assert_eq!(charged(&breaker.take_all()), [true]);
    breaker.failed("mail", failure("b"));
    let handed_back = breaker.failed("mail", failure("c"));
    assert_eq!(charged(&handed_back), [false, false]);
    assert!(breaker.is_open("mail"));
}

#[test]
fn failures_settled_at_once_count_toward_the_streak() {
    let mut breaker = breaker();
    breaker.failed("mail", failure("a"));
    // Not alone: "a" failed too.
    assert_eq!(
        charged(&failed_now(&mut breaker, "mail", failure("b"))),
        [false, false]
    );
    let handed_back = failed_now(&mut breaker, "mail", failure("c"));
    assert!(breaker.is_open("mail"));
    assert_eq!(charged(&handed_back), [false]);
}

#[test]
fn several_messages_failing_short_of_a_trip_spend_nothing() {
    let mut breaker = breaker();
    breaker.failed("mail", failure("a"));
    breaker.failed("mail", failure("b"));
    assert_eq!(charged(&breaker.take_all()), [false, false]);
}

/// A failure settled at once (a suspect group ended): held, then judged.
fn failed_now(breaker: &mut Breaker, topic: &str, settle: Settle) -> Vec<Settle> {
    let decided = breaker.failed(topic, settle);
    if decided.is_empty() {
        breaker.take_all()
    } else {
        decided
    }
}

fn remembered(failing_id: &str, several: bool) -> BTreeMap<String, Streak> {
    let streak = Streak {
        failing_id: failing_id.into(),
        several,
        stale: false,
    };
    BTreeMap::from([("mail".to_owned(), streak)])
}

#[test]
fn a_streak_remembered_from_earlier_runs_counts() {
    // Another message failed before this run: the receiver is at fault.
    let mut other_failed = breaker();
    other_failed.remember(remembered("z", false));
    assert_eq!(
        charged(&failed_now(&mut other_failed, "mail", failure("a"))),
        [false]
    );
    // The same message failed before, and nothing else: its own fault.
    let mut same_failed = breaker();
    same_failed.remember(remembered("a", false));
    assert_eq!(
        charged(&failed_now(&mut same_failed, "mail", failure("a"))),
        [true]
    );
    let mut several_failed = breaker();
    several_failed.remember(remembered("a", true));
    assert_eq!(
        charged(&failed_now(&mut several_failed, "mail", failure("a"))),
        [false]
    );
}

#[test]
fn without_the_memory_no_failure_is_judged_the_messages_own() {
    let mut breaker = Breaker::new(Some(CircuitBreaker::default()));
    assert_eq!(
        charged(&failed_now(&mut breaker, "mail", failure("a"))),
        [false]
    );
    breaker.answered("mail");
    assert!(
        breaker.take_writes().is_empty(),
        "nothing is written unread"
    );
}

#[test]
fn an_answer_writes_nothing_where_no_streak_is_known() {
    let mut breaker = breaker();
    breaker.answered("mail");
    assert!(breaker.take_writes().is_empty());
    failed_now(&mut breaker, "mail", failure("a"));
    breaker.take_writes();
    breaker.answered("mail");
    assert_eq!(breaker.take_writes().get("mail"), Some(&StreakWrite::Ended));
}

#[test]
fn an_answer_ends_the_remembered_streak() {
    let mut breaker = breaker();
    breaker.remember(remembered("z", true));
    breaker.answered("mail");
    assert_eq!(breaker.take_writes().get("mail"), Some(&StreakWrite::Ended));
    assert_eq!(
        charged(&failed_now(&mut breaker, "mail", failure("a"))),
        [true]
    );
    let writes = breaker.take_writes();
    assert_eq!(
        writes.get("mail"),
        Some(&StreakWrite::Failed {
            after_end: false,
            failing_id: "a".into(),
            several: false,
            error: "500".into(),
        })
    );
    assert!(breaker.take_writes().is_empty());
    breaker.failed("mail", failure("b"));
    assert_eq!(
        breaker.take_writes().get("mail"),
        Some(&StreakWrite::Failed {
            after_end: false,
            failing_id: "b".into(),
            several: true,
            error: "500".into(),
        })
    );
}

#[test]
fn without_a_breaker_every_failure_settles_as_reported() {
    let mut off = Breaker::new(None);
    assert_eq!(charged(&off.failed("mail", failure("a"))), [true]);
    assert_eq!(charged(&failed_now(&mut off, "mail", failure("b"))), [true]);
    assert!(off.take_writes().is_empty());
}
