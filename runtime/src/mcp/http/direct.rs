//! Requests to `/mcp` made inside moat for a principal it already knows: the operator's console
//! calling a tool as the signed-in operator. They pass every layer but authentication (the
//! quotas, the message check, rmcp and the handler), so such a call is counted, decided and
//! audited as any other call of that principal.

use std::net::IpAddr;

use axum::body::Body;
use axum::http::{Request, header};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::auth::{Remote, acting_for};
use crate::access::Principal;

/// The protocol version moat's own requests speak: stateless, one request per call.
const VERSION: &str = "2026-07-28";

/// The largest answer read back.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// `/mcp` behind every layer but authentication.
#[derive(Clone)]
pub struct Direct {
    pub(super) mcp: axum::Router,
}

impl Direct {
    /// `tools/call` of `tool` with `arguments`, as `principal` from `remote`: the JSON-RPC
    /// result as a client gets it, or the JSON-RPC error (or why there is none) as text.
    pub async fn call_tool(
        &self,
        principal: Principal,
        remote: Option<IpAddr>,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, String> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {
                        "name": "moat-console",
                        "version": env!("CARGO_PKG_VERSION"),
                    },
                },
            },
        });
        let mut request = Request::post("/mcp")
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(Body::from(body.to_string()))
            .map_err(|e| format!("the request could not be made: {e}"))?;
        request.extensions_mut().insert(Remote(remote));
        request.extensions_mut().insert(principal.clone());
        let answer = acting_for(principal, self.mcp.clone().oneshot(request))
            .await
            .map_err(|e| format!("the request failed: {e}"))?;
        let status = answer.status();
        let bytes = axum::body::to_bytes(answer.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|e| format!("the answer could not be read: {e}"))?;
        let text = String::from_utf8_lossy(&bytes);
        let message = last_message(&text).ok_or_else(|| format!("HTTP {status}: {text}"))?;
        match (message.get("result"), message.get("error")) {
            (Some(result), _) => Ok(result.clone()),
            (None, Some(error)) => Err(error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string)),
            (None, None) => Err(format!("HTTP {status}: {text}")),
        }
    }
}

/// The JSON-RPC answer in `text`: the body itself, or the last `data:` of an event stream
/// that carries one (notifications may come first).
fn last_message(text: &str) -> Option<Value> {
    if let Ok(message) = serde_json::from_str::<Value>(text) {
        return Some(message);
    }
    text.lines()
        .rev()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_in_json_or_after_notifications_in_a_stream() {
        let plain = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert!(last_message(plain).unwrap()["result"].is_object());
        let stream = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":true}}\n\n";
        assert_eq!(last_message(stream).unwrap()["result"]["isError"], true);
        assert!(last_message("Bad Request").is_none());
    }
}
