//! The MCP face of moat: an rmcp [`ServerHandler`] whose tools are the registry's.
//!
//! The handler knows nothing of transports; stdio (and any other rmcp transport) serves it as is.

// MCP 2026-07-28 deprecates logging (SEP-2577), but the clients of earlier versions still ask for it.
#![allow(deprecated)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ClientCapabilities, CompleteRequestParams, CompleteResult, ContentBlock, CreateTaskResult,
    DiscoverResult, ErrorCode, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
    GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::mpsc;

use crate::access::Principal;
use crate::access::quotas::{HandedSlot, Slot};
use crate::mcp::audit::{self, Outcome};
use crate::mcp::catalogue::{Catalogue, MAX_SUBSCRIPTIONS, Subscribed};
use crate::mcp::instructions;
use crate::mcp::request_state::Binding;
use crate::mcp::surface::{Asking, Unfinished, no_subscriptions};
use crate::mcp::tasks::Job;
use crate::mcp::traces::{CallFacts, CallSpan};
use crate::plugin::{CallError, Exchange};
use crate::sandbox::host::{GuestEvent, Level, MAX_PENDING_EVENTS};
use crate::sandbox::network::CallCredentials;

/// Serves the tools of a [`Catalogue`] (or of a fixed [`crate::plugin::registry::Registry`]) over MCP.
#[derive(Clone)]
pub struct MoatServer {
    pub(crate) catalogue: Catalogue,
    /// The least severe guest log message the client wants to receive.
    log_level: Arc<Mutex<LoggingLevel>>,
    /// Whether this handler serves a session that began with `initialize`. Over HTTP rmcp then
    /// routes a request here only once its `Mcp-Session-Id` names this session, so that id is
    /// established; a stateless request's `Mcp-Session-Id` is only what the client says.
    in_session: Arc<AtomicBool>,
    /// Whom a request acts for when its transport says nothing (stdio: the user who started moat).
    principal: Principal,
    /// The resources this (legacy) session subscribed to.
    pub(crate) subscribed: Subscribed,
}

impl MoatServer {
    /// Serves `catalogue` to the `stdio` principal, unless a transport names another.
    pub fn new(catalogue: impl Into<Catalogue>) -> Self {
        Self {
            catalogue: catalogue.into(),
            log_level: Arc::new(Mutex::new(LoggingLevel::Debug)),
            in_session: Arc::new(AtomicBool::new(false)),
            principal: Principal::stdio("stdio"),
            subscribed: no_subscriptions(),
        }
    }

    /// Whether this handler serves a legacy session.
    pub(crate) fn is_in_session(&self) -> bool {
        self.in_session.load(Ordering::Relaxed)
    }

    /// The least severe guest log message this session wants.
    pub(crate) fn log_level(&self) -> LoggingLevel {
        *self.log_level.lock().expect("log level lock")
    }

    pub(crate) fn set_log_level(&self, level: LoggingLevel) {
        *self.log_level.lock().expect("log level lock") = level;
    }

    /// The resources this session follows.
    pub(crate) fn subscriptions(&self) -> std::collections::BTreeSet<String> {
        self.subscribed.lock().expect("subscriptions lock").clone()
    }

    /// Acts for `principal` when a request's transport names nobody.
    pub fn with_principal(mut self, principal: Principal) -> Self {
        self.principal = principal;
        self
    }

