//! `moat:plugin/mcp-client`: what an MCP server component sends its client while it handles a
//! message. Its progress and log notifications become the call's reports; its requests to the
//! client become the questions `moat:plugin/client` asks, so they reach the caller the same way
//! (a request on a legacy session, a round of `input_required` on 2026-07-28).

use serde_json::{Value, json};

use super::host::bindings::moat::plugin::{log, mcp_client, progress};
use super::host::{AskError, HostState, MAX_QUESTION_BYTES, Question};

/// The requests a server may send its client, which moat passes on.
const PASSED_ON: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

impl mcp_client::Host for HostState {
    fn notify(&mut self, message: String) {
        let Ok(notification) = serde_json::from_str::<Value>(&message) else {
            return;
        };
        let params = &notification["params"];
        match notification["method"].as_str() {
            Some("notifications/progress") => progress::Host::report(
                self,
                params["progress"].as_f64().unwrap_or_default(),
                params["total"].as_f64(),
                params["message"].as_str().map(str::to_string),
            ),
            Some("notifications/message") => {
                let text = match &params["data"] {
                    Value::String(text) => text.clone(),
                    data => data.to_string(),
                };
                let text = match params["logger"].as_str() {
                    Some(logger) => format!("{logger}: {text}"),
                    None => text,
                };
                log::Host::log(self, level(params["level"].as_str()), text);
            }
            // The lists are read when the plugin loads: a change reaches clients by a reload.
            _ => {}
        }
    }

    async fn request(&mut self, message: String) -> wasmtime::Result<String> {
        let request: Value = match serde_json::from_str(&message) {
            Ok(request) => request,
            Err(e) => return Ok(refusal(&Value::Null, -32700, &format!("not JSON: {e}"))),
        };
        let id = &request["id"];
        let method = request["method"].as_str().unwrap_or_default();
        if !PASSED_ON.contains(&method) {
            let why = format!("moat passes no `{method}` request to the client");
            return Ok(refusal(id, -32601, &why));
        }
        if message.len() > MAX_QUESTION_BYTES {
            let why = format!("a request to the client may take {MAX_QUESTION_BYTES} bytes");
            return Ok(refusal(id, -32600, &why));
        }
        let (client, asked) = self.asking();
        let Some(client) = client else {
            return Ok(refusal(
                id,
                -32603,
                "this request cannot ask the client anything",
            ));
        };
        // The n-th request of a call is its n-th question, so that a 2026-07-28 call run again
        // with the client's answers finds each answer under the key it was asked by.
        let key = format!("request-{}", asked.len() + 1);
        asked.insert(key.clone());
        let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        if let Some(params) = params.as_object_mut() {
            params.remove("_meta");
        }
        let question = Question {
            key,
            method: method.to_string(),
            params,
            form: None,
        };
        match client.ask(vec![question]).await {
            Ok(mut answers) => match answers.pop() {
                Some((_, result)) => {
                    Ok(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
                }
                None => Ok(refusal(id, -32603, "the client gave no answer")),
            },
            Err(AskError::Refused(why)) => Ok(refusal(id, -32603, &why)),
            Err(AskError::InputRequired(stop)) => Err(wasmtime::Error::new(stop)),
            Err(AskError::MissingCapability(stop)) => Err(wasmtime::Error::new(stop)),
        }
    }
}

/// A JSON-RPC error response to request `id`.
fn refusal(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// MCP's logging level as moat's: the three above `error` are errors too.
fn level(name: Option<&str>) -> log::Level {
    match name {
        Some("debug") => log::Level::Debug,
        Some("notice") => log::Level::Notice,
        Some("warning") => log::Level::Warning,
        Some("error" | "critical" | "alert" | "emergency") => log::Level::Error,
        _ => log::Level::Info,
    }
}
