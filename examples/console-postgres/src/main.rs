//! The operator console served natively through axum, over a Postgres
//! outbox and inbox: `DATABASE_URL=postgres://… CONSOLE_TOKEN=… cargo run -p
//! console-postgres`, then open <http://127.0.0.1:8790/console/>.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use workers_outbox::console::{BearerToken, Console};
use workers_outbox::{Inbox, Outbox, PostgresDatabase};

/// The largest request body handed to the console (its API reads no more).
const MAX_BODY: usize = 64 * 1024;

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
    let app = axum::Router::new().fallback(move |request: Request| serve(console.clone(), request));

    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("console on http://{address}/console/");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Hands a request under the console's prefix to it, as `http` types.
async fn serve(console: Console, request: Request) -> Response {
    if !console.serves(request.uri().path()) {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the body is over 64 KiB").into_response();
    };
    console
        .handle(axum::http::Request::from_parts(parts, body))
        .await
        .map(Body::from)
}
