//! What an operator reads and does: capped counts per state, pages walked
//! along the primary key, dead letters grouped, replayed or purged by
//! selection.

use std::time::Duration;

use super::{
    CaseResult, Failure, Harness, LEASE, enqueue, enqueue_message, ensure, ensure_eq,
    one_in_each_state,
};
use crate::outbox::{
    BrowseCursor, BrowseFilter, CappedCount, DeadFilter, Listed, Message, MessageState, Outbox,
};
use crate::time::Clock;

fn exactly(count: u64) -> CappedCount {
    CappedCount {
        count,
        capped: false,
    }
}

pub(crate) async fn overview_counts_each_state_up_to_its_cap(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    one_in_each_state(&h, &outbox, 1).await?; // two due: one more, and the head of `k`
    let overview = outbox.overview(100).await?;
    ensure_eq!(overview.due, exactly(2));
    ensure_eq!(overview.scheduled, exactly(1));
    ensure_eq!(overview.leased, exactly(1));
    ensure_eq!(overview.waiting, exactly(1));
    ensure_eq!(overview.dead, exactly(1));
    ensure_eq!(overview.oldest_due_age, Some(Duration::from_secs(7)));
    let capped = outbox.overview(1).await?;
    ensure_eq!(
        capped.due,
        CappedCount {
            count: 1,
            capped: true
        }
    );
    ensure!(capped.dead.capped, "a count that reaches its cap says so");
    ensure!(
        capped.scheduled.capped && capped.leased.capped,
        "scheduled and leased rows share a walk: both are capped when it is"
    );
    ensure!(outbox.overview(0).await.is_err(), "a cap of 0 is refused");
    Ok(())
}

pub(crate) async fn pages_walk_the_key_in_order_and_go_on_after_a_bounded_walk(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let mut ids = Vec::new();
    for n in 0..5 {
        let topic = if n == 4 { "sms" } else { "mail" };
        let subject = if n == 1 { "user-1" } else { "user-2" };
        ids.push(enqueue_message(&outbox, Message::raw_json(topic, "{}").subject(subject)).await?);
        h.clock().advance(Duration::from_millis(1));
    }
    let due = BrowseFilter::new(Listed::Due);
    ensure_eq!(every_page_of_two(&outbox, &due).await?, ids);

    let sms = BrowseFilter {
        topic: Some("sms".into()),
        ..BrowseFilter::new(Listed::Due)
    };
    let first = outbox.browse(&sms, None, 10, 3).await?;
    ensure!(first.messages.is_empty(), "the walk stops at its bound");
    let next = first
        .next
        .ok_or_else(|| super::Failure("no cursor after a full walk".into()))?;
    let second = outbox.browse(&sms, Some(&next), 10, 3).await?;
    ensure_eq!(second.messages.len(), 1);
    ensure_eq!(second.messages[0].message.id, ids[4]);
    ensure!(second.next.is_none(), "the end of the range has no cursor");

    let of_subject = BrowseFilter {
        subject: Some("user-1".into()),
        ..BrowseFilter::new(Listed::Due)
    };
    let found = outbox.browse(&of_subject, None, 10, 100).await?;
    ensure_eq!(
        found
            .messages
            .iter()
            .map(|m| m.message.id.clone())
            .collect::<Vec<_>>(),
        vec![ids[1].clone()]
    );
    let prefix = &ids[3][..ids[3].len() - 2];
    let by_prefix = BrowseFilter {
        id_prefix: Some(prefix.to_owned()),
        ..BrowseFilter::new(Listed::Due)
    };
    let found = outbox.browse(&by_prefix, None, 10, 100).await?;
    ensure!(
        found
            .messages
            .iter()
            .all(|m| m.message.id.starts_with(prefix))
            && found.messages.iter().any(|m| m.message.id == ids[3]),
        "an id prefix finds its ids and no other"
    );

    // Rows due at one instant are paged by id, whatever order they came in;
    // an id prefix finds its ids and no other.
    let same = h.outbox_named("same_instant", 5).await?;
    for id in ["m-c", "m-a", "n-b", "m-b", "mx"] {
        enqueue_message(&same, Message::raw_json("t", "{}").id(id)).await?;
    }
    ensure_eq!(
        every_page_of_two(&same, &due).await?,
        vec!["m-a", "m-b", "m-c", "mx", "n-b"]
    );
    let m_dash = BrowseFilter {
        id_prefix: Some("m-".into()),
        ..BrowseFilter::new(Listed::Due)
    };
    let found: Vec<String> = same
        .browse(&m_dash, None, 10, 100)
        .await?
        .messages
        .into_iter()
        .map(|m| m.message.id)
        .collect();
    ensure_eq!(found, vec!["m-a", "m-b", "m-c"]);

    drop(outbox.claim(1, LEASE).await?);
    let leased = outbox
        .browse(&BrowseFilter::new(Listed::Leased), None, 10, 100)
        .await?;
    ensure_eq!(leased.messages.len(), 1);
    ensure_eq!(leased.messages[0].message.id, ids[0]);
    let scheduled = outbox
        .browse(&BrowseFilter::new(Listed::Scheduled), None, 10, 100)
        .await?;
    ensure!(
        scheduled.messages.is_empty(),
        "a leased row is not scheduled"
    );
    ensure!(
        outbox.browse(&due, None, 0, 100).await.is_err()
            && outbox.browse(&due, None, 10, 0).await.is_err(),
        "a page of 0 or a walk of 0 is refused"
    );
    Ok(())
}

