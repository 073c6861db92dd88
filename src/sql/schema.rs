//! DDL shipped as SQL templates, rendered for a validated table name.
//!
//! The same text goes into `migrations/` (which wrangler applies to D1) and
//! is returned by the `schema_*` accessors, so the two cannot drift: a test
//! compares them.

use crate::database::Statement;
use crate::identifier::TableName;

/// The SQL of `template` for `table`: every `{table}` becomes the name.
/// Only a [`TableName`] (validated) is ever substituted.
pub(crate) fn render(template: &str, table: &TableName) -> String {
    template.replace("{table}", table.as_str())
}

/// Splits rendered DDL into one statement each (D1 prepares one at a time).
/// Comment lines are dropped.
pub(crate) fn statements(sql: &str) -> Vec<Statement> {
    let code: String = sql
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    code.split(';')
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(|statement| Statement::new(statement, Vec::new()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_and_drops_comments() {
        let table = TableName::new("t").unwrap();
        let sql = render(
            "-- about {table}\nCREATE TABLE \"{table}\" (a INTEGER);\nCREATE INDEX \"{table}_a\" ON \"{table}\" (a);\n",
            &table,
        );
        let statements = statements(&sql);
        let texts: Vec<&str> = statements.iter().map(Statement::sql).collect();
        assert_eq!(
            texts,
            [
                "CREATE TABLE \"t\" (a INTEGER)",
                "CREATE INDEX \"t_a\" ON \"t\" (a)"
            ]
        );
    }
}
