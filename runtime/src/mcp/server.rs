//! The MCP face of moat: an rmcp [`ServerHandler`] whose tools are the registry's.
//!
//! The handler knows nothing of transports; stdio (and any other rmcp transport) serves it as is.

// MCP 2026-07-28 deprecates logging (SEP-2577), but the clients of earlier versions still ask for it.
#![allow(deprecated)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, DiscoverResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingLevel, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::access::Principal;
use crate::access::quotas::{HandedSlot, Slot};
use crate::mcp::audit::{self, Outcome};
use crate::mcp::catalogue::{Catalogue, MAX_SUBSCRIPTIONS, Subscribed};
use crate::mcp::instructions;
use crate::mcp::request_state::Binding;
use crate::mcp::surface::no_subscriptions;
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
    pub(super) fn task_caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> crate::mcp::tasks::Caller {
        let (extensions, facts) = (&context.extensions, self.facts(context));
        let credentials = self
            .call_credentials(extensions)
            .map(|c| c as Arc<dyn CallCredentials>);
        let (catalogue, principal) = (
            self.catalogue.clone(),
            self.principal_of(extensions).clone(),
        );
        // A run's requests are decided by the policies in force when it runs.
        let reach = {
            let (catalogue, principal) = (catalogue.clone(), principal.clone());
            let facts = facts.clone();
            Arc::new(move |tool: &str| {
                let registry = catalogue.current();
                let (plugin, _) = registry.find(tool)?;
                catalogue
                    .policies()
                    .reach_of(&principal, &plugin.name, tool, &facts)
            }) as crate::mcp::tasks::ReachOf
        };
        crate::mcp::tasks::Caller {
            credentials,
            may_call: Arc::new(move |tool| {
                let registry = catalogue.current();
                catalogue.find(&registry, &principal, tool).is_some()
            }),
            reach,
        }
    }

    /// What the policies know of a request besides who sends it and what it asks.
    pub(crate) fn facts(&self, context: &RequestContext<RoleServer>) -> crate::policy::Facts {
        crate::policy::Facts {
            protocol_version: context
                .meta
                .protocol_version()
                .map(|v| v.to_string())
                .or_else(|| {
                    let legacy = self.is_in_session().then(|| context.peer.peer_info());
                    legacy
                        .flatten()
                        .map(|info| info.protocol_version.to_string())
                }),
            client_address: context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<crate::mcp::http::auth::Remote>())
                .and_then(|remote| remote.0),
            replica: self.catalogue.backends().replicas.instance().to_string(),
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
        mcp_tool(tool)
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
}
/// How a call ended, for its audit line.
pub(crate) struct Ended {
    pub outcome: Outcome,
    pub error: Option<String>,
    /// The capability uses the sandbox refused during the call.
    pub denied: Vec<String>,
    /// The `[credentials]` sources whose credentials the call's requests carried.
    pub credentials: Vec<String>,
    /// The Cedar policies that decided the request.
    pub policies: Vec<String>,
}

impl Ended {
    pub(crate) fn plain(outcome: Outcome) -> Self {
        Self {
            outcome,
            error: None,
            denied: Vec::new(),
            credentials: Vec::new(),
            policies: Vec::new(),
        }
    }

    /// A request refused before its guest ran, with the error the client gets.
    pub(crate) fn refused(outcome: Outcome, error: &McpError) -> Self {
        Self {
            error: Some(error.message.to_string()),
            ..Self::plain(outcome)
        }
    }
}

impl MoatServer {
    /// Cedar's verdict on a prompt get or a resource read: the policies that allowed it, or the
    /// error the client gets, audited here.
    pub(crate) fn decided(
        &self,
        verdict: crate::policy::Verdict,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        plugin: &crate::plugin::Plugin,
    ) -> Result<Vec<String>, McpError> {
        use crate::policy::Verdict;
        let (error, outcome, policies) = match verdict {
            Verdict::Allowed { by } => return Ok(by),
            Verdict::Denied { by, message } => (
                McpError::invalid_request(message, None),
                Outcome::Denied,
                by,
            ),
            Verdict::Invalid(why) => (
                McpError::invalid_params(format!("invalid arguments: {why}"), None),
                Outcome::InvalidArguments,
                Vec::new(),
            ),
        };
        let ended = Ended {
            policies,
            ..Ended::refused(outcome, &error)
        };
        self.record(
            context,
            binding,
            Some(plugin),
            std::time::Instant::now(),
            ended,
        );
        Err(error)
    }

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
            policies: ended.policies,
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
        result.instructions = Some(self.catalogue.instructions(
            &self.catalogue.current(),
            principal,
            &self.facts(&context),
        ));
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
        result.instructions = Some(self.catalogue.instructions(
            &self.catalogue.current(),
            principal,
            &self.facts(&context),
        ));
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
        let page = self.catalogue.page(
            &registry,
            principal,
            &self.facts(&context),
            cursor.as_deref(),
        )?;
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
        self.call_tool_of(request, context).await
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
                self.task_caller(&context),
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
                self.task_caller(&context),
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
pub(super) fn session_header(extensions: &rmcp::model::Extensions) -> Option<String> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|id| id.to_str().ok())
        .map(crate::mcp::http::sessions::digest)
}

/// A tool as clients get it in `tools/list`.
pub fn mcp_tool(tool: &crate::plugin::Tool) -> Tool {
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
