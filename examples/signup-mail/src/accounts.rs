//! The Worker's own rows of an account (its `accounts` row and its
//! `welcomes` row), for the console's subject export and erasure.

use std::sync::Arc;

use serde_json::{Value as Json, json};
use workers_outbox::console::SubjectRows;
use workers_outbox::future::BoxFuture;
use workers_outbox::{Batch, Database, OfStatement, Result, Statement, Ticket, Value};

pub(crate) struct Accounts {
    db: Arc<dyn Database>,
}

impl Accounts {
    pub(crate) fn new(db: Arc<dyn Database>) -> Self {
        Accounts { db }
    }

    /// One JSON object read by `select` (one column, `row`), or `null`.
    async fn object(&self, select: &str, id: &str) -> Result<Json> {
        let statement = Statement::new(select, vec![Value::from(id)]);
        let rows = self.db.query(&statement).await?;
        let text: Option<String> = rows.first().map(|row| row.get("row")).transpose()?;
        Ok(text
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Json::Null))
    }
}

impl SubjectRows for Accounts {
    fn export<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Json>> {
        Box::pin(async move {
            let account = self.object(
                "SELECT json_object('id', id, 'email', email, 'created_at', created_at) AS row \
                 FROM accounts WHERE id = ?",
                id,
            );
            let welcome = self.object(
                "SELECT json_object('event_id', event_id, 'created_at', created_at, \
                 'trace_id', trace_id) AS row FROM welcomes WHERE account_id = ?",
                id,
            );
            Ok(json!({ "account": account.await?, "welcome": welcome.await? }))
        })
    }

    fn erase(
        &self,
        batch: &mut Batch,
        id: &str,
    ) -> Result<Vec<(&'static str, Ticket<OfStatement>)>> {
        let delete = |table: &str, column: &str| {
            Statement::new(
                format!("DELETE FROM {table} WHERE {column} = ?"),
                vec![Value::from(id)],
            )
        };
        Ok(vec![
            (
                "welcomes",
                batch.statement(delete("welcomes", "account_id")),
            ),
            ("accounts", batch.statement(delete("accounts", "id"))),
        ])
    }
}
