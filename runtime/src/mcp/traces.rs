//! OpenTelemetry traces of tool calls, sent over OTLP/HTTP when configured (off by default): a
//! span per `tools/call`, named and attributed as the MCP and gen_ai semantic conventions have
//! it (`tools/call NAME`, `mcp.method.name`, `gen_ai.tool.name`, `gen_ai.operation.name`,
//! `mcp.session.id`, `jsonrpc.request.id`, `error.type`), with moat's own (`moat.plugin`,
//! `moat.principal`, `moat.outcome`). A caller's W3C `traceparent` (and `tracestate`) in the
//! request's `_meta` makes the span its child, so a call shows up inside the agent's own trace.
//!
//! Spans leave in batches from a thread of their own: a slow or absent collector delays no call.

use std::time::Duration;

use anyhow::{Context as _, Result};
use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::{Map, Value};

use crate::mcp::audit::Outcome;

/// Sends spans to one OTLP/HTTP endpoint.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// Traces sent to `endpoint`: a collector's base URL (`http://127.0.0.1:4318`, to which
    /// `/v1/traces` is added) or the full traces URL.
    pub fn new(endpoint: &str) -> Result<Self> {
        let url = reqwest::Url::parse(endpoint)
            .with_context(|| format!("the OTLP endpoint \"{endpoint}\" is not a URL"))?;
        let url = if url.path().trim_end_matches('/').is_empty() {
            url.join("/v1/traces")?.to_string()
        } else {
            url.to_string()
        };
        crate::supply::source::install_tls_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&url)
            .with_timeout(Duration::from_secs(10))
            .build()
            .context("setting up the OTLP exporter")?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name("moat")
                    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("moat");
        tracing::info!("sending traces of tool calls to {url}");
        Ok(Self { provider, tracer })
    }

    /// Starts the span of one call of `tool`, the child of the `traceparent` in `meta` if any.
    pub fn start(&self, tool: &str, meta: &Map<String, Value>, facts: CallFacts<'_>) -> CallSpan {
        let parent = TraceContextPropagator::new().extract(&MetaCarrier(meta));
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("moat.principal", facts.principal.to_string()),
        ];
        if let Some(id) = facts.request_id {
            attributes.push(KeyValue::new("jsonrpc.request.id", id));
        }
        if let Some(session) = facts.session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_string()));
        }
        if let Some(version) = facts.protocol_version {
            attributes.push(KeyValue::new("mcp.protocol.version", version));
        }
        let span = self
            .tracer
            .span_builder(format!("tools/call {tool}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        CallSpan(span)
    }
}

impl Traces {
    /// Sends the spans not sent yet; moat calls it as it stops.
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!("sending the last traces: {error}");
        }
    }
}

/// What is known of a call as it starts.
pub struct CallFacts<'a> {
    pub principal: &'a str,
    pub request_id: Option<String>,
    pub session: Option<&'a str>,
    pub protocol_version: Option<String>,
}

/// One call's span, ended by [`CallSpan::end`].
pub struct CallSpan(opentelemetry_sdk::trace::Span);

impl CallSpan {
    pub fn end(mut self, plugin: Option<&str>, outcome: Outcome, error: Option<&str>) {
        if let Some(plugin) = plugin {
            self.0
                .set_attribute(KeyValue::new("moat.plugin", plugin.to_string()));
        }
        self.0
            .set_attribute(KeyValue::new("moat.outcome", outcome.as_str()));
        if outcome != Outcome::Ok {
            self.0
                .set_attribute(KeyValue::new("error.type", outcome.as_str()));
            self.0
                .set_status(Status::error(error.unwrap_or(outcome.as_str()).to_string()));
        }
        self.0.end();
    }
}

/// The request's `_meta`, read as a W3C trace context carrier.
struct MetaCarrier<'a>(&'a Map<String, Value>);

impl Extractor for MetaCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}
