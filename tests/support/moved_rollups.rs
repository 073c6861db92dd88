//! What the rollup rows' migration must have moved: 0.5's counts of two
//! minutes of topic `mail`, inserted by [`OLD_ROWS`], read back through
//! `Outbox::rollups` (used by the SQLite and the Postgres migration tests).

use workers_outbox::Outbox;
use workers_outbox::outbox::Resolution;

/// 0.5's rows of `outbox_rollups` (period_start, metric, le, count): a row
/// per metric and bucket, two minutes of one hour.
pub(crate) const OLD_ROWS: [(i64, &str, i64, i64); 6] = [
    (3_600_000, "delivered", 0, 3),
    (3_600_000, "lateness_ms", 50, 2),
    (3_600_000, "lateness_ms", -1, 1),
    (3_600_000, "dead_at_claim", 0, 4),
    (3_660_000, "dead", 0, 1),
    (3_660_000, "delivered", 0, 5),
];

/// Asserts that `outbox` reads [`OLD_ROWS`] back, minute by minute.
pub(crate) async fn assert_moved(outbox: &Outbox) {
    let at = |ms| workers_outbox::Timestamp::from_unix_millis(ms).unwrap();
    let minutes = outbox
        .rollups(at(3_600_000), at(3_720_000), Resolution::Minute)
        .await
        .unwrap();
    let seen: Vec<MinuteSeen> = minutes
        .iter()
        .map(|m| {
            let buckets = m
                .lateness
                .buckets()
                .map(|(bound, n)| (bound.map(|b| b.as_millis()), n))
                .collect();
            (m.counts.delivered, m.counts.dead, buckets)
        })
        .collect();
    assert_eq!(
        seen,
        [(3, 4, vec![(Some(50), 2), (None, 1)]), (5, 1, vec![])]
    );
}

/// A minute's delivered and dead counts, and its lateness buckets (bound
/// in ms, count).
type MinuteSeen = (u64, u64, Vec<(Option<u128>, u64)>);
