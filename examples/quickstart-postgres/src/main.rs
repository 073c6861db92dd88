//! The Postgres guide's native quickstart (docs/postgres.md), compiled and run in CI (`tests/readme.rs` keeps the two equal).
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workers_outbox::drain::deliver_fn;
use workers_outbox::{
    Batch, ClaimedMessage, Database, Delivery, Drainer, Message, Outbox, PostgresDatabase, Result,
    Statement, Topic,
};

#[derive(Serialize, Deserialize)]
struct WelcomeMail {
    to: String,
}

impl Topic for WelcomeMail {
    const NAME: &'static str = "welcome-mail";
}

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:54329/postgres".into());
    let db = Arc::new(PostgresDatabase::connect(&url, 8).await?);
    let outbox = Outbox::new(db.clone(), "outbox")?;
    outbox.create_schema().await?; // or apply migrations/postgres/ with your migration tool
    db.execute(&Statement::new(
        "CREATE TABLE IF NOT EXISTS accounts (email TEXT PRIMARY KEY)",
        vec![],
    ))
    .await?;

    // The account and its mail commit in one transaction, or neither does.
    let email = "ada@example.com";
    let mut batch = Batch::new(db);
    batch.push(Statement::new(
        "INSERT INTO accounts (email) VALUES ($1) ON CONFLICT DO NOTHING",
        vec![email.into()],
    ));
    let mail = Message::of(&WelcomeMail { to: email.into() })?.dedup_key(email);
    let mail = batch.enqueue(&outbox, mail)?;
    let committed = batch.commit().await?;
    println!("mail enqueued: {}", committed.enqueued(&mail)?); // false while one with its key waits

    // Drain: run this on a timer, in as many processes as you like. Claims
    // lock with FOR UPDATE SKIP LOCKED, so drainers never share a message.
    let mail_api = deliver_fn(|message: ClaimedMessage| async move {
        match message.payload_as::<WelcomeMail>() {
            Ok(mail) => {
                println!("mail {} to {}", message.id, mail.to); // call your mail API here
                Delivery::Delivered
            }
            Err(error) => Delivery::permanent(error.to_string()),
        }
    });
    let report = Drainer::builder(outbox, mail_api).build()?.drain().await;
    println!("{report}");
    Ok(())
}
