//! What an operator's console reads of an outbox's rows, each walk bounded
//! however large the table.

use super::{col, state};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
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