    /// Whom a request acts for: the principal HTTP authentication established, else this
    /// server's own.
    /// The credentials of one call, for the principal of the request in `extensions`, when
    /// `[credentials]` names sources.
    pub(crate) fn call_credentials(
        &self,
        extensions: &rmcp::model::Extensions,
    ) -> Option<Arc<crate::upstream::Caller>> {
        let broker = self.catalogue.credentials()?;
        let token = extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::access::AccessToken>())
            .cloned();
        let principal = self.principal_of(extensions);
        // Only the stdio user's consent comes back to a listener of moat's own.
        let loopback = (principal.via == crate::access::Via::Stdio).then(|| {
            let catalogue = self.catalogue.clone();
            Arc::new(move |uri: &str| catalogue.loopback().serve(&catalogue, uri))
                as crate::upstream::Loopback
        });
        Some(broker.for_call(principal, token, loopback))
    }

    /// [`MoatServer::call_credentials`], for a task's run.
    /// Who a task's run is for: the request's caller, with their credentials and their access
    /// as it is when each run begins.
    fn task_caller(&self, extensions: &rmcp::model::Extensions) -> crate::mcp::tasks::Caller {
        let credentials = self
            .call_credentials(extensions)
            .map(|c| c as Arc<dyn CallCredentials>);
        let (catalogue, principal) = (
            self.catalogue.clone(),
            self.principal_of(extensions).clone(),
        );
        crate::mcp::tasks::Caller {
            credentials,
            may_call: Arc::new(move |tool| {
                let registry = catalogue.current();
                catalogue.find(&registry, &principal, tool).is_some()
            }),
        }
    }

    pub(crate) fn principal_of<'a>(
        &'a self,
        extensions: &'a rmcp::model::Extensions,
    ) -> &'a Principal {
        extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .unwrap_or(&self.principal)
    }

    fn mcp_tool(&self, tool: &crate::plugin::Tool) -> Tool {
        let mut mcp = Tool::new(
            tool.name.clone(),
            tool.description.clone(),
            tool.input_schema.clone(),
        );
        mcp.output_schema = tool.output_schema.clone();
        mcp.title = tool.title.clone();
        mcp.annotations = tool.annotations.clone();
        mcp
    }

    /// The call slot a request's guest runs in, held until dropped: the one the HTTP layer took
    /// for it, else one of its principal's taken now, or the refusal when they are all taken.
    pub(crate) async fn call_slot(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Slot, McpError> {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        if let Some(slot) = parts
            .and_then(|parts| parts.extensions.get::<HandedSlot>())
            .and_then(HandedSlot::take)
        {
            return Ok(slot);
        }
        let principal = self.principal_of(&context.extensions);
        self.catalogue
            .quotas()
            .call(&principal.name)
            .await
            .map_err(|exceeded| {
                McpError::new(
                    ErrorCode(crate::mcp::http::quotas::RATE_LIMITED),
                    exceeded.message(&principal.name),
                    None,
                )
            })
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
        plugin: &crate::plugin::Plugin,
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
            None => Some(*self.log_level.lock().expect("log level lock")),
        }
    }
}

impl MoatServer {
    /// The client a call's guest may ask, for a plugin that imports `client` or `tasks` (others
    /// get none, and their calls pay nothing for it); a tool that runs only as a task is refused
    /// to a client that does not follow tasks.
    fn asking_for_call(
        &self,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        request: &CallToolRequestParams,
        plugin: &crate::plugin::Plugin,
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
}

/// How a call ended, for its audit line.
pub(crate) struct Ended {
    pub outcome: Outcome,
    pub error: Option<String>,
    /// The capability uses the sandbox refused during the call.
    pub denied: Vec<String>,
    /// The `[credentials]` sources whose credentials the call's requests carried.
    pub credentials: Vec<String>,
}

impl Ended {
    pub(crate) fn plain(outcome: Outcome) -> Self {
        Self {
            outcome,
            error: None,
            denied: Vec::new(),
            credentials: Vec::new(),
        }
    }
}

impl MoatServer {
    /// Counts the call in the metrics, and writes its line in the audit log when there is one.
    fn audit(
        &self,
        context: &RequestContext<RoleServer>,
        request: &CallToolRequestParams,
        plugin: Option<&crate::plugin::Plugin>,
        started: std::time::Instant,
        ended: Ended,
        span: Option<CallSpan>,
    ) {
        if let Some(span) = span {
            span.end(
                plugin.map(|p| &*p.name),
                ended.outcome,
                ended.error.as_deref(),
            );
        }
        self.catalogue.metrics().record_call(
            plugin.map(|p| &*p.name),
            &request.name,
            ended.outcome,
            started.elapsed(),
            ended.denied.len(),
        );
        let request = Binding {
            method: "tools/call",
            name: &request.name,
            arguments: request.arguments.as_ref(),
            principal: &self.principal_of(&context.extensions).name,
        };
        self.record(context, &request, plugin, started, ended);
    }

