//! What an operator's console reads of an outbox's rows, each walk bounded
//! however large the table.

use sea_query::{Alias, Expr, ExprTrait, Order, Query, SelectStatement};

use super::dead_letters::STORED_COLUMNS;
use super::{col, one_of, state, state_is};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// One row: `due`, the rows due at `now` counted up to `cap` (a walk of
/// at most `cap` rows of the primary key's due range), and
/// `oldest_due_at`, the first of them (one more read). The live numbers of
/// a console's auto-refresh.
pub(crate) fn due_now(table: &TableName, dialect: Dialect, now: Timestamp, cap: u32) -> Statement {
    let (t, state_col, due_at) = (table.as_str(), col::STATE, col::DUE_AT);
    let ready = state::READY;
    let due = format!("\"{t}\" WHERE {state_col} = '{ready}' AND {due_at} <= ?");
    let now = Value::Integer(now.as_unix_millis());
    Statement::new(
        dialect.number_placeholders(&format!(
            "SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM {due} ORDER BY {due_at} LIMIT ?) \
             AS due_rows) AS due, (SELECT {due_at} FROM {due} ORDER BY {due_at} LIMIT 1) \
             AS oldest_due_at"
        )),
        vec![now.clone(), Value::Integer(i64::from(cap)), now],
    )
}

/// One row: each count walks at most `cap` rows of its state's part of the
/// primary key (`due`, `waiting`, `dead`); scheduled and leased rows share
/// one walk (`later`, and `leased` among them), as they share a range; and
/// `oldest_due_at`.
pub(crate) fn overview(table: &TableName, dialect: Dialect, now: Timestamp, cap: u32) -> Statement {
    let now = Value::Integer(now.as_unix_millis());
    let cap = Value::Integer(i64::from(cap));
    let (t, state, due_at, token) = (table.as_str(), col::STATE, col::DUE_AT, col::LEASE_TOKEN);
    let (ready, waiting, dead) = (state::READY, state::WAITING, state::DEAD);
    let walk = |alias: &str, range: &str| {
        format!(
            "(SELECT count(*) FROM (SELECT 1 AS one FROM \"{t}\" WHERE {range} \
             ORDER BY {due_at} LIMIT ?) AS {alias})"
        )
    };
    let sql = format!(
        "SELECT {due} AS due, \
         (SELECT {due_at} FROM \"{t}\" WHERE {state} = '{ready}' AND {due_at} <= ? \
          ORDER BY {due_at} LIMIT 1) AS oldest_due_at, \
         later.total AS later, later.leased AS leased, \
         {waiting_count} AS waiting, {dead_count} AS dead \
         FROM (SELECT count(*) AS total, count({token}) AS leased FROM \
          (SELECT {token} FROM \"{t}\" WHERE {state} = '{ready}' AND {due_at} > ? \
           ORDER BY {due_at} LIMIT ?) AS later_rows) AS later",
        due = walk(
            "due_rows",
            &format!("{state} = '{ready}' AND {due_at} <= ?")
        ),
        waiting_count = walk("waiting_rows", &format!("{state} = '{waiting}'")),
        dead_count = walk("dead_rows", &format!("{state} = '{dead}'")),
    );
    Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            now.clone(),
            cap.clone(),
            now.clone(),
            cap.clone(),
            cap.clone(),
            now,
            cap,
        ],
    )
}

/// The rows a page of messages walks, in the primary key's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walked {
    /// Due now (an expired lease included).
    Due,
    /// Due later, and not leased.
    Scheduled,
    /// Due later, and leased (due when the lease ends).
    Leased,
    /// Queued behind an earlier message of their ordering key.
    Waiting,
    /// Dead letters.
    Dead,
}

