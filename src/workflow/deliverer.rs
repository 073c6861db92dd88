//! The Workflows deliverer on Workers, and the binding it calls.

use std::sync::Arc;

use wasm_bindgen::prelude::*;

use super::{instance_id_of, verdict_for};
use crate::drain::{AttemptLog, AttemptRecord, Deliver};
use crate::future::BoxFuture;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::time::{Clock, SystemClock};

#[wasm_bindgen]
extern "C" {
    /// A Workflow binding (`[[workflows]]` in `wrangler.toml`): what the
    /// `worker` crate does not bind yet, `create` and `get`.
    #[wasm_bindgen(extends = js_sys::Object)]
    #[derive(Debug, Clone)]
    pub type WorkflowBinding;

    #[wasm_bindgen(method, catch)]
    async fn create(this: &WorkflowBinding, options: &JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch)]
    async fn get(this: &WorkflowBinding, id: &str) -> Result<JsValue, JsValue>;
}

impl WorkflowBinding {
    /// The Workflow binding `name` of `env`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when `env` has
    /// no binding `name`.
    pub fn from_env(env: &worker::Env, name: &str) -> crate::Result<Self> {
        let value =
            js_sys::Reflect::get(env, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
        if value.is_undefined() || value.is_null() {
            return Err(crate::Error::invalid(
                "Workflow binding",
                format!(
                    "the environment has no binding {name:?} (`[[workflows]]` in wrangler.toml)"
                ),
            ));
        }
        Ok(value.unchecked_into())
    }
}

/// Starts one instance of a Workflow a message: `create({ id, params })`
/// with id [`instance_id_of`]`(message id)` and params the message's JSON
/// payload. A `create` that fails is followed by a `get` of that id: an
/// instance that is there (an earlier relay's, whose reply was lost) counts
/// as delivered; otherwise the error's [verdict](super::verdict_of) holds.
/// A payload that is not JSON is permanent.
pub struct WorkflowDeliverer {
    binding: WorkflowBinding,
    name: String,
    clock: Arc<dyn Clock>,
    attempt_log: AttemptLog,
}

impl std::fmt::Debug for WorkflowDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowDeliverer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl WorkflowDeliverer {
    /// Starts instances of the Workflow bound as `binding`, named `name` in
    /// errors and as the destination (`workflow:{name}`).
    pub fn new(binding: WorkflowBinding, name: impl Into<String>) -> Self {
        WorkflowDeliverer {
            binding,
            name: name.into(),
            clock: Arc::new(SystemClock),
            attempt_log: AttemptLog::default(),
        }
    }

    /// The Workflow bound as `name` in `env`.
    ///
    /// # Errors
    /// As [`WorkflowBinding::from_env`].
    pub fn from_env(env: &worker::Env, name: &str) -> crate::Result<Self> {
        Ok(Self::new(WorkflowBinding::from_env(env, name)?, name))
    }

    /// The clock that times each attempt.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Which attempts it logs in the outbox's attempt log (default:
    /// [`AttemptLog::Failures`]): the error `create` gave.
    #[must_use]
    pub fn attempt_log(mut self, log: AttemptLog) -> Self {
        self.attempt_log = log;
        self
    }

    /// Starts the instance of message `id` with `payload` (JSON) as params.
    pub(crate) async fn start(&self, id: &str, payload: &str) -> (Delivery, Option<AttemptRecord>) {
        let started = self.clock.now();
        let verdict = self.verdict(id, payload).await;
        let took = self.clock.now().duration_since(started);
        let record = self.attempt_log.without_status(&verdict, took);
        (verdict, record)
    }

    async fn verdict(&self, id: &str, payload: &str) -> Delivery {
        let params = match js_sys::JSON::parse(payload) {
            Ok(params) => params,
            Err(_) => return Delivery::permanent("the payload is not JSON (a Workflow's params)"),
        };
        let instance = instance_id_of(id);
        let options = js_sys::Object::new();
        let set = |key: &str, value: &JsValue| {
            js_sys::Reflect::set(&options, &JsValue::from_str(key), value).map(|_| ())
        };
        if set("id", &JsValue::from_str(&instance)).is_err() || set("params", &params).is_err() {
            return Delivery::retry("the Workflow's options cannot be built");
        }
        match self.binding.create(&options).await {
            Ok(_) => Delivery::Delivered,
            // There already: an earlier relay created it and its reply was lost.
            Err(_) if self.binding.get(&instance).await.is_ok() => Delivery::Delivered,
            Err(error) => {
                let said = error
                    .dyn_ref::<js_sys::Error>()
                    .map(|error| String::from(error.message()))
                    .or_else(|| error.as_string())
                    .unwrap_or_else(|| "an error without a message".to_owned());
                verdict_for(Some(&self.name), Some(&instance), &said)
            }
        }
    }
}

impl Deliver for WorkflowDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.start(&message.id, &message.payload).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(self.start(&message.id, &message.payload))
    }

    /// `workflow:{name}`.
    fn destination(&self, _message: &ClaimedMessage) -> Option<String> {
        Some(format!("workflow:{}", self.name))
    }
}
