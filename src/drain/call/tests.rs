use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::*;
use crate::database::faulty::{Fault, FaultyDatabase, Strike};
use crate::database::sqlite::SqliteDatabase;
use crate::manual_clock::ManualClock;
use crate::outbox::{Fate, Message, Outbox};

struct World {
    db: Arc<FaultyDatabase<SqliteDatabase>>,
    outbox: Outbox,
    clock: ManualClock,
}

/// Three messages in an outbox whose batch calls number `failing` (from 1,
/// after the set-up) fail, before running or after they committed.
fn world(failing: Range<u64>, after_commit: bool) -> World {
    let db = Arc::new(FaultyDatabase::new(
        SqliteDatabase::open_in_memory().expect("in-memory SQLite"),
    ));
    let clock = ManualClock::new(Timestamp::from_unix_millis(1_000_000).expect("a time"));
    let outbox = Outbox::builder(db.clone(), "outbox")
        .clock(Arc::new(clock.clone()))
        .build()
        .expect("an outbox");
    outbox
        .create_schema()
        .now_or_never()
        .expect("SQLite is synchronous")
        .expect("schema");
    for n in 0..3 {
        let message = Message::raw_json("mail", format!("{{\"n\":{n}}}"));
        outbox
            .enqueue_alone(message)
            .now_or_never()
            .expect("SQLite is synchronous")
            .expect("enqueued");
    }
    // Counting starts after the set-up.
    db.inject(Fault::Calls {
        first: failing.start,
        count: failing.end.saturating_sub(failing.start),
        strike: if after_commit {
            Strike::AfterCommit
        } else {
            Strike::Before
        },
    });
    World { db, outbox, clock }
}

fn send(world: &World, call: &Call, budget: u32) -> Sent {
    call.send(
        world.db.as_ref(),
        Retries {
            budget,
            clock: &world.clock,
            timer: &world.clock,
        },
    )
    .now_or_never()
    .expect("no backoff is asked for")
}

fn claim_part(world: &World) -> (ClaimStatement, Option<Statement>) {
    let claim = world
        .outbox
        .claim_statement(10, Duration::from_secs(60))
        .expect("a claim");
    let recovery = claim.recovery().ok();
    (claim, recovery)
}

/// Claims the 3 messages in a call of its own (the first of the world).
fn claim_everything(world: &World) -> Claim {
    let mut call = Call::new();
    let (claim, recovery) = claim_part(world);
    let claimed = call.claim(claim, recovery);
    send(world, &call, 10)
        .reply
        .expect("sent")
        .claimed(claimed)
        .expect("claimed")
}

fn completions(world: &World, claim: &Claim) -> (PreparedSettle, Option<Timestamp>) {
    let fates: Vec<_> = claim
        .messages
        .iter()
        .map(|message| (message.lease(), Fate::Complete))
        .collect();
    let until = claim.messages.iter().map(|m| m.lease().until()).min();
    (world.outbox.prepare_fates(&fates).expect("settles"), until)
}

#[test]
fn each_part_is_read_through_its_slot() {
    let world = world(0..0, false);
    let claim = claim_everything(&world);
    assert_eq!(claim.messages.len(), 3);

    let mut second = Call::new();
    let (settle, until) = completions(&world, &claim);
    let settled = second.settle(settle, until);
    let (claim, recovery) = claim_part(&world);
    let claimed = second.claim(claim, recovery);
    let mut reply = send(&world, &second, 10).reply.expect("sent");
    assert_eq!(reply.settled(settled).completed, 3);
    assert!(reply.claimed(claimed).expect("claimed").is_empty());
}

#[test]
fn a_lost_reply_is_sent_again_and_the_claim_read_back() {
    // The first send commits, and its reply is lost.
    let world = world(1..2, true);
    let mut call = Call::new();
    let (claim, recovery) = claim_part(&world);
    let claimed = call.claim(claim, recovery);
    let sent = send(&world, &call, 10);
    assert_eq!(sent.sends, 2);
    let claim = sent
        .reply
        .expect("sent")
        .claimed(claimed)
        .expect("read back");
    assert_eq!(claim.messages.len(), 3);
}

#[test]
fn a_claim_that_did_not_commit_is_unknown_not_empty() {
    // The first send fails before committing: the retry reads nothing
    // back, which says nothing about what is due.
    let world = world(1..2, false);
    let mut call = Call::new();
    let (claim, recovery) = claim_part(&world);
    let claimed = call.claim(claim, recovery);
    let sweep = call.sweep(vec![Statement::new("SELECT 1", vec![])]);
    let sent = send(&world, &call, 10);
    assert_eq!(sent.sends, 2);
    let mut reply = sent.reply.expect("sent");
    assert!(reply.claimed(claimed).is_none());
    assert!(!reply.swept(sweep), "a retry leaves the sweep out");
}

#[test]
fn a_settle_sent_again_after_committing_applies_once() {
    let world = world(2..3, true);
    let claim = claim_everything(&world);
    let mut call = Call::new();
    let (settle, until) = completions(&world, &claim);
    let settled = call.settle(settle, until);
    let sent = send(&world, &call, 10);
    assert_eq!(sent.sends, 2);
    let report = sent.reply.expect("sent").settled(settled);
    // The first send applied them: the second finds the leases gone.
    assert_eq!((report.completed, report.lease_lost.len()), (0, 3));
    assert_eq!(
        world
            .outbox
            .stats()
            .now_or_never()
            .expect("sync")
            .expect("stats")
            .pending,
        0
    );
}

