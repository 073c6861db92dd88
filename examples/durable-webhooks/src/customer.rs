//! One customer: its events, its endpoints and the outbox of their
//! deliveries, in the object's own SQLite storage, delivered by the
//! object's alarm.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use worker::{DurableObject, Env, Method, Request, Response, Result, State, durable_object};
use workers_outbox::console::{BearerToken, Console};
use workers_outbox::endpoint::{BodyFormat, EndpointDeliverer, Endpoints, Event, NewEndpoint};
use workers_outbox::fleet::FleetMember;
use workers_outbox::{
    Batch, Clock, D1Database, Database, DrainLimits, Drainer, DurableObjectDatabase, Outbox,
    RetryPolicy, Statement, SystemClock, Value, worker_vars,
};

use crate::{Body, error_response, json, json_error, read_body};

/// What an endpoint receives of one recorded event: its payload.
#[derive(Serialize)]
struct EventHook<'a> {
    customer: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    data: &'a serde_json::Value,
    at: i64,
}

const EVENTS_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, data TEXT NOT NULL, at INTEGER NOT NULL)";

/// What every handler of the object needs, built once per instance.
struct Parts {
    db: Arc<DurableObjectDatabase>,
    outbox: Outbox,
    /// The endpoints the customer registered: each event fans out to them.
    endpoints: Endpoints,
    drainer: Drainer,
    /// The object's row in the fleet, if it has a name and the Worker a D1.
    fleet: Option<FleetMember>,
    /// The console's operator token; none, no access.
    admin_token: Option<String>,
}

impl Parts {
    fn new(state: &State, env: &Env) -> std::result::Result<Parts, String> {
        let vars = worker_vars(env);
        let parts = || -> workers_outbox::Result<Parts> {
            let db = DurableObjectDatabase::new(state)
                .wake_for(Outbox::next_due("outbox")?)?
                .shared();
            let outbox = Outbox::builder(db.clone(), "outbox")
                .retry_policy(RetryPolicy::from_vars(&vars)?)
                // An endpoint disabled, a message dead: told to the operator's endpoints.
                .operational_events(OPERATOR)
                .build()?;
            // Local receivers (`ENDPOINTS_ALLOW_LOCAL=1`) for development only.
            let local = vars("ENDPOINTS_ALLOW_LOCAL").is_some_and(|v| v == "1");
            let endpoints = Endpoints::new(&outbox)
                .allow_http(local)
                .allow_private(local);
            // Each delivery to its endpoint, signed with the endpoint's own secrets.
            let deliver = EndpointDeliverer::new()?;
            let mut drainer = Drainer::builder(outbox.clone(), deliver)
                .limits(DrainLimits::from_vars(DrainLimits::alarm(), &vars)?);
            // After each alarm's drain, the object's row in the fleet (D1):
            // what the operator's fleet view lists, linking to this console.
            let fleet = match (state.id().name(), env.d1("DB")) {
                (Some(name), Ok(binding)) => Some(FleetMember::new(
                    crate::fleet(D1Database::shared(binding))?,
                    name,
                )?),
                _ => None,
            };
            if let Some(member) = &fleet {
                drainer = drainer.fleet(member.clone());
            }
            let drainer = drainer.build()?;
            Ok(Parts {
                db,
                outbox,
                endpoints,
                drainer,
                fleet,
                admin_token: env.secret("ADMIN_TOKEN").ok().map(|t| t.to_string()),
            })
        };
        parts().map_err(|error| error.to_string())
    }

    /// Whether the request carries the operator's bearer token.
    fn is_operator(&self, request: &Request) -> Result<bool> {
        let given = request.headers().get("authorization")?;
        Ok(
            matches!((&self.admin_token, given), (Some(token), Some(given))
            if given.strip_prefix("Bearer ") == Some(token.as_str())),
        )
    }

    /// The customer's own console, over its object's outbox, at
    /// `/admin/customers/<customer>/console/`.
    fn console(&self, customer: &str) -> workers_outbox::Result<Console> {
        let mut console = Console::builder()
            .prefix(&format!("/admin/customers/{customer}/console"))
            .outbox("webhooks", self.outbox.clone());
        if let Some(token) = &self.admin_token {
            console = console.authorize(BearerToken::operator(token));
        }
        console.build()
    }
}

