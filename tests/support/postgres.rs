//! A fresh database on the test Postgres server, dropped when done.
//!
//! The server is the one `scripts/postgres.sh start` runs (or any named by
//! `WORKERS_OUTBOX_POSTGRES_URL`). A test that cannot reach it fails and
//! says how to start it: it never passes without Postgres.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::str::FromStr;

use tokio_postgres::NoTls;
use workers_outbox::PostgresDatabase;

/// The server's URL, from the environment or the script's default.
pub(crate) fn server_url() -> String {
    std::env::var("WORKERS_OUTBOX_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:54329/postgres".to_owned())
}

/// A database of its own on the test server, dropped with this value.
pub(crate) struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates `<prefix>_<pid>_<n>` on the server.
    ///
    /// # Panics
    /// If the server cannot be reached: the message says how to start it.
    pub(crate) async fn create(prefix: &str) -> TestDatabase {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{prefix}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        admin(&format!("DROP DATABASE IF EXISTS \"{name}\"")).await;
        admin(&format!("CREATE DATABASE \"{name}\"")).await;
        let mut config = tokio_postgres::Config::from_str(&server_url()).expect("a valid URL");
        config.dbname(&name);
        let mut url = format!(
            "host={} port={} user={} dbname={name}",
            host(&config),
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_user().unwrap_or("postgres"),
        );
        if let Some(password) = config.get_password() {
            let password = String::from_utf8_lossy(password)
                .replace('\\', "\\\\")
                .replace('\'', "\\'");
            url.push_str(&format!(" password='{password}'"));
        }
        TestDatabase { name, url }
    }

    /// Its name on the server.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its connection string.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// An adapter on it with a pool of `connections`.
    pub(crate) async fn connect(&self, connections: usize) -> PostgresDatabase {
        PostgresDatabase::connect(&self.url, connections)
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", how_to_start()))
    }

    /// Drops the database.
    pub(crate) async fn drop_now(self) {
        admin(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .await;
    }
}

fn host(config: &tokio_postgres::Config) -> String {
    match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "127.0.0.1".to_owned(),
    }
}

fn how_to_start() -> String {
    format!(
        "these tests need a Postgres server at {} — start one with `bash scripts/postgres.sh start` \
         (it installs Debian's postgresql if missing), or point WORKERS_OUTBOX_POSTGRES_URL at yours",
        server_url()
    )
}

async fn admin(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&server_url(), NoTls)
        .await
        .unwrap_or_else(|error| panic!("{}: {error}", how_to_start()));
    let task = tokio::spawn(connection);
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    drop(client);
    let _ = task.await;
}