#[test]
fn retries_stop_at_the_budget_and_past_the_leases() {
    let world = world(2..100, false);
    let claim = claim_everything(&world);
    let (settle, until) = completions(&world, &claim);
    let mut call = Call::new();
    let _settled = call.settle(settle.clone(), until);
    let sent = send(&world, &call, 3);
    assert_eq!(sent.sends, 3);
    assert!(sent.reply.is_err());
    assert_eq!(send(&world, &call, 100).sends, MAX_SENDS);
    world.clock.advance(Duration::from_secs(60));
    assert_eq!(send(&world, &call, 100).sends, 1, "the leases have ended");
}

#[test]
fn writes_and_reads_ride_along_and_survive_a_retry() {
    let world = world(1..2, true);
    let mut call = Call::new();
    let (claim, recovery) = claim_part(&world);
    let claimed = call.claim(claim, recovery);
    call.write(vec![
        world
            .outbox
            .streak_failed_statement("mail", "m1", false)
            .expect("a write"),
    ]);
    let streaks = call.read(world.outbox.streaks_statement().expect("a read"));
    let sent = send(&world, &call, 10);
    assert_eq!(sent.sends, 2);
    let mut reply = sent.reply.expect("sent");
    let rows = reply.rows(streaks);
    let read = world.outbox.read_streaks(&rows).expect("streaks");
    assert_eq!(
        read.get("mail")
            .map(|streak| (streak.failing_id.as_str(), streak.several)),
        Some(("m1", false))
    );
    assert_eq!(reply.claimed(claimed).expect("read back").messages.len(), 3);
}

#[test]
fn a_streak_becomes_several_when_another_message_fails() {
    let world = world(0..0, false);
    let write = |id: &str| {
        let mut call = Call::new();
        call.write(vec![
            world
                .outbox
                .streak_failed_statement("mail", id, false)
                .expect("a write"),
        ]);
        let streaks = call.read(world.outbox.streaks_statement().expect("a read"));
        let rows = send(&world, &call, 1).reply.expect("sent").rows(streaks);
        let read = world.outbox.read_streaks(&rows).expect("streaks");
        read.get("mail").map(|streak| streak.several)
    };
    assert_eq!(write("m1"), Some(false));
    assert_eq!(write("m1"), Some(false), "the same message again");
    assert_eq!(write("m2"), Some(true));
    assert_eq!(write("m2"), Some(true), "several stays several");
    world
        .clock
        .advance(crate::outbox::STREAK_MEMORY + Duration::from_secs(1));
    assert_eq!(write("m3"), Some(false), "a forgotten streak starts over");
}

#[test]
fn a_claim_alone_without_recovery_is_not_sent_again() {
    let world = world(1..100, false);
    let mut call = Call::new();
    let (claim, _) = claim_part(&world);
    let _claimed = call.claim(claim, None);
    let sent = send(&world, &call, 10);
    assert_eq!(sent.sends, 1);
    assert!(sent.reply.is_err());
}

/// After the leases of the world's first claim end, another drainer takes
/// one of its rows: its id.
fn another_drainer_takes_one(world: &World) -> String {
    world.clock.advance(Duration::from_secs(61));
    let other = world
        .outbox
        .claim(1, Duration::from_secs(60))
        .now_or_never()
        .expect("sync")
        .expect("claimed");
    assert_eq!(other.messages.len(), 1);
    other.messages[0].id.clone()
}

#[test]
fn a_listed_delete_whose_lease_was_lost_is_sent_again_exact_with_its_claim() {
    let world = world(0..0, false);
    let claim = claim_everything(&world);
    let taken = another_drainer_takes_one(&world);
    let mut call = Call::new();
    let (settle, until) = completions(&world, &claim);
    let settled = call.settle(settle, until);
    let (next, recovery) = claim_part(&world);
    let claimed = call.claim(next, recovery);
    let sent = send(&world, &call, 10);
    // The listed delete's check failed the first send (it changed
    // nothing); the second deleted exactly, and claimed as the first would.
    assert_eq!(sent.sends, 2);
    let mut reply = sent.reply.expect("sent");
    let report = reply.settled(settled);
    assert_eq!(report.completed, 2);
    assert_eq!(report.lease_lost, vec![taken]);
    assert!(reply.claimed(claimed).expect("claimed").is_empty());
    assert_eq!(
        world
            .outbox
            .stats()
            .now_or_never()
            .expect("sync")
            .expect("stats")
            .leased,
        1,
        "the row the other drainer holds"
    );
}

#[test]
fn with_no_call_to_spare_a_listed_delete_is_sent_exact_at_once() {
    let world = world(0..0, false);
    let claim = claim_everything(&world);
    let taken = another_drainer_takes_one(&world);
    let mut call = Call::new();
    let (settle, until) = completions(&world, &claim);
    let settled = call.settle(settle, until);
    let sent = send(&world, &call, 1);
    assert_eq!(sent.sends, 1);
    let report = sent.reply.expect("sent").settled(settled);
    assert_eq!(report.completed, 2);
    assert_eq!(report.lease_lost, vec![taken]);
}
