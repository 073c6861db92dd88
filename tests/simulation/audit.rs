//! A second ledger, kept by the database itself: triggers on the outbox
//! table record every change of a row that a rollup counts (a leased row
//! deleted: delivered; parked: dead; a lease given back by a settle:
//! retried, deferred or handed back), read off the row's old and new
//! values. The simulation checks the rollups against it, topic for topic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use workers_outbox::outbox::{Counts, Resolution};
use workers_outbox::testing::ManualClock;
use workers_outbox::{Database, Dialect, Outbox, Statement, Timestamp};

/// How an update of a row is classified (`o` = old, `n` = new values).
fn kind_of_update(o: &str, n: &str) -> String {
    format!(
        "CASE WHEN {n}.state = 'dead' AND {o}.state <> 'dead' THEN 'dead' \
         WHEN {o}.state = 'ready' AND {n}.state = 'ready' AND {o}.lease_token IS NOT NULL \
              AND {n}.lease_token IS NULL THEN \
           CASE WHEN {n}.deferrals = {o}.deferrals + 1 THEN 'deferred' \
                WHEN {n}.attempts > {o}.attempts OR {n}.unsettled_leases < {o}.unsettled_leases \
                THEN 'retried' \
                ELSE 'handed_back' END \
         END"
    )
}

/// The audit table and its triggers, in `dialect`.
pub(crate) fn schema(dialect: Dialect) -> Vec<Statement> {
    let mut sql = vec!["CREATE TABLE audit (topic TEXT NOT NULL, kind TEXT NOT NULL)".to_owned()];
    match dialect {
        Dialect::Postgres => {
            sql.push(format!(
                "CREATE FUNCTION audit_outbox() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 DECLARE kind TEXT; BEGIN \
                 IF TG_OP = 'DELETE' THEN \
                   IF OLD.state = 'ready' AND OLD.lease_token IS NOT NULL THEN \
                     INSERT INTO audit VALUES (OLD.topic, 'delivered'); \
                   END IF; \
                   RETURN OLD; \
                 END IF; \
                 kind := {}; \
                 IF kind IS NOT NULL THEN INSERT INTO audit VALUES (OLD.topic, kind); END IF; \
                 RETURN NEW; END $$",
                kind_of_update("OLD", "NEW")
            ));
            sql.push(
                "CREATE TRIGGER audit_outbox AFTER UPDATE OR DELETE ON outbox \
                 FOR EACH ROW EXECUTE FUNCTION audit_outbox()"
                    .to_owned(),
            );
        }
        _ => {
            sql.push(
                "CREATE TRIGGER audit_delivered AFTER DELETE ON outbox \
                 WHEN OLD.state = 'ready' AND OLD.lease_token IS NOT NULL \
                 BEGIN INSERT INTO audit VALUES (OLD.topic, 'delivered'); END"
                    .to_owned(),
            );
            sql.push(format!(
                "CREATE TRIGGER audit_updated AFTER UPDATE ON outbox BEGIN \
                 INSERT INTO audit SELECT topic, kind FROM \
                 (SELECT OLD.topic AS topic, {} AS kind) WHERE kind IS NOT NULL; END",
                kind_of_update("OLD", "NEW")
            ));
        }
    }
    sql.into_iter()
        .map(|sql| Statement::new(sql, vec![]))
        .collect()
}

type Tally = BTreeMap<(String, &'static str), u64>;

fn tally_counts(tally: &mut Tally, topic: &str, counts: &Counts) {
    for (kind, n) in [
        ("delivered", counts.delivered),
        ("retried", counts.retried),
        ("deferred", counts.deferred),
        ("dead", counts.dead),
        ("handed_back", counts.handed_back),
    ] {
        if n > 0 {
            *tally.entry((topic.to_owned(), kind)).or_default() += n;
        }
    }
}

/// The (topic, kind) pairs where the rollups of the whole run and the audit
/// disagree, with both counts; and how many changes the audit recorded.
pub(crate) async fn differences(
    raw: &Arc<dyn Database>,
    clock: &ManualClock,
    start: Timestamp,
) -> (Vec<String>, u64) {
    let reader = Outbox::builder(raw.clone(), "outbox")
        .clock(Arc::new(clock.clone()))
        .build()
        .expect("outbox");
    let end = workers_outbox::Clock::now(clock)
        .checked_add(Duration::from_secs(3600))
        .expect("in range");
    let mut rolled = Tally::new();
    for rollup in reader
        .rollups(start, end, Resolution::Hour)
        .await
        .expect("rollups read")
    {
        tally_counts(&mut rolled, &rollup.topic, &rollup.counts);
    }
    let rows = raw
        .query(&Statement::new(
            "SELECT topic, kind, COUNT(*) AS n FROM audit GROUP BY topic, kind",
            vec![],
        ))
        .await
        .expect("the audit reads");
    let mut audited = Tally::new();
    for row in rows.iter() {
        let kind: String = row.get("kind").expect("kind");
        let kind = ["delivered", "retried", "deferred", "dead", "handed_back"]
            .into_iter()
            .find(|known| *known == kind)
            .expect("a known kind");
        let n: i64 = row.get("n").expect("n");
        audited.insert(
            (row.get("topic").expect("topic"), kind),
            u64::try_from(n).expect("a count"),
        );
    }
    let audited_changes = audited.values().sum();
    let mut keys: Vec<_> = rolled.keys().chain(audited.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let differences = keys
        .into_iter()
        .filter_map(|key| {
            let (a, b) = (
                rolled.get(&key).copied().unwrap_or(0),
                audited.get(&key).copied().unwrap_or(0),
            );
            (a != b).then(|| format!("{} {}: rollups {a}, audit {b}", key.0, key.1))
        })
        .collect();
    (differences, audited_changes)
}