/// A customer: `POST`/`GET …/events`, and the console of its outbox.
#[durable_object]
pub struct Customer {
    parts: std::result::Result<Parts, String>,
}

impl DurableObject for Customer {
    fn new(state: State, env: Env) -> Self {
        let parts = Parts::new(&state, &env);
        if let Ok(parts) = &parts {
            let (outbox, db) = (parts.outbox.clone(), parts.db.clone());
            // No event reaches the object before its tables exist.
            drop(state.block_concurrency_while(async move {
                outbox.create_schema().await?;
                db.execute(&Statement::new(EVENTS_SCHEMA, Vec::new()))
                    .await?;
                Ok(())
            }));
        }
        Customer { parts }
    }

    async fn fetch(&self, mut request: Request) -> Result<Response> {
        let path = request.path();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        if let (Ok(parts), ["admin", "customers", customer, "console", ..]) =
            (&self.parts, segments.as_slice())
        {
            // The console reads the body (the Worker refused one declared too long).
            let changes = request.method() != Method::Get && request.method() != Method::Head;
            let answer = match parts.console(customer) {
                Ok(console) => console.handle_worker(request).await,
                Err(error) => error_response(&error),
            };
            // A replay or a purge changes what the fleet lists: told now,
            // not at the next drain (which may never come, nothing being due).
            if changes && let Some(member) = &parts.fleet {
                if let Err(error) = member.report(&parts.outbox).await {
                    log::warn!("not reported to the fleet: {error}");
                }
                // Not written: the alarm tries again soon.
                if let Some(retry) = member.retry_in(&parts.outbox) {
                    let now = SystemClock.now();
                    let at = now.checked_add(retry).unwrap_or(now);
                    if let Err(error) = parts.db.wake_by(at).await {
                        log::warn!("no alarm for the fleet's report: {error}");
                    }
                }
            }
            return answer;
        }
        // Read first: every answer below comes after the body is consumed.
        let body = read_body(&mut request, EVENT_BODY_LIMIT).await?;
        let parts = match &self.parts {
            Ok(parts) => parts,
            Err(problem) => return json_error(500, &format!("configuration error: {problem}")),
        };
        match (request.method(), segments.as_slice()) {
            (Method::Post, ["customers", id, "events"]) => record(parts, id, body).await,
            (Method::Post, ["customers", id, "endpoints"]) => register(parts, id, body).await,
            (Method::Get, ["customers", id, "endpoints"]) => {
                answer(200, parts.endpoints.list(id).await)
            }
            (Method::Post, ["customers", id, "endpoints", endpoint, "enable"]) => answer(
                200,
                parts
                    .endpoints
                    .enable(id, endpoint)
                    .await
                    .map(|()| "enabled"),
            ),
            (Method::Get, ["customers", id, "endpoints", endpoint, "attempts"]) => {
                answer(200, parts.endpoints.attempts(id, endpoint, 50).await)
            }
            // The operator's own endpoints in this customer's object, for its
            // operational events (bearer ADMIN_TOKEN).
            (Method::Post, ["admin", "customers", _, "endpoints"]) => {
                if !parts.is_operator(&request)? {
                    return json_error(401, "an operator's bearer token is required");
                }
                register(parts, OPERATOR, body).await
            }
            (Method::Get, ["customers", _, "events"]) => events(parts).await,
            (_, ["customers", _, "events"]) => json_error(405, "use GET or POST"),
            _ => json_error(404, "no such route"),
        }
    }

    /// Delivers what is due, then sets the alarm for what comes next. An
    /// error makes the runtime retry the alarm.
    async fn alarm(&self) -> Result<Response> {
        let parts = self
            .parts
            .as_ref()
            .map_err(|p| worker::Error::RustError(p.clone()))?;
        let report = parts.drainer.run_alarm(&parts.db).await?;
        Response::ok(report.to_string())
    }
}

/// The owner of the operator's endpoints, which receive the operational events.
const OPERATOR: &str = "operator";

/// The largest event body an object takes.
pub(crate) const EVENT_BODY_LIMIT: usize = 16 * 1024;