    /// Writes one request's line in the audit log, when there is one.
    pub(crate) fn record(
        &self,
        context: &RequestContext<RoleServer>,
        request: &Binding<'_>,
        plugin: Option<&crate::plugin::Plugin>,
        started: std::time::Instant,
        ended: Ended,
    ) {
        let Some(log) = self.catalogue.audit() else {
            return;
        };
        // Whatever a request's `_meta` or the session's `initialize` says about the client, it
        // says itself. (Outside a session rmcp fills in a placeholder, not even a claim.)
        let in_session = self.in_session.load(Ordering::Relaxed);
        let client_claimed = context
            .meta
            .client_info()
            .or_else(|| {
                in_session
                    .then(|| context.peer.peer_info())
                    .flatten()
                    .map(|info| info.client_info.clone())
            })
            .map(|info| format!("{} {}", info.name, info.version));
        let header = session_header(&context.extensions);
        let (session, session_claimed) = if in_session {
            (header, None)
        } else {
            (None, header)
        };
        let remote = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::mcp::http::auth::Remote>())
            .and_then(|remote| remote.0);
        log.record(audit::Call {
            principal: self.principal_of(&context.extensions),
            remote,
            client_claimed,
            session,
            session_claimed,
            plugin: plugin.map(|p| &*p.name),
            digest: plugin.map(|p| p.admission.digest.as_str()),
            method: request.method,
            tool: request.name,
            arguments: request.arguments,
            duration: started.elapsed(),
            outcome: ended.outcome,
            error: ended.error,
            denied: ended.denied,
            credentials: ended.credentials,
        });
    }
}

