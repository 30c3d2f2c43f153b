//! `tools/call`: one call of a tool, from finding it for the caller to its audit line, with
//! the guest's log and progress passed on to the client while it runs.

// MCP 2026-07-28 deprecates logging (SEP-2577), but the clients of earlier versions still ask for it.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    CreateTaskResult, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;
use tokio::sync::mpsc;

use crate::mcp::audit::{self, Outcome};
use crate::mcp::request_state::Binding;
use crate::mcp::server::{Ended, MoatServer, session_header};
use crate::mcp::surface::{Asking, Unfinished};
use crate::mcp::tasks::Job;
use crate::mcp::traces::{CallFacts, CallSpan};
use crate::plugin::{CallError, Exchange, Plugin};
use crate::policy::Verdict;
use crate::sandbox::host::{GuestEvent, Level, MAX_PENDING_EVENTS};
use crate::sandbox::network::CallCredentials;

/// One call's record, made as the call starts: [`Record::end`] ends its span, counts it in the
/// metrics and writes its audit line, all at once and only once, however the call ended.
#[must_use = "a call is recorded only when its record ends"]
struct Record<'a> {
    server: &'a MoatServer,
    context: &'a RequestContext<RoleServer>,
    request: &'a CallToolRequestParams,
    started: Instant,
    span: Option<CallSpan>,
    /// The plugin the tool was found in, once it is.
    plugin: Option<&'a Plugin>,
    /// What ends the call early: the client, or an operator when the call is watched.
    stop: tokio_util::sync::CancellationToken,
    /// Its number among the watched calls, when they are.
    watched: Option<u64>,
}

impl<'a> Record<'a> {
    fn start(
        server: &'a MoatServer,
        context: &'a RequestContext<RoleServer>,
        request: &'a CallToolRequestParams,
        started: Instant,
    ) -> Self {
        let principal = server.principal_of(&context.extensions);
        let session = session_header(&context.extensions);
        let span = server.catalogue.traces().map(|traces| {
            let facts = CallFacts {
                principal: &principal.name,
                request_id: Some(context.id.to_string()),
                session: session.as_deref(),
                protocol_version: context.meta.protocol_version().map(|v| v.to_string()),
            };
            traces.start(&request.name, &context.meta, facts)
        });
        let (stop, watched) = match server.catalogue.live_calls() {
            Some(live) => {
                let stop = context.ct.child_token();
                let id = live.start(principal, &request.name, stop.clone());
                (stop, Some(id))
            }
            None => (context.ct.clone(), None),
        };
        Self {
            server,
            context,
            request,
            started,
            span,
            plugin: None,
            stop,
            watched,
        }
    }

    fn end(self, ended: Ended) {
        let Self {
            server,
            context,
            request,
            started,
            span,
            plugin,
            watched,
            ..
        } = self;
        if let (Some(id), Some(live)) = (watched, server.catalogue.live_calls()) {
            live.end(id, ended.outcome, ended.error.as_deref());
        }
        if let Some(span) = span {
            span.end(
                plugin.map(|p| &*p.name),
                ended.outcome,
                ended.error.as_deref(),
            );
        }
        server.catalogue.metrics().record_call(
            plugin.map(|p| &*p.name),
            &request.name,
            ended.outcome,
            started.elapsed(),
            ended.denied.len(),
        );
        let binding = Binding {
            method: "tools/call",
            name: &request.name,
            arguments: request.arguments.as_ref(),
            principal: &server.principal_of(&context.extensions).name,
        };
        server.record(context, &binding, plugin, started, ended);
    }
}