/// The ids of every page of two that `filter` browses, in order (at most
/// ten pages).
async fn every_page_of_two(outbox: &Outbox, filter: &BrowseFilter) -> Result<Vec<String>, Failure> {
    let mut ids = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = outbox.browse(filter, after.as_ref(), 2, 100).await?;
        ids.extend(page.messages.into_iter().map(|m| m.message.id));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    Ok(ids)
}

pub(crate) async fn dead_letters_are_grouped_and_acted_on_by_selection(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for topic in ["mail", "mail", "mail", "sms"] {
        enqueue(&outbox, topic).await?;
    }
    let claim = outbox.claim(4, LEASE).await?;
    for message in &claim.messages {
        let error = if message.topic == "mail" {
            "HTTP 500: down"
        } else {
            "no route"
        };
        outbox.bury(message.lease(), error).await?;
    }
    let alive = enqueue(&outbox, "mail").await?;
    let groups = outbox.dead_letter_groups(100).await?;
    ensure!(groups.complete, "all four were read");
    let summary: Vec<(&str, &str, u64)> = groups
        .groups
        .iter()
        .map(|g| (g.topic.as_str(), g.error_class.as_str(), g.count))
        .collect();
    ensure_eq!(
        summary,
        vec![("mail", "HTTP 500: down", 3), ("sms", "no route", 1)]
    );
    ensure!(
        !outbox.dead_letter_groups(2).await?.complete,
        "a bounded walk says it is partial"
    );

    let mail = outbox
        .dead_letters_of_group("mail", "HTTP 500: down", 2, 100, None)
        .await?;
    ensure_eq!(mail.len(), 2);
    ensure_eq!(outbox.replay_selected(&mail).await?, 2);
    ensure_eq!(outbox.replay_selected(&mail).await?, 0);
    let rest = outbox
        .dead_letters_of_group("mail", "HTTP 500: down", 100, 100, None)
        .await?;
    ensure_eq!(rest.len(), 1);
    let mut selection = rest.clone();
    selection.push(alive.clone());
    ensure_eq!(outbox.purge_selected(&selection).await?, 1);
    let overview = outbox.overview(100).await?;
    ensure_eq!((overview.dead.count, overview.due.count), (1, 3));
    ensure!(
        outbox.replay_selected(&[]).await.is_err(),
        "an empty selection is refused"
    );
    let too_many: Vec<String> = (0..101).map(|n| n.to_string()).collect();
    ensure!(
        outbox.purge_selected(&too_many).await.is_err(),
        "over 100 ids are refused"
    );
    ensure_eq!(outbox.overview(100).await?.due.count, 3);

    // Purging a dead head lets its key's next message go; a group is taken
    // only as far as it had died by the time given.
    let keyed = h.outbox_named("keyed", 5).await?;
    let head =
        enqueue_message(&keyed, Message::raw_json("k", "{}").ordering_key("order-1")).await?;
    let follower =
        enqueue_message(&keyed, Message::raw_json("k", "{}").ordering_key("order-1")).await?;
    let claim = keyed.claim(10, LEASE).await?;
    ensure_eq!(claim.messages.len(), 1);
    keyed.bury(claim.messages[0].lease(), "400: no").await?;
    let listed_at = h.clock().now();
    h.clock().advance(Duration::from_secs(1));
    enqueue(&keyed, "k").await?;
    let later = keyed.claim(10, LEASE).await?;
    for message in &later.messages {
        keyed.bury(message.lease(), "400: no").await?;
    }
    let before_listing = keyed
        .dead_letters_of_group("k", "400: no", 100, 100, Some(listed_at))
        .await?;
    ensure_eq!(before_listing, vec![head.clone()]);
    ensure_eq!(keyed.purge_selected(&before_listing).await?, 1);
    let next = keyed.claim(10, LEASE).await?;
    ensure_eq!(
        next.messages
            .iter()
            .map(|m| m.id.clone())
            .collect::<Vec<_>>(),
        vec![follower]
    );
    Ok(())
}

