//! DDL shipped as SQL templates, rendered for a validated table name.
//!
//! The same text goes into `migrations/` (which wrangler applies to D1) and
//! is returned by the `schema_*` accessors, so the two cannot drift: a test
//! compares them.

use crate::database::{Dialect, Statement};
use crate::identifier::TableName;

/// A schema's DDL templates, one per dialect: rendering one for a dialect
/// reads its own (a dialect added fails to compile until each schema has
/// its template).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Templates {
    pub(crate) sqlite: &'static str,
    pub(crate) postgres: &'static str,
}

impl Templates {
    /// The DDL of `dialect`'s template for `table`.
    pub(crate) fn render(&self, dialect: Dialect, table: &TableName) -> String {
        let template = match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        };
        render(template, table)
    }
}

/// The SQL of `template` for `table`: every `{table}` becomes the name.
/// Only a [`TableName`] (validated) is ever substituted.
pub(crate) fn render(template: &str, table: &TableName) -> String {
    template.replace("{table}", table.as_str())
}

/// Splits rendered DDL into one statement each (D1 prepares one at a time).
/// Comment lines are dropped. A `;` ends a statement except inside a
/// Postgres `$$` body or a SQLite trigger's `BEGIN … END`.
pub(crate) fn statements(sql: &str) -> Vec<Statement> {
    let code: String = sql
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut statements = Vec::new();
    let mut current = String::new();
    for piece in code.split_inclusive(';') {
        current.push_str(piece);
        let open_body = current.matches("$$").count() % 2 == 1;
        let open_trigger = {
            let upper = current.trim_start().to_ascii_uppercase();
            upper.starts_with("CREATE TRIGGER")
                && upper.contains(" BEGIN")
                && !upper
                    .trim_end()
                    .trim_end_matches(';')
                    .trim_end()
                    .ends_with("END")
        };
        if !open_body && !open_trigger {
            push_statement(&mut statements, &current);
            current.clear();
        }
    }
    push_statement(&mut statements, &current);
    statements
}

fn push_statement(statements: &mut Vec<Statement>, text: &str) {
    let text = text.trim();
    let text = text.strip_suffix(';').unwrap_or(text).trim();
    if !text.is_empty() {
        statements.push(Statement::new(text, Vec::new()));
    }
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

    #[test]
    fn keeps_trigger_and_function_bodies_whole() {
        let sql = "CREATE TRIGGER x AFTER DELETE ON t BEGIN\n    DELETE FROM k WHERE id = OLD.id;\nEND;\n\
                   CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n    DELETE FROM k;\n    RETURN NULL;\nEND\n$$;\n\
                   CREATE INDEX i ON t (a);";
        let statements = statements(sql);
        let texts: Vec<&str> = statements.iter().map(Statement::sql).collect();
        assert_eq!(
            texts,
            [
                "CREATE TRIGGER x AFTER DELETE ON t BEGIN\n    DELETE FROM k WHERE id = OLD.id;\nEND",
                "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n    DELETE FROM k;\n    RETURN NULL;\nEND\n$$",
                "CREATE INDEX i ON t (a)"
            ]
        );
    }
}