impl MoatServer {
    /// Calls the tool `request` names, if the caller may see it, in a fresh instance.
    pub(super) async fn call_tool_of(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        // This call keeps the registry, and so its plugin, to the end, even across a reload.
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let mut record = Record::start(self, &context, &request, started);
        let Some((plugin, tool)) = self.catalogue.find(&registry, principal, &request.name) else {
            record.end(Ended::plain(Outcome::UnknownTool));
            return Err(McpError::invalid_params(
                format!("unknown tool \"{}\"", request.name),
                None,
            ));
        };
        record.plugin = Some(plugin);
        let binding = Binding {
            method: "tools/call",
            name: &request.name,
            arguments: request.arguments.as_ref(),
            principal: &principal.name,
        };
        // Decided before the guest runs, on the arguments as given.
        let policies = self.catalogue.policies();
        // Only policies read them: a moat without any makes none.
        let facts = match policies.is_given() {
            true => self.facts(&context),
            false => crate::policy::Facts::default(),
        };
        let decided_by =
            match policies.call_tool(principal, &tool.name, request.arguments.as_ref(), &facts) {
                Verdict::Allowed { by } => by,
                Verdict::Invalid(why) => {
                    let error = McpError::invalid_params(format!("invalid arguments: {why}"), None);
                    record.end(Ended::refused(Outcome::InvalidArguments, &error));
                    return Err(error);
                }
                Verdict::Denied { by, message } => {
                    tracing::info!(tool = tool.name, principal = principal.name, "{message}");
                    record.end(Ended {
                        error: Some(message.clone()),
                        policies: by,
                        ..Ended::plain(Outcome::Denied)
                    });
                    return Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
                }
            };
        let asking = match self.asking_for_call(&context, &binding, &request, plugin, tool) {
            Ok(asking) => asking,
            Err(error) => {
                record.end(Ended::refused(Outcome::InvalidArguments, &error));
                return Err(error);
            }
        };
        let _slot = match self.call_slot(&context).await {
            Ok(slot) => slot,
            Err(error) => {
                record.end(Ended::refused(Outcome::Busy, &error));
                return Err(error);
            }
        };
        let (events, forwarder) = self.forward_events(
            context.peer.clone(),
            context.meta.get_progress_token(),
            self.log_threshold(&context.meta),
            plugin,
        );
        let credentials = self.call_credentials(&context.extensions);
        let exchange = Exchange {
            events: Some(events),
            client: asking.as_ref().map(|a| a.client.clone()),
            credentials: credentials.clone().map(|c| c as Arc<dyn CallCredentials>),
            reach: policies.reach_of(principal, &plugin.name, &tool.name, &facts),
        };
        let call = plugin.call_asking(tool, request.arguments.as_ref(), exchange);
        // The forwarding ends after the call, which drops its sender: every report it made goes
        // out before the answer.
        let call = async { tokio::join!(call, forwarder).0 };
        let stop = record.stop.clone();
        let crate::plugin::CallOutcome {
            result: outcome,
            denials,
        } = tokio::select! {
            outcome = call => outcome,
            () = stop.cancelled() => {
                let stopping = self.catalogue.stopping_calls().is_cancelled();
                let by_operator = !stopping && !context.ct.is_cancelled();
                let by = if stopping {
                    tracing::warn!(tool = tool.name, "call stopped: moat is shutting down");
                    "the call was cancelled"
                } else if by_operator {
                    tracing::info!(tool = tool.name, "call cancelled by an operator");
                    "the call was cancelled by an operator"
                } else {
                    tracing::info!(tool = tool.name, "call cancelled by the client");
                    "the call was cancelled"
                };
                record.end(Ended {
                    error: by_operator.then(|| by.to_string()),
                    ..Ended::plain(Outcome::Cancelled)
                });
                return Err(McpError::internal_error(by, None));
            }
        };
        let (audited, error) = match &outcome {
            Ok(result) if result.is_error == Some(true) => (Outcome::ToolError, None),
            Ok(_) => (Outcome::Ok, None),
            Err(error) => (audit::outcome_of(error), Some(error.to_string())),
        };
        let ended = Ended {
            outcome: audited,
            error,
            denied: denials,
            credentials: credentials.as_ref().map(|c| c.used()).unwrap_or_default(),
            policies: decided_by,
        };
        record.end(ended);
        if let (Err(CallError::Detached), Some(asking)) = (&outcome, &asking) {
            let job = Job {
                registry: registry.clone(),
                tool: request.name.to_string(),
                arguments: request.arguments.clone(),
                capabilities: asking.capabilities.clone(),
                caller: self.task_caller(&context),
            };
            let tasks = self.catalogue.tasks();
            let task = tasks.start(&principal.name, job, asking.answered()).await?;
            return Ok(CreateTaskResult::new(task).into());
        }
        if let Err(error) = &outcome {
            match self.unfinished(error, asking.as_ref(), &binding) {
                Some(Unfinished::InputRequired(result)) => return Ok(result.into()),
                Some(Unfinished::Error(error)) => return Err(error),
                None => {}
            }
        }
        Ok(match outcome {
            Ok(result) => result,
            Err(error) => {
                tracing::warn!(tool = tool.name, "call failed: {error}");
                CallToolResult::error(vec![ContentBlock::text(error.to_string())])
            }
        }
        .into())
    }