pub(crate) async fn scheduled_messages_are_made_due_now_and_no_other(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let later = h.later(Duration::from_secs(600))?;
    enqueue_message(&outbox, Message::raw_json("m", "{}").not_before(later)).await?;
    enqueue(&outbox, "m").await?;
    h.clock().advance(Duration::from_millis(1));
    enqueue_message(&outbox, Message::raw_json("m", "{}").ordering_key("k")).await?;
    enqueue_message(&outbox, Message::raw_json("m", "{}").ordering_key("k")).await?;
    let leased = outbox.claim(1, LEASE).await?; // the oldest due row
    ensure_eq!(leased.messages.len(), 1);
    // Every stored message's key, as lists give them.
    let mut keys = Vec::new();
    for listed in Listed::ALL {
        let page = outbox
            .browse(&BrowseFilter::new(listed), None, 10, 100)
            .await?;
        keys.extend(page.messages.iter().map(|m| BrowseCursor::of(&m.message)));
    }
    ensure_eq!(keys.len(), 4);
    let at_later = format!("{}.", later.as_unix_millis());
    let scheduled_key = keys
        .iter()
        .find(|key| key.to_string().starts_with(&at_later))
        .cloned()
        .ok_or_else(|| Failure("the scheduled message is not listed".into()))?;
    let text = scheduled_key.to_string();
    let id = text.split_once('.').map_or("", |(_, id)| id);
    keys.push(BrowseCursor::parse(&format!("1.{id}"))?); // its id, another due time
    ensure_eq!(outbox.reschedule_now(&keys).await?, 1);
    let now = outbox.overview(100).await?;
    ensure_eq!(now.scheduled, exactly(0));
    ensure_eq!(now.leased, exactly(1));
    ensure_eq!(now.waiting, exactly(1));
    ensure_eq!(now.due, exactly(2)); // the head of `k` and the rescheduled
    // Its key changed with its due time: the old one finds nothing.
    ensure_eq!(outbox.reschedule_now(&[scheduled_key]).await?, 0);
    ensure!(
        outbox.reschedule_now(&[]).await.is_err(),
        "no keys is refused"
    );
    let no_id = BrowseCursor::parse(&at_later)?;
    ensure!(
        outbox.reschedule_now(&[no_id]).await.is_err(),
        "a key without an id is refused"
    );
    Ok(())
}

pub(crate) async fn inbox_keys_are_counted_up_to_a_cap(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    ensure_eq!(inbox.count_keys(10).await?, exactly(0));
    for key in ["a", "b", "c"] {
        inbox.process_once(key, None, &[]).await?;
    }
    ensure_eq!(inbox.count_keys(10).await?, exactly(3));
    ensure_eq!(
        inbox.count_keys(2).await?,
        CappedCount {
            count: 2,
            capped: true
        }
    );
    ensure!(inbox.count_keys(0).await.is_err(), "a cap of 0 is refused");
    Ok(())
}