impl ServerHandler for MoatServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_tasks()
                .build(),
        );
        info.server_info = Implementation::new("moat", env!("CARGO_PKG_VERSION"));
        // The plugins' own words come with `initialize` and `server/discover`, which know who
        // is asking (see `Catalogue::instructions`).
        info.instructions = Some(instructions::compose(std::iter::empty()));
        info
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut result = DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        );
        let principal = self.principal_of(&context.extensions);
        result.instructions = Some(
            self.catalogue
                .instructions(&self.catalogue.current(), principal),
        );
        // What it says depends on who asked.
        result.cache_scope = CacheScope::Private;
        Ok(result)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.in_session.store(true, Ordering::Relaxed);
        context.peer.set_peer_info(request.clone());
        self.restore_settings(&context).await;
        let mut result = self.negotiate_initialize(&request)?;
        let principal = self.principal_of(&context.extensions);
        result.instructions = Some(
            self.catalogue
                .instructions(&self.catalogue.current(), principal),
        );
        Ok(result)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let registry = self.catalogue.current();
        let cursor = request.and_then(|r| r.cursor);
        let principal = self.principal_of(&context.extensions);
        let page = self
            .catalogue
            .page(&registry, principal, cursor.as_deref())?;
        let tools = page.tools.iter().map(|(_, tool)| self.mcp_tool(tool));
        let mut result = ListToolsResult::with_all_items(tools.collect());
        result.next_cursor = page.next_cursor;
        Ok(result)
    }

    /// Only for rmcp's check of `Mcp-Param-*` headers against a tool's schema, which has no
    /// request to say whose tools to look in: a tool hidden from the caller is still refused
    /// by `call_tool` as unknown.
    /// A tool as rmcp looks it up outside a request (the `Mcp-Param` headers it checks): only
    /// one this handler's principal may see, or a hidden tool's existence would show.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        let registry = self.catalogue.current();
        self.catalogue
            .find(&registry, &self.principal, name)
            .map(|(_, tool)| self.mcp_tool(tool))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = std::time::Instant::now();
        // This call keeps the registry, and so its plugin, to the end, even across a reload.
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let session = session_header(&context.extensions);
        let span = self.catalogue.traces().map(|traces| {
            let facts = CallFacts {
                principal: &principal.name,
                request_id: Some(context.id.to_string()),
                session: session.as_deref(),
                protocol_version: context.meta.protocol_version().map(|v| v.to_string()),
            };
            traces.start(&request.name, &context.meta, facts)
        });
        let Some((plugin, tool)) = self.catalogue.find(&registry, principal, &request.name) else {
            self.audit(
                &context,
                &request,
                None,
                started,
                Ended::plain(Outcome::UnknownTool),
                span,
            );
            return Err(McpError::invalid_params(
                format!("unknown tool \"{}\"", request.name),
                None,
            ));
        };
        let binding = Binding {
            method: "tools/call",
            name: &request.name,
            arguments: request.arguments.as_ref(),
            principal: &principal.name,
        };
        let asking = self.asking_for_call(&context, &binding, &request, plugin, tool);
        let asking = match asking {
            Ok(asking) => asking,
            Err(error) => {
                let ended = Ended {
                    outcome: Outcome::InvalidArguments,
                    error: Some(error.message.to_string()),
                    denied: Vec::new(),
                    credentials: Vec::new(),
                };
                self.audit(&context, &request, Some(plugin), started, ended, span);
                return Err(error);
            }
        };
        let _slot = match self.call_slot(&context).await {
            Ok(slot) => slot,
            Err(error) => {
                let ended = Ended {
                    outcome: Outcome::Busy,
                    error: Some(error.message.to_string()),
                    denied: Vec::new(),
                    credentials: Vec::new(),
                };
                self.audit(&context, &request, Some(plugin), started, ended, span);
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
        };
        let call = plugin.call_asking(tool, request.arguments.as_ref(), exchange);
        // The forwarding ends after the call, which drops its sender: every report it made goes
        // out before the answer.
        let call = async { tokio::join!(call, forwarder).0 };
        let crate::plugin::CallOutcome {
            result: outcome,
            denials,
        } = tokio::select! {
            outcome = call => outcome,
            () = context.ct.cancelled() => {
                self.audit(&context, &request, Some(plugin), started, Ended::plain(Outcome::Cancelled), span);
                tracing::info!(tool = tool.name, "call cancelled by the client");
                return Err(McpError::internal_error("the call was cancelled", None));
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
        };
        self.audit(&context, &request, Some(plugin), started, ended, span);
        if let (Err(CallError::Detached), Some(asking)) = (&outcome, &asking) {
            let job = Job {
                registry: registry.clone(),
                tool: request.name.to_string(),
                arguments: request.arguments.clone(),
                capabilities: asking.capabilities.clone(),
                caller: self.task_caller(&context.extensions),
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

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(self.list_prompts_of(&context))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.get_prompt_of(request, context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(self.list_resources_of(&context))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(self.list_resource_templates_of(&context))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.read_resource_of(request, context).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribe_to(&request.uri, &self.subscribed, &context)?;
        self.keep_subscriptions(&context).await;
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribed
            .lock()
            .expect("subscriptions lock")
            .remove(&request.uri);
        self.keep_subscriptions(&context).await;
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.complete_of(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let principal = self.principal_of(&context.extensions);
        let task = self
            .catalogue
            .tasks()
            .get(
                &principal.name,
                &request.task_id,
                self.task_caller(&context.extensions),
            )
            .await?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = self.principal_of(&context.extensions);
        self.catalogue
            .tasks()
            .update(
                &principal.name,
                &request.task_id,
                &request.input_responses,
                self.task_caller(&context.extensions),
            )
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = self.principal_of(&context.extensions);
        self.catalogue
            .tasks()
            .cancel(&principal.name, &request.task_id)
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.set_log_level(request.level);
        self.keep_log_level(&context).await;
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A legacy session: told of changes of its principal's tools.
        let principal = self.principal_of(&context.extensions).clone();
        self.catalogue.follow(context.peer, principal);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Resource URIs are checked against the caller as each update comes. The stream follows
        // at most as many as a session may subscribe to; the answer names those it follows.
        let mut uris = requested.resource_subscriptions.clone().unwrap_or_default();
        uris.truncate(MAX_SUBSCRIPTIONS);
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .resource_subscriptions(uris)
                .build(),
        )
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let principal = self
            .principal_of(&subscription.request_context().extensions)
            .clone();
        self.catalogue.listen(subscription, principal).await
    }
}

/// The `Mcp-Session-Id` an HTTP request carried, as spans and the audit log name it: its
/// digest, since the id itself lets its holder use the session.
fn session_header(extensions: &rmcp::model::Extensions) -> Option<String> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|id| id.to_str().ok())
        .map(crate::mcp::http::sessions::digest)
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