    /// The client a call's guest may ask, for a plugin that imports `client` or `tasks` (others
    /// get none, and their calls pay nothing for it); a tool that runs only as a task is refused
    /// to a client that does not follow tasks.
    fn asking_for_call(
        &self,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        request: &CallToolRequestParams,
        plugin: &Plugin,
        tool: &crate::plugin::Tool,
    ) -> Result<Option<Asking>, McpError> {
        let follows_tasks = || {
            context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
        };
        if tool.task_required && !follows_tasks() {
            let required = ClientCapabilities::builder().enable_tasks().build();
            return Err(McpError::missing_required_client_capability(required));
        }
        if !plugin.asks_client() && !plugin.injects_callers_credentials() {
            return Ok(None);
        }
        let state = request.request_state.as_deref();
        let responses = request.input_responses.as_ref();
        self.asking(context, binding, state, responses).map(Some)
    }

    /// Hands the guest's log and progress reports of one call on to the client. The returned
    /// future ends once the call drops its sender. It runs beside the call in the call's own
    /// task, not in a task of its own: spawning one per call cost a wake-up of another thread
    /// on every call, and the reports still go out whenever the guest waits or yields (at
    /// least every epoch tick).
    fn forward_events(
        &self,
        peer: Peer<RoleServer>,
        progress_token: Option<rmcp::model::ProgressToken>,
        log_threshold: Option<LoggingLevel>,
        plugin: &Plugin,
    ) -> (mpsc::Sender<GuestEvent>, impl Future<Output = ()>) {
        let (sender, mut receiver) = mpsc::channel(MAX_PENDING_EVENTS);
        let scheme = plugin.scheme.clone();
        let plugin = plugin.name.to_string();
        let catalogue = self.catalogue.clone();
        let forwarder = async move {
            while let Some(event) = receiver.recv().await {
                let sent = match event {
                    GuestEvent::Log { level, message } => {
                        let level = logging_level(level);
                        if log_threshold.is_none_or(|least| rank(level) < rank(least)) {
                            continue;
                        }
                        let mut param = LoggingMessageNotificationParam::new(level, json!(message));
                        param.logger = Some(plugin.clone());
                        peer.notify_logging_message(param).await
                    }
                    GuestEvent::Progress {
                        progress,
                        total,
                        message,
                    } => {
                        let Some(token) = progress_token.clone() else {
                            continue;
                        };
                        let mut param = ProgressNotificationParam::new(token, progress);
                        param.total = total;
                        param.message = message;
                        peer.notify_progress(param).await
                    }
                    GuestEvent::ResourceUpdated { uri } => {
                        // A plugin names only its own resources: the scheme is moat's to add.
                        catalogue
                            .resource_updated(&format!("{scheme}://{uri}"))
                            .await;
                        Ok(())
                    }
                };
                if sent.is_err() {
                    break; // the client is gone
                }
            }
        };
        (sender, forwarder)
    }

    /// The least severe guest log level this request wants: 2026-07-28 requests say so in their
    /// own `_meta` (no level: no log messages); earlier clients set it per connection.
    fn log_threshold(&self, meta: &rmcp::model::RequestMetaObject) -> Option<LoggingLevel> {
        match meta.protocol_version() {
            Some(_) => meta.log_level(),
            None => Some(self.log_level()),
        }
    }
}

fn logging_level(level: Level) -> LoggingLevel {
    match level {
        Level::Debug => LoggingLevel::Debug,
        Level::Info => LoggingLevel::Info,
        Level::Notice => LoggingLevel::Notice,
        Level::Warning => LoggingLevel::Warning,
        Level::Error => LoggingLevel::Error,
    }
}

/// Severity order, least severe first.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