pub(crate) async fn a_waiting_message_names_the_head_it_waits_on(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let mut heads = Vec::new();
    for key in ["k1", "k2", "k3"] {
        let ordered = || Message::raw_json("m", "{}").ordering_key(key);
        heads.push((key, enqueue_message(&outbox, ordered()).await?));
        for _ in 0..2 {
            enqueue_message(&outbox, ordered()).await?;
        }
    }
    let waiting = BrowseFilter::new(Listed::Waiting);
    let page = outbox.browse(&waiting, None, 10, 100).await?;
    ensure_eq!(page.messages.len(), 6);
    for message in &page.messages {
        let key = message.message.ordering_key.as_deref();
        let head = heads
            .iter()
            .find(|(k, _)| Some(*k) == key)
            .map(|(_, id)| id.as_str());
        let waits_on = message.waits_on.as_ref().map(|h| (h.id.as_str(), h.state));
        ensure_eq!(waits_on, head.map(|id| (id, MessageState::Pending)));
    }
    let claim = outbox.claim(10, LEASE).await?;
    let (_, first) = &heads[0];
    let lease = claim
        .messages
        .iter()
        .find(|m| m.id == *first)
        .ok_or_else(|| Failure("the first head was not claimed".into()))?
        .lease();
    outbox.bury(lease, "400").await?;
    let page = outbox.browse(&waiting, None, 10, 100).await?;
    let of_k1 = page
        .messages
        .iter()
        .find(|m| m.message.ordering_key.as_deref() == Some("k1"))
        .and_then(|m| m.waits_on.as_ref())
        .map(|h| h.state);
    ensure_eq!(of_k1, Some(MessageState::Dead)); // a dead head holds its key
    let dead = outbox
        .browse(&BrowseFilter::new(Listed::Dead), None, 10, 100)
        .await?;
    let dead_waits = dead.messages.first().map(|m| m.waits_on.clone());
    ensure_eq!(dead_waits, Some(None)); // only waiting messages wait
    Ok(())
}

pub(crate) async fn a_message_is_found_by_its_key_in_any_state(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let ordered = || Message::raw_json("mail", "{}").ordering_key("k");
    let head = enqueue_message(&outbox, ordered().subject("s-1")).await?;
    let behind = enqueue_message(&outbox, ordered()).await?;
    let first = |page: crate::outbox::BrowsePage| {
        page.messages
            .into_iter()
            .next()
            .ok_or_else(|| Failure("the list is empty".into()))
    };
    let due = first(
        outbox
            .browse(&BrowseFilter::new(Listed::Due), None, 10, 100)
            .await?,
    )?;
    let key = BrowseCursor::of(&due.message);
    let found = outbox.message_at(&key).await?;
    ensure_eq!(
        found.as_ref().map(|m| m.message.id.as_str()),
        Some(head.as_str())
    );
    ensure_eq!(
        found.and_then(|m| m.message.subject),
        Some("s-1".to_owned())
    );
    let waiting = first(
        outbox
            .browse(&BrowseFilter::new(Listed::Waiting), None, 10, 100)
            .await?,
    )?;
    let found = outbox
        .message_at(&BrowseCursor::of(&waiting.message))
        .await?;
    ensure_eq!(
        found.as_ref().map(|m| m.message.id.as_str()),
        Some(behind.as_str())
    );
    ensure_eq!(
        found.and_then(|m| m.waits_on).map(|h| (h.id, h.state)),
        Some((head.clone(), MessageState::Pending))
    );

    let claim = outbox.claim(10, LEASE).await?;
    ensure!(
        outbox.message_at(&key).await?.is_none(),
        "a claim moves a message to its lease's end: its old key finds nothing"
    );
    let listed = first(
        outbox
            .browse(&BrowseFilter::new(Listed::Leased), None, 10, 100)
            .await?,
    )?;
    let found = outbox
        .message_at(&BrowseCursor::of(&listed.message))
        .await?;
    ensure_eq!(
        found.map(|m| (m.message.id, m.message.state)),
        Some((head.clone(), MessageState::Leased))
    );
    let leased = claim
        .messages
        .first()
        .ok_or_else(|| Failure("the claim took nothing".into()))?;
    outbox.bury(leased.lease(), "HTTP 500: down").await?;
    let dead = first(
        outbox
            .browse(&BrowseFilter::new(Listed::Dead), None, 10, 100)
            .await?,
    )?;
    let found = outbox.message_at(&BrowseCursor::of(&dead.message)).await?;
    ensure_eq!(
        found.map(|m| (m.message.id, m.message.state, m.message.last_error)),
        Some((head, MessageState::Dead, Some("HTTP 500: down".to_owned())))
    );
    ensure!(
        outbox
            .message_at(&BrowseCursor::from(h.clock().now()))
            .await
            .is_err(),
        "a key without an id is refused"
    );
    Ok(())
}