impl Walked {
    /// Its rows in the primary key's order at `now`: `state` and a range
    /// of `due_at` (scheduled and leased share one, told apart by the
    /// token).
    fn range(self, now: i64) -> Expr {
        let ready = || Expr::col(col::STATE).eq(state::READY);
        match self {
            Walked::Due => ready().and(Expr::col(col::DUE_AT).lte(now)),
            Walked::Scheduled | Walked::Leased => ready().and(Expr::col(col::DUE_AT).gt(now)),
            Walked::Waiting => Expr::col(col::STATE).eq(state::WAITING),
            Walked::Dead => state_is(state::DEAD),
        }
    }
}

/// A page of messages: which rows, after which key, how many, and what
/// they must match.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page<'a> {
    pub(crate) walked: Walked,
    /// The key (`due_at`, `id`) of the previous page's last message.
    pub(crate) after: Option<(i64, &'a str)>,
    pub(crate) limit: u32,
    /// The most rows the walk reads.
    pub(crate) scan: u32,
    pub(crate) topic: Option<&'a str>,
    /// The forms its subject may be stored in.
    pub(crate) subject_forms: Option<&'a [&'a str]>,
    pub(crate) id_prefix: Option<&'a str>,
}

/// The columns of a message read with its trace.
fn traced_columns() -> Vec<&'static str> {
    let mut columns: Vec<&'static str> = STORED_COLUMNS.to_vec();
    columns.extend([col::TRACEPARENT, col::TRACESTATE]);
    columns
}

/// The message at (`due_at`, `id`) with its trace, ready, waiting or
/// dead: three primary-key lookups at most.
pub(crate) fn message_at(
    table: &TableName,
    dialect: Dialect,
    due_at: i64,
    id: &str,
) -> Result<Statement> {
    dialect.render(
        Query::select()
            .columns(traced_columns())
            .from(table.as_str().to_owned())
            .and_where(
                state_is(state::READY)
                    .or(state_is(state::WAITING))
                    .or(state_is(state::DEAD)),
            )
            .and_where(Expr::col(col::DUE_AT).eq(due_at))
            .and_where(Expr::col(col::ID).eq(id))
            .limit(1),
    )
}

/// After the key (`due_at`, `id`) in the primary key's order.
fn after_key(due_at: i64, id: &str) -> Expr {
    Expr::col(col::DUE_AT).gt(due_at).or(Expr::col(col::DUE_AT)
        .eq(due_at)
        .and(Expr::col(col::ID).gt(id)))
}

/// A page's statements at `now`: its messages with their traces; and,
/// when the page filters its walk, a key-only read of the walk's last row
/// (found only when the walk is cut at its bound), so a caller can go on
/// from where it stopped. Unfiltered, a page reads its own rows only.
pub(crate) fn page(
    table: &TableName,
    dialect: Dialect,
    page: &Page<'_>,
    now: i64,
) -> Result<Vec<Statement>> {
    let walk = |columns: &[&'static str]| {
        let mut select = Query::select();
        select
            .columns(columns.iter().copied())
            .from(table.as_str().to_owned())
            .and_where(page.walked.range(now))
            .order_by(col::DUE_AT, Order::Asc)
            .order_by(col::ID, Order::Asc)
            .limit(u64::from(page.scan));
        if let Some((due_at, id)) = page.after {
            select.and_where(after_key(due_at, id));
        }
        select
    };
    let columns = traced_columns();
    let id_prefix = page.id_prefix.filter(|prefix| !prefix.is_empty());
    let filtered = page.topic.is_some()
        || page.subject_forms.is_some()
        || id_prefix.is_some()
        || matches!(page.walked, Walked::Scheduled | Walked::Leased);
    let mut select = if filtered {
        let mut select = Query::select();
        select
            .columns(columns.iter().copied())
            .from_subquery(walk(&columns), Alias::new("walked"))
            .order_by(col::DUE_AT, Order::Asc)
            .order_by(col::ID, Order::Asc);
        select
    } else {
        walk(&columns)
    };
    select.limit(u64::from(page.limit));
    match page.walked {
        Walked::Scheduled => drop(select.and_where(Expr::col(col::LEASE_TOKEN).is_null())),
        Walked::Leased => drop(select.and_where(Expr::col(col::LEASE_TOKEN).is_not_null())),
        _ => {}
    }
    if let Some(topic) = page.topic {
        select.and_where(Expr::col(col::TOPIC).eq(topic));
    }
    if let Some(forms) = page.subject_forms {
        select.and_where(one_of(col::SUBJECT, forms));
    }
    if let Some(prefix) = id_prefix {
        // A range, not LIKE: no wildcard in an id can widen it.
        select.and_where(Expr::col(col::ID).gte(prefix));
        if let Some(end) = prefix_end(prefix) {
            select.and_where(Expr::col(col::ID).lt(end));
        }
    }
    let mut statements = vec![dialect.render(&select)?];
    if filtered {
        let mut last = walk(&[col::DUE_AT, col::ID]);
        last.limit(1).offset(u64::from(page.scan) - 1);
        statements.push(dialect.render(&last)?);
    }
    Ok(statements)
}

