//! The planner settings of the outbox's busiest Postgres transactions
//! (every claim's and every settle's), sent as their first statement so
//! that they hold whatever the adapter or its pool, and for that
//! transaction only.
//!
//! - `jit = off`. A claim or settle statement runs in well under a
//!   millisecond, but the planner's estimate for one that reads its ids
//!   from a JSON array (100 rows a function, whatever the array holds)
//!   grows with the table's dead tuples, and past `jit_above_cost` (and
//!   `jit_optimize_above_cost`) each run compiles its plan first: about a
//!   second, measured on every settle once a held snapshot had bloated the
//!   table's statistics (BENCHMARKS.md, "A snapshot held for 60 s").
//! - `enable_bitmapscan = off`. Until autovacuum first analyzes a new
//!   table (a minute at the server's default naptime) its statistics are
//!   those of an empty one: the planner then takes `state = 'ready'` for a
//!   handful of rows, and reads and sorts them all through a bitmap. Every
//!   statement of these transactions walks an index in order or probes it
//!   for a key.

use crate::database::Statement;

/// The statement that sets them.
pub(crate) fn settings() -> Statement {
    Statement::new(
        "SELECT set_config('jit', 'off', true), set_config('enable_bitmapscan', 'off', true)",
        Vec::new(),
    )
}