pub(crate) async fn dead_letters_are_counted_and_taken_by_filter(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let start = h.clock().now();
    // Six dead letters, a second apart: topic, subject and error vary.
    let letters = [
        ("mail", "u-1", "HTTP 400: bad address 12"),
        ("mail", "u-2", "HTTP 400: bad address 345"),
        ("mail", "u-1", "HTTP 500: down"),
        ("sms", "u-1", "HTTP 400: bad address 6"),
        ("mail", "u-1", "HTTP 400: bad address 78"),
        ("mail", "u-3", "HTTP 400: unknown template"),
    ];
    let mut ids = Vec::new();
    for (topic, subject, error) in letters {
        ids.push(enqueue_message(&outbox, Message::raw_json(topic, "{}").subject(subject)).await?);
        let claim = outbox.claim(1, LEASE).await?;
        let leased = claim
            .messages
            .first()
            .ok_or_else(|| Failure("the claim took nothing".into()))?;
        outbox.bury(leased.lease(), error).await?;
        h.clock().advance(Duration::from_secs(1));
    }
    let filter = |topic: Option<&str>, class: Option<&str>, subject: Option<&str>| DeadFilter {
        topic: topic.map(str::to_owned),
        error_class: class.map(str::to_owned),
        subject: subject.map(str::to_owned),
        ..DeadFilter::default()
    };
    let bad_address = Some("HTTP 400: bad address #");
    let cases = [
        (filter(None, None, None), 6),
        (filter(Some("mail"), None, None), 5),
        (filter(Some("mail"), bad_address, None), 3),
        (filter(Some("mail"), bad_address, Some("u-1")), 2),
        (filter(None, None, Some("u-1")), 4),
        (filter(Some("push"), None, None), 0),
    ];
    for (wanted, count) in &cases {
        let counted = outbox.count_dead_matching(wanted, 100).await?;
        ensure_eq!(
            (counted.count, counted.scanned, counted.complete),
            (*count, 6, true)
        );
    }
    let exact = outbox
        .count_dead_matching(&filter(None, None, None), 6)
        .await?;
    ensure_eq!((exact.count, exact.scanned), (6, 6));
    let mut since = filter(Some("mail"), bad_address, None);
    since.died_from = Some(start.checked_add(Duration::from_millis(1500))?);
    ensure_eq!(outbox.count_dead_matching(&since, 100).await?.count, 1);
    let cut = outbox
        .count_dead_matching(&filter(None, None, Some("u-1")), 3)
        .await?;
    ensure_eq!((cut.count, cut.scanned, cut.complete), (2, 3, false));

    // Taken a bounded batch at a time, oldest first, each batch acted on.
    let of_u1 = filter(Some("mail"), bad_address, Some("u-1"));
    let first = outbox.dead_letters_matching(&of_u1, 1, 100).await?;
    ensure_eq!(first, vec![ids[0].clone()]);
    ensure_eq!(outbox.replay_selected(&first).await?, 1);
    let second = outbox.dead_letters_matching(&of_u1, 1, 100).await?;
    ensure_eq!(second, vec![ids[4].clone()]);
    ensure_eq!(outbox.purge_selected(&second).await?, 1);
    ensure!(
        outbox
            .dead_letters_matching(&of_u1, 1, 100)
            .await?
            .is_empty(),
        "every match was taken"
    );
    let mut first_two = filter(None, None, None);
    first_two.died_by = Some(start.checked_add(Duration::from_millis(1500))?);
    let taken = outbox.dead_letters_matching(&first_two, 10, 100).await?;
    ensure_eq!(taken, vec![ids[1].clone()]); // ids[0] was replayed
    let mut before = filter(None, None, None);
    before.died_by = Some(start.saturating_sub(Duration::from_millis(1)));
    ensure_eq!(
        outbox.dead_letters_matching(&before, 10, 100).await?.len(),
        0
    );
    ensure!(
        outbox.count_dead_matching(&before, 0).await.is_err(),
        "a scan of 0 is refused"
    );
    Ok(())
}