/// The first text after every text that starts with `prefix`, if any.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The code points after U+D7FF are surrogates, not characters.
        let after = if last == '\u{d7ff}' {
            0xe000
        } else {
            u32::from(last) + 1
        };
        if let Some(next) = char::from_u32(after) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Ordering keys per statement when heads are read: D1 binds at most 100
/// values to a statement.
const HEADS_PER_STATEMENT: usize = 50;

/// The head of each of `keys` (its row of lowest `seq`: `id`,
/// `ordering_key`, `state`, `due_at`, `lease_token`): one index entry and
/// row per key, in statements of up to 50 keys.
pub(crate) fn heads(table: &TableName, dialect: Dialect, keys: &[&str]) -> Vec<Statement> {
    let (t, key, seq) = (table.as_str(), col::ORDERING_KEY, col::SEQ);
    let columns = [
        col::ID,
        col::ORDERING_KEY,
        col::STATE,
        col::DUE_AT,
        col::LEASE_TOKEN,
    ]
    .join(", ");
    keys.chunks(HEADS_PER_STATEMENT)
        .map(|chunk| {
            let sql = vec![
                format!(
                    "SELECT * FROM (SELECT {columns} FROM \"{t}\" WHERE {key} = ? \
                     ORDER BY {seq} LIMIT 1) AS head"
                );
                chunk.len()
            ]
            .join(" UNION ALL ");
            let values = chunk.iter().map(|key| Value::from(*key)).collect();
            Statement::new(dialect.number_placeholders(&sql), values)
        })
        .collect()
}

/// The dead letters an operator's walk reads: those that died in a time
/// range, of a topic and a subject among them if given (the walk is
/// bounded whatever they are).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DeadWalk<'a> {
    pub(crate) died_from: Option<i64>,
    pub(crate) died_by: Option<i64>,
    pub(crate) topic: Option<&'a str>,
    /// The forms its subject may be stored in.
    pub(crate) subject_forms: Option<&'a [&'a str]>,
}

/// The column of [`dead_walk_count`]'s count.
pub(crate) const WALKED: &str = "walked";

/// How much of a dead letter's last error a walk reads (what its error
/// class is told from).
pub(crate) const CLASS_READ: i64 = 200;

