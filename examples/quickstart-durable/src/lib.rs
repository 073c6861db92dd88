//! The Durable Object guide's quickstart (docs/durable-objects.md), compiled in CI (`tests/readme.rs` keeps the two equal).
#![cfg(target_arch = "wasm32")]
#![allow(missing_docs)] // `#[durable_object]` generates undocumented methods.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use worker::{DurableObject, Env, Request, Response, State, durable_object};
use workers_outbox::http::HttpDeliverer;
use workers_outbox::{
    Batch, DrainLimits, Drainer, DurableObjectDatabase, Message, Outbox, Result, Statement, Topic,
};

#[derive(Serialize, Deserialize)]
struct OrderPlaced {
    order: String,
}

impl Topic for OrderPlaced {
    const NAME: &'static str = "order.placed";
}

#[durable_object]
pub struct Customer {
    db: Arc<DurableObjectDatabase>,
    outbox: Outbox,
    drainer: Drainer,
}

impl Customer {
    fn parts(state: &State) -> Result<Customer> {
        // Every write through `db` also keeps the object's alarm at the outbox's next due time.
        let db = DurableObjectDatabase::new(state)
            .wake_for(Outbox::next_due("outbox")?)?
            .shared();
        let outbox = Outbox::new(db.clone(), "outbox")?;
        let webhook = HttpDeliverer::new("https://hooks.example/orders")?; // Idempotency-Key: message id
        let drainer = Drainer::builder(outbox.clone(), webhook)
            .limits(DrainLimits::alarm())
            .build()?;
        Ok(Customer {
            db,
            outbox,
            drainer,
        })
    }

    async fn place_order(&self, order: &str) -> Result<String> {
        // The order, its webhook and the alarm commit together, or nothing does.
        let mut batch = Batch::new(self.db.clone());
        batch.push(Statement::new(
            "INSERT INTO orders (id) VALUES (?)",
            vec![order.into()],
        ));
        let hook = batch.enqueue(
            &self.outbox,
            Message::of(&OrderPlaced {
                order: order.into(),
            })?,
        )?;
        batch.commit().await?;
        Ok(hook.id().to_owned()) // delivered by the alarm, which fires now
    }
}

impl DurableObject for Customer {
    fn new(state: State, _env: Env) -> Self {
        let customer = Customer::parts(&state).expect("valid configuration");
        let (outbox, db) = (customer.outbox.clone(), customer.db.clone());
        drop(state.block_concurrency_while(async move {
            let schema = async {
                outbox.create_schema().await?;
                let orders = "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)";
                workers_outbox::Database::execute(&*db, &Statement::new(orders, vec![])).await
            };
            schema.await.map(drop).map_err(worker::Error::from)
        }));
        customer
    }

    async fn fetch(&self, request: Request) -> worker::Result<Response> {
        match self.place_order(&request.path()).await {
            Ok(webhook) => Response::ok(format!("order placed; webhook {webhook}")),
            Err(error) => Response::error(error.to_string(), error.http_status()),
        }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        // Delivers what is due, then sets the alarm for what comes next.
        match self.drainer.run_alarm(&self.db).await {
            Ok(report) => Response::ok(report.to_string()),
            Err(error) => Err(error.into()), // the runtime retries
        }
    }
}