/// The event and its deliveries to the customer's endpoints subscribed to
/// its type, in one atomic write (which also sets the alarm to deliver
/// them now).
async fn record(parts: &Parts, customer: &str, body: Body) -> Result<Response> {
    let Body::Within(body) = body else {
        return json_error(413, "the body is over 16 KiB");
    };
    #[derive(Deserialize)]
    struct Recorded {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        data: serde_json::Value,
    }
    let Ok(event) = serde_json::from_slice::<Recorded>(&body) else {
        return json_error(
            400,
            "the body must be JSON: {\"type\": string, \"data\": any}",
        );
    };
    if event.kind.is_empty() || event.kind.len() > 100 {
        return json_error(400, "type is 1 to 100 characters");
    }
    let at = SystemClock.now().as_unix_millis();
    let hook = EventHook {
        customer,
        kind: &event.kind,
        data: &event.data,
        at,
    };
    let result = async {
        let mut batch = Batch::new(parts.db.clone());
        // One ordering key for all: each endpoint receives them in order.
        let published = Event::new(customer, event.kind.as_str(), &hook)?
            .subject(customer)
            .ordering_key("events");
        let fanned = batch.publish(&parts.endpoints, published)?;
        // The event's id is its `webhook-id` on every endpoint (a receiver's inbox key).
        batch.push(Statement::new(
            "INSERT INTO events (id, type, data, at) VALUES (?, ?, ?, ?)",
            vec![
                fanned.id().into(),
                event.kind.as_str().into(),
                event.data.to_string().into(),
                at.into(),
            ],
        ));
        let committed = batch.commit().await?;
        let endpoints = committed.published(&fanned)?;
        Ok::<_, workers_outbox::Error>((fanned.id().to_owned(), endpoints))
    }
    .await;
    match result {
        Ok((id, endpoints)) => json(
            201,
            &serde_json::json!({ "event_id": id, "endpoints": endpoints }),
        ),
        Err(error) => error_response(&error),
    }
}

/// `POST /customers/<id>/endpoints {"url", "secret", "event_types"?,
/// "rate_limit_per_second"?, "body"?: "payload" | "slack"}`: the customer
/// (or, for the operator, `/admin/…`) registers where its events go.
async fn register(parts: &Parts, customer: &str, body: Body) -> Result<Response> {
    let Body::Within(body) = body else {
        return json_error(413, "the body is over 16 KiB");
    };
    #[derive(Deserialize)]
    struct Registered {
        url: String,
        secret: String,
        #[serde(default)]
        event_types: Option<Vec<String>>,
        #[serde(default)]
        rate_limit_per_second: Option<u32>,
        #[serde(default)]
        body: Option<BodyFormat>,
    }
    let Ok(registered) = serde_json::from_slice::<Registered>(&body) else {
        return json_error(
            400,
            "the body must be JSON: {\"url\": string, \"secret\": string, \"event_types\"?: \
             [string], \"rate_limit_per_second\"?: number, \"body\"?: \"payload\" | \"slack\"}",
        );
    };
    let mut new = NewEndpoint::new(customer, registered.url, registered.secret);
    if let Some(types) = registered.event_types {
        new = new.event_types(types);
    }
    if let Some(rate) = registered.rate_limit_per_second {
        new = new.rate_limit(rate);
    }
    if let Some(body) = registered.body {
        new = new.body(body);
    }
    answer(201, parts.endpoints.create(new).await)
}

/// A library call's result as JSON with `status`, or its error.
fn answer<T: Serialize>(status: u16, result: workers_outbox::Result<T>) -> Result<Response> {
    match result {
        Ok(value) => json(status, &value),
        Err(error) => error_response(&error),
    }
}

async fn events(parts: &Parts) -> Result<Response> {
    let rows = parts
        .db
        .query(&Statement::new(
            "SELECT id, type, data, at FROM events ORDER BY at, id",
            Vec::new(),
        ))
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(error) => return error_response(&error),
    };
    let events: Vec<BTreeMap<&str, serde_json::Value>> = rows
        .iter()
        .map(|row| {
            let mut event = BTreeMap::new();
            for column in ["id", "type", "data", "at"] {
                let value = match row.value(column) {
                    Some(Value::Integer(n)) => serde_json::json!(n),
                    Some(Value::Text(text)) if column == "data" => {
                        serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
                    }
                    Some(Value::Text(text)) => serde_json::json!(text),
                    _ => serde_json::Value::Null,
                };
                event.insert(column, value);
            }
            event
        })
        .collect();
    json(200, &events)
}