/// The walk along the dead letters' primary key, in `walk`'s time range,
/// of at most `scan` rows: `columns` and the start of their last error
/// (none: the key alone).
fn dead_walk(
    walk: &DeadWalk<'_>,
    table: &TableName,
    scan: u32,
    columns: &[&'static str],
) -> SelectStatement {
    let mut select = Query::select();
    if columns.is_empty() {
        select.columns([col::DUE_AT, col::ID]);
    } else {
        select.columns(columns.iter().copied()).expr_as(
            // Written into the SQL: Postgres has no substr(text, bigint, bigint).
            Expr::cust(format!("substr(\"{}\", 1, {CLASS_READ})", col::LAST_ERROR)),
            Alias::new(col::LAST_ERROR),
        );
    }
    select
        .from(table.as_str().to_owned())
        .and_where(state_is(state::DEAD))
        .order_by(col::DUE_AT, Order::Asc)
        .order_by(col::ID, Order::Asc)
        .limit(u64::from(scan));
    if let Some(from) = walk.died_from {
        select.and_where(Expr::col(col::DUE_AT).gte(from));
    }
    if let Some(by) = walk.died_by {
        select.and_where(Expr::col(col::DUE_AT).lte(by));
    }
    select
}

/// The oldest `scan` dead letters of `walk` (`id`, `topic`, `due_at`, the
/// start of `last_error`), the oldest first.
pub(crate) fn dead_scan(
    table: &TableName,
    dialect: Dialect,
    walk: &DeadWalk<'_>,
    scan: u32,
) -> Result<Statement> {
    let walked = dead_walk(
        walk,
        table,
        scan,
        &[col::ID, col::TOPIC, col::DUE_AT, col::SUBJECT],
    );
    if walk.topic.is_none() && walk.subject_forms.is_none() {
        return dialect.render(&walked);
    }
    let mut matching = Query::select();
    matching
        .columns([col::ID, col::TOPIC, col::DUE_AT, col::LAST_ERROR])
        .from_subquery(walked, Alias::new("dead_walked"))
        .order_by(col::DUE_AT, Order::Asc)
        .order_by(col::ID, Order::Asc);
    if let Some(topic) = walk.topic {
        matching.and_where(Expr::col(col::TOPIC).eq(topic));
    }
    if let Some(forms) = walk.subject_forms {
        matching.and_where(one_of(col::SUBJECT, forms));
    }
    dialect.render(&matching)
}

/// How many rows `walk`'s walk reads (at most `scan`): a key-only count,
/// in the column [`WALKED`].
pub(crate) fn dead_walk_count(
    table: &TableName,
    dialect: Dialect,
    walk: &DeadWalk<'_>,
    scan: u32,
) -> Result<Statement> {
    let mut count = Query::select();
    count
        .expr_as(Expr::cust("count(*)"), Alias::new(WALKED))
        .from_subquery(dead_walk(walk, table, scan, &[]), Alias::new("dead_walked"));
    dialect.render(&count)
}

/// Makes the message scheduled at (`due_at`, `id`) due at `now`: a
/// primary-key lookup; a message due, leased, waiting, dead, gone or due
/// at another time is left as it is.
pub(crate) fn reschedule_now(
    table: &TableName,
    dialect: Dialect,
    now: i64,
    due_at: i64,
    id: &str,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::DUE_AT, now)
        .and_where(state_is(state::READY))
        .and_where(Expr::col(col::DUE_AT).eq(due_at))
        .and_where(Expr::col(col::ID).eq(id))
        .and_where(Expr::col(col::LEASE_TOKEN).is_null())
        .and_where(Expr::col(col::DUE_AT).gt(now));
    super::dialects::of(dialect).mark_late(table, &mut update, now.into());
    dialect.render(&update)
}

/// The ordering keys of the dead letters `ids` (one index lookup per id).
pub(crate) fn dead_keys(table: &TableName, dialect: Dialect, ids: &[String]) -> Result<Statement> {
    let mut select = Query::select();
    select
        .distinct()
        .column(col::ORDERING_KEY)
        .from(table.as_str().to_owned())
        .and_where(state_is(state::DEAD))
        .and_where(Expr::col(col::ID).is_in(ids.iter().map(String::as_str)))
        .and_where(Expr::col(col::ORDERING_KEY).is_not_null());
    dialect.render(&select)
}

/// Deletes the dead letter `id`, returning its id (count that: D1 counts a
/// trigger's deletes among a statement's changes).
pub(crate) fn purge_one(table: &TableName, dialect: Dialect, id: &str) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(state_is(state::DEAD))
        .and_where(Expr::col(col::ID).eq(id))
        .returning_col(col::ID);
    dialect.render(&delete)
}
