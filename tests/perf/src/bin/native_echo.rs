//! The native baseline: an rmcp server offering the `echo_echo` tool of moat's `echo` plugin with
//! the same schemas and the same result shape, implemented in plain Rust.
//!
//! `native-echo` serves stdio, through rmcp's non-blocking pipe transport; `native-echo --http
//! 127.0.0.1:PORT` serves Streamable HTTP at `/mcp` with the same rmcp configuration moat uses.

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::serve::ListenerExt as _;
use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Serves one echo tool natively over MCP.
#[derive(Parser)]
struct Cli {
    /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio.
    #[arg(long, value_name = "ADDRESS")]
    http: Option<std::net::SocketAddr>,
}

#[derive(Clone)]
struct NativeEcho {
    tool: Arc<Tool>,
}

impl NativeEcho {
    fn new() -> Self {
        let tool = Tool::new(
            "echo_echo",
            "Returns `message` exactly as it was given.",
            object(json!({
                "type": "object",
                "properties": {"message": {"type": "string", "description": "the text to send back."}},
                "required": ["message"],
                "additionalProperties": false,
            })),
        );
        Self {
            tool: Arc::new(tool),
        }
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => unreachable!("schemas are objects"),
    }
}

impl ServerHandler for NativeEcho {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("native-echo", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![(*self.tool).clone()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == self.tool.name).then(|| (*self.tool).clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != self.tool.name {
            return Err(McpError::invalid_params(
                format!("unknown tool \"{}\"", request.name),
                None,
            ));
        }
        let message = request
            .arguments
            .as_ref()
            .and_then(|args| args.get("message"))
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("`message` must be a string", None))?;
        // As moat renders a string result: text alone.
        Ok(CallToolResult::success(vec![ContentBlock::text(message)]).into())
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let server = NativeEcho::new();
    let Some(addr) = cli.http else {
        // rmcp's fastest stdio: pipes driven by tokio's reactor instead of its blocking pool.
        let service = server
            .serve(rmcp::transport::stdio_pipes())
            .await
            .context("starting the MCP session")?;
        service.waiting().await?;
        return Ok(());
    };
    // The same configuration as moat's HTTP endpoint, so both pay for the same checks.
    let mut config = StreamableHttpServerConfig::default();
    config.allowed_origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .map(String::from)
        .to_vec();
    config.max_request_body_bytes = 4 << 20;
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    // As moat does: without TCP_NODELAY the last piece of each answer waits for a delayed ACK.
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, router).await.context("serving HTTP")
}
