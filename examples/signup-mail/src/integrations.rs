//! `/admin/endpoints`: the application's integrations (its own endpoints,
//! owner `"app"`), which receive `account.created` beside the mail, in the
//! sign-up's own batch. Bearer `ADMIN_TOKEN`.

use serde::Deserialize;
use worker::{Method, Request, Response};
use workers_outbox::endpoint::NewEndpoint;

use crate::app::App;
use crate::{error_response, json, json_error};

/// The owner of the application's own endpoints.
pub(crate) const OWNER: &str = "app";

/// The largest body the route takes.
const BODY_LIMIT: usize = 16 * 1024;

pub(crate) async fn handle(mut request: Request, app: &App) -> worker::Result<Response> {
    if !app.is_operator(&request)? {
        return json_error(401, "an operator's bearer token is required");
    }
    let declared = request.headers().get("content-length")?;
    if declared
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n > BODY_LIMIT)
    {
        return json_error(413, "the body is over 16 KiB");
    }
    match request.method() {
        Method::Get => match app.endpoints.list(OWNER).await {
            Ok(endpoints) => json(200, &endpoints),
            Err(error) => error_response(&error),
        },
        Method::Post => {
            let body = request.bytes().await?;
            if body.len() > BODY_LIMIT {
                return json_error(413, "the body is over 16 KiB");
            }
            #[derive(Deserialize)]
            struct Registered {
                url: String,
                secret: String,
                #[serde(default)]
                event_types: Option<Vec<String>>,
            }
            let Ok(registered) = serde_json::from_slice::<Registered>(&body) else {
                return json_error(
                    400,
                    "the body must be JSON: {\"url\": string, \"secret\": string, \"event_types\"?: [string]}",
                );
            };
            let mut new = NewEndpoint::new(OWNER, registered.url, registered.secret);
            if let Some(types) = registered.event_types {
                new = new.event_types(types);
            }
            match app.endpoints.create(new).await {
                Ok(endpoint) => json(201, &endpoint),
                Err(error) => error_response(&error),
            }
        }
        _ => json_error(405, "use GET or POST"),
    }
}

/// `GET /admin/portal-link?owner=…`: a link to the console's tenant portal
/// for that owner, valid for an hour (bearer `ADMIN_TOKEN`; `PORTAL_KEY`
/// must be set). An application gives such a link to a signed-in customer.
pub(crate) fn portal_link(
    request: &Request,
    app: &App,
    env: &worker::Env,
) -> worker::Result<Response> {
    if !app.is_operator(request)? {
        return json_error(401, "an operator's bearer token is required");
    }
    let url = request.url()?;
    let owner = url
        .query_pairs()
        .find(|(name, _)| name == "owner")
        .map_or_else(|| OWNER.to_owned(), |(_, owner)| owner.into_owned());
    match app
        .console(env)?
        .portal_link(&owner, std::time::Duration::from_secs(3600))
    {
        Ok(link) => json(200, &serde_json::json!({ "owner": owner, "link": link })),
        Err(error) => error_response(&error),
    }
}
