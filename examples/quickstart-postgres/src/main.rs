//! The Postgres guide's native quickstart (docs/postgres.md), compiled and run in CI (`tests/readme.rs` keeps the two equal).
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workers_outbox::http::HttpDeliverer;
use workers_outbox::{
    Batch, Database, Drainer, Message, Outbox, PostgresDatabase, Result, Statement, Topic,
};

#[derive(Serialize, Deserialize)]
struct WelcomeMail {
    to: String,
    subject: String,
    text: String,
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
    let welcome = WelcomeMail {
        to: email.into(),
        subject: "Welcome".into(),
        text: "Your account is ready.".into(),
    };
    let mail = Message::of(&welcome)?.dedup_key(email);
    let mail = batch.enqueue(&outbox, mail)?;
    let committed = batch.commit().await?;
    println!("mail enqueued: {}", committed.enqueued(&mail)?); // false while one with its key waits

    // Drain: run this on a timer, in as many processes as you like. Claims
    // lock with FOR UPDATE SKIP LOCKED, so drainers never share a message.
    // Each mail is POSTed as JSON with `Idempotency-Key: <message id>`;
    // `node scripts/mail-sink.mjs` is a stand-in mail API on port 8025.
    let mail_api =
        std::env::var("MAIL_API_URL").unwrap_or_else(|_| "http://127.0.0.1:8025/send".into());
    let deliver = HttpDeliverer::new(&mail_api)?; // 15 s timeout, Retry-After honoured, no redirects
    let report = Drainer::builder(outbox, deliver).build()?.drain().await;
    println!("{report}");
    Ok(())
}
