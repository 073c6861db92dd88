//! The operator console served natively through axum, over a Postgres
//! outbox and inbox: `DATABASE_URL=postgres://… CONSOLE_TOKEN=… cargo run -p
//! console-postgres`, then open <http://127.0.0.1:8790/console/>.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use workers_outbox::console::{BearerToken, Console};
use workers_outbox::{Inbox, Outbox, PostgresDatabase};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let url = var("DATABASE_URL")
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:54329/postgres".into());
    let token = var("CONSOLE_TOKEN")
        .ok_or("CONSOLE_TOKEN is not set: the console admits no one without it")?;
    let address = var("CONSOLE_ADDR").unwrap_or_else(|| "127.0.0.1:8790".into());

    let db = Arc::new(PostgresDatabase::connect(&url, 4).await?);
    let outbox = Outbox::new(db.clone(), "outbox")?;
    let inbox = Inbox::new(db, "inbox")?;
    outbox.create_schema().await?;
    inbox.create_schema().await?;

    let console = Console::builder()
        .prefix("/console")
        .outbox("outbox", outbox)
        .inbox("inbox", inbox)
        .authorize(BearerToken::operator(&token))
        .build()?;
    // The console is a tower::Service (feature `tower`), routed at its
    // prefix and everything under it; it reads the prefix itself, so not
    // `nest_service`, which strips it.
    let app = axum::Router::new()
        .route_service("/console", console.clone())
        .route_service("/console/", console.clone())
        .route_service("/console/{*rest}", console);

    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("console on http://{address}/console/");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
