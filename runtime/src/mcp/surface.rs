//! Prompts, resources and completions, and the client a request's guest may ask: the parts of
//! [`MoatServer`] beyond tools. Each get and read runs in a fresh instance, like a call.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, CompleteRequestParams, CompleteResult, CompletionInfo,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, InputRequiredResult,
    InputResponses, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, Prompt, PromptArgument, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, Resource, ResourceTemplate,
};
use rmcp::service::RequestContext;
use serde_json::json;

use crate::mcp::asking::{self, Rounds, Session};
use crate::mcp::audit::{self, Outcome};
use crate::mcp::catalogue::{MAX_SUBSCRIPTIONS, Subscribed};
use crate::mcp::request_state::Binding;
use crate::mcp::server::{Ended, MoatServer};
use crate::plugin::completions::Completing;
use crate::plugin::prompts::Got;
use crate::plugin::resources::Read;
use crate::plugin::{CallError, Exchange};
use crate::policy::Completed;
use crate::sandbox::host::Client;

/// What a request's guest may ask the client, and the rounds to seal if it stops to ask.
pub(crate) struct Asking {
    /// Whom the guest's questions go to.
    pub client: Arc<dyn Client>,
    rounds: Option<Arc<Rounds>>,
    /// What the request's client declared.
    pub capabilities: ClientCapabilities,
}

impl Asking {
    /// The rounds the client answered so far (none on a legacy session).
    pub fn answered(&self) -> Vec<crate::mcp::asking::Round> {
        self.rounds
            .as_ref()
            .map(|r| r.answered())
            .unwrap_or_default()
    }
}

/// How a request that asked the client ended, when it did not complete.
pub(crate) enum Unfinished {
    InputRequired(InputRequiredResult),
    Error(McpError),
}

impl MoatServer {
    /// The client a request's guest asks: its session's connection (legacy), or the rounds its
    /// `requestState` and `inputResponses` carry (2026-07-28). A state that does not open is
    /// refused before any guest runs.
    pub(crate) fn asking(
        &self,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        state: Option<&str>,
        responses: Option<&InputResponses>,
    ) -> Result<Asking, McpError> {
        let capabilities = context.client_capabilities().unwrap_or_default();
        if context.meta.protocol_version().is_none() {
            let session = Session {
                peer: context.peer.clone(),
                capabilities: capabilities.clone(),
            };
            return Ok(Asking {
                client: Arc::new(session),
                rounds: None,
                capabilities,
            });
        }
        let answered = match state {
            Some(state) => self.catalogue.sealer().open(binding, state)?,
            None => Vec::new(),
        };
        let rounds = Arc::new(Rounds::new(
            capabilities.clone(),
            answered,
            responses.cloned().unwrap_or_default(),
        ));
        Ok(Asking {
            client: rounds.clone(),
            rounds: Some(rounds),
            capabilities,
        })
    }

    /// [`MoatServer::asking`], for a plugin that imports `client` or `tasks`.
    fn asking_if(
        &self,
        plugin: &crate::plugin::Plugin,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        state: &Option<String>,
        responses: &Option<InputResponses>,
    ) -> Result<Option<Asking>, McpError> {
        if !plugin.asks_client() && !plugin.injects_callers_credentials() {
            return Ok(None);
        }
        self.asking(context, binding, state.as_deref(), responses.as_ref())
            .map(Some)
    }

    /// What a request whose guest failed with `error` answers when the failure is about the
    /// client: questions to answer (with the sealed state) or a missing capability.
    pub(crate) fn unfinished(
        &self,
        error: &CallError,
        asking: Option<&Asking>,
        binding: &Binding<'_>,
    ) -> Option<Unfinished> {
        match error {
            CallError::InputRequired(questions) => {
                let rounds = asking.and_then(|a| a.rounds.as_ref())?;
                let answered = rounds.answered();
                let result = asking::input_requests(questions)
                    .map_err(|e| McpError::internal_error(e, None))
                    .and_then(|requests| {
                        let state = self.catalogue.sealer().seal(binding, &answered)?;
                        Ok(InputRequiredResult::new(Some(requests), Some(state)))
                    });
                Some(match result {
                    Ok(result) => Unfinished::InputRequired(result),
                    Err(error) => Unfinished::Error(error),
                })
            }
            CallError::MissingCapability(capability) => {
                let mut required = ClientCapabilities::default();
                match *capability {
                    "sampling" => required.sampling = Some(Default::default()),
                    "roots" => required.roots = Some(Default::default()),
                    "elicitation.url" => {
                        let url =
                            rmcp::model::ElicitationCapability::new().with_url(Default::default());
                        required.elicitation = Some(url);
                    }
                    _ => required.elicitation = Some(Default::default()),
                }
                Some(Unfinished::Error(
                    McpError::missing_required_client_capability(required),
                ))
            }
            _ => None,
        }
    }

    pub(crate) fn list_prompts_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> ListPromptsResult {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let prompts = self
            .catalogue
            .prompts(&registry, principal, &self.facts(context))
            .into_iter()
            .map(|(_, prompt)| {
                let arguments = prompt
                    .arguments
                    .iter()
                    .map(|argument| {
                        let mut mcp =
                            PromptArgument::new(&argument.name).with_required(argument.required);
                        if let Some(description) = &argument.description {
                            mcp = mcp.with_description(description);
                        }
                        mcp
                    })
                    .collect();
                Prompt::new(&prompt.name, prompt.description.clone(), Some(arguments))
            })
            .collect();
        ListPromptsResult::with_all_items(prompts)
    }

    pub(crate) async fn get_prompt_of(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let Some((plugin, prompt)) =
            self.catalogue
                .find_prompt(&registry, principal, &request.name)
        else {
            return Err(McpError::invalid_params(
                format!("unknown prompt \"{}\"", request.name),
                Some(json!({"name": request.name})),
            ));
        };
        let binding = Binding {
            method: "prompts/get",
            name: &request.name,
            arguments: request.arguments.as_ref(),
            principal: &principal.name,
        };
        let facts = self.facts(&context);
        let policies = self.catalogue.policies();
        let verdict =
            policies.get_prompt(principal, &prompt.name, request.arguments.as_ref(), &facts);
        let decided_by = self.decided(verdict, &context, &binding, plugin)?;
        let asking = self.asking_if(
            plugin,
            &context,
            &binding,
            &request.request_state,
            &request.input_responses,
        )?;
        let exchange = Exchange {
            events: None,
            client: asking.as_ref().map(|a| a.client.clone()),
            credentials: self
                .call_credentials(&context.extensions)
                .map(|c| c as Arc<dyn crate::sandbox::network::CallCredentials>),
            reach: policies.reach_of(principal, &plugin.name, &prompt.name, &facts),
        };
        let _slot = self.call_slot(&context).await?;
        let started = Instant::now();
        let got = plugin
            .get_prompt(prompt, request.arguments.as_ref(), exchange)
            .await;
        let mut ended = match &got {
            Ok(Got::Messages(_)) => Ended::plain(Outcome::Ok),
            Ok(Got::Refused(why)) => ended(Outcome::ToolError, why),
            Err(error) => ended(audit::outcome_of(error), &error.to_string()),
        };
        ended.policies = decided_by;
        self.record(&context, &binding, Some(plugin), started, ended);
        match got {
            Ok(Got::Messages(messages)) => {
                let mut result = GetPromptResult::new(messages);
                result.description = prompt.description.clone();
                Ok(result.into())
            }
            Ok(Got::Refused(why)) => Err(McpError::invalid_params(why, None)),
            Err(error) => match self.unfinished(&error, asking.as_ref(), &binding) {
                Some(Unfinished::InputRequired(result)) => Ok(result.into()),
                Some(Unfinished::Error(error)) => Err(error),
                None => Err(request_failed(&error)),
            },
        }
    }

    pub(crate) fn list_resources_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> ListResourcesResult {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let resources = self
            .catalogue
            .resources(&registry, principal, &self.facts(context))
            .into_iter()
            .filter(|(_, r)| !r.is_template())
            .map(|(plugin, r)| {
                let mut mcp = Resource::new(plugin.uri(&r.template), &r.function);
                mcp.description = r.description.clone();
                mcp.mime_type = r.mime_type.clone();
                mcp
            })
            .collect();
        ListResourcesResult::with_all_items(resources)
    }

    pub(crate) fn list_resource_templates_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> ListResourceTemplatesResult {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let templates = self
            .catalogue
            .resources(&registry, principal, &self.facts(context))
            .into_iter()
            .filter(|(_, r)| r.is_template())
            .map(|(plugin, r)| {
                let mut mcp = ResourceTemplate::new(plugin.uri(&r.template), &r.function);
                mcp.description = r.description.clone();
                mcp.mime_type = r.mime_type.clone();
                mcp
            })
            .collect();
        ListResourceTemplatesResult::with_all_items(templates)
    }

    pub(crate) async fn read_resource_of(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let not_found = |why: &str| {
            McpError::invalid_params(
                format!("resource not found: {why}"),
                Some(json!({"uri": request.uri})),
            )
        };
        let Some((plugin, resource, variables)) =
            self.catalogue
                .find_resource(&registry, principal, &request.uri)
        else {
            return Err(not_found("no plugin serves this URI"));
        };
        let arguments: JsonObject = variables
            .iter()
            .map(|(name, value)| (name.clone(), value.clone().into()))
            .collect();
        let binding = Binding {
            method: "resources/read",
            name: &request.uri,
            arguments: Some(&arguments),
            principal: &principal.name,
        };
        let facts = self.facts(&context);
        let policies = self.catalogue.policies();
        let verdict = policies.read_resource(principal, &resource.name, &request.uri, &facts);
        let decided_by = self.decided(verdict, &context, &binding, plugin)?;
        let asking = self.asking_if(
            plugin,
            &context,
            &binding,
            &request.request_state,
            &request.input_responses,
        )?;
        let exchange = Exchange {
            events: None,
            client: asking.as_ref().map(|a| a.client.clone()),
            credentials: self
                .call_credentials(&context.extensions)
                .map(|c| c as Arc<dyn crate::sandbox::network::CallCredentials>),
            reach: policies.reach_of(principal, &plugin.name, &resource.name, &facts),
        };
        let _slot = self.call_slot(&context).await?;
        let started = Instant::now();
        let read = plugin
            .read_resource(resource, &request.uri, &variables, exchange)
            .await;
        let mut ended = match &read {
            Ok(Read::Contents(_)) => Ended::plain(Outcome::Ok),
            Ok(Read::NotFound(why)) => ended(Outcome::ToolError, why),
            Err(error) => ended(audit::outcome_of(error), &error.to_string()),
        };
        ended.policies = decided_by;
        self.record(&context, &binding, Some(plugin), started, ended);
        match read {
            Ok(Read::Contents(contents)) => Ok(ReadResourceResult::new(vec![contents]).into()),
            Ok(Read::NotFound(why)) => Err(not_found(&why)),
            Err(CallError::InvalidArguments(error)) => Err(not_found(&error.to_string())),
            Err(error) => match self.unfinished(&error, asking.as_ref(), &binding) {
                Some(Unfinished::InputRequired(result)) => Ok(result.into()),
                Some(Unfinished::Error(error)) => Err(error),
                None => Err(request_failed(&error)),
            },
        }
    }

    /// Adds `uri` to a legacy session's subscriptions, if `principal` may read it.
    pub(crate) fn subscribe_to(
        &self,
        uri: &str,
        subscribed: &Subscribed,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        if self
            .catalogue
            .find_resource(&registry, principal, uri)
            .is_none()
        {
            return Err(McpError::invalid_params(
                "resource not found: no plugin serves this URI",
                Some(json!({"uri": uri})),
            ));
        }
        {
            let mut subscribed = subscribed.lock().expect("subscriptions lock");
            if subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains(uri) {
                return Err(McpError::invalid_params(
                    format!(
                        "this session follows {MAX_SUBSCRIPTIONS} resources, as many as it may; \
                         unsubscribe from one first"
                    ),
                    Some(json!({"uri": uri})),
                ));
            }
            subscribed.insert(uri.to_string());
        }
        self.catalogue
            .watch_resources(context.peer.clone(), subscribed.clone());
        Ok(())
    }

    pub(crate) async fn complete_of(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let registry = self.catalogue.current();
        let principal = self.principal_of(&context.extensions);
        let _slot = self.call_slot(&context).await?;
        let unknown = |what: &str| McpError::invalid_params(what.to_string(), None);
        let found = match &request.r#ref {
            Reference::Prompt(reference) => {
                let (plugin, prompt) = self
                    .catalogue
                    .find_prompt(&registry, principal, &reference.name)
                    .ok_or_else(|| unknown("unknown prompt"))?;
                let argument = prompt
                    .arguments
                    .iter()
                    .find(|a| a.name == request.argument.name)
                    .ok_or_else(|| unknown("the prompt has no such argument"))?;
                self.may_complete(
                    principal,
                    Completed::Prompt(&prompt.name),
                    &request,
                    &context,
                )?;
                (
                    plugin,
                    Completing::Prompt(&prompt.function),
                    argument.param.clone(),
                )
            }
            Reference::Resource(reference) => {
                let (plugin, resource) = self
                    .catalogue
                    .resources(&registry, principal, &self.facts(&context))
                    .into_iter()
                    .find(|(plugin, r)| plugin.uri(&r.template) == reference.uri)
                    .ok_or_else(|| unknown("unknown resource template"))?;
                self.may_complete(
                    principal,
                    Completed::Resource(&resource.name),
                    &request,
                    &context,
                )?;
                let template = resource.template.to_string();
                let variable = resource
                    .param_of(&request.argument.name)
                    .ok_or_else(|| unknown("the template has no such variable"))?
                    .to_string();
                return complete(plugin, Completing::Resource(&template), &variable, &request)
                    .await;
            }
            _ => return Err(unknown("unknown kind of completion reference")),
        };
        let (plugin, completing, param) = found;
        complete(plugin, completing, &param, &request).await
    }
}

impl MoatServer {
    /// Whether the policies let `principal` have completions for the request's argument.
    fn may_complete(
        &self,
        principal: &crate::access::Principal,
        of: Completed<'_>,
        request: &CompleteRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let argument = &request.argument;
        let facts = self.facts(context);
        let verdict = (self.catalogue.policies()).complete(
            principal,
            of,
            &argument.name,
            &argument.value,
            &facts,
        );
        match verdict {
            crate::policy::Verdict::Allowed { .. } => Ok(()),
            crate::policy::Verdict::Denied { message, .. }
            | crate::policy::Verdict::Invalid(message) => {
                Err(McpError::invalid_request(message, None))
            }
        }
    }
}

async fn complete(
    plugin: &crate::plugin::Plugin,
    completing: Completing<'_>,
    argument: &str,
    request: &CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let (values, more) = plugin
        .complete(completing, argument, &request.argument.value)
        .await
        .map_err(|e| request_failed(&e))?;
    let mut completion =
        CompletionInfo::new(values).map_err(|e| McpError::internal_error(e, None))?;
    completion.has_more = Some(more);
    Ok(CompleteResult::new(completion))
}

fn ended(outcome: Outcome, error: &str) -> Ended {
    Ended {
        error: Some(error.to_string()),
        ..Ended::plain(outcome)
    }
}

/// A guest's failure during a get, read or completion, as the JSON-RPC error the client gets.
fn request_failed(error: &CallError) -> McpError {
    match error {
        CallError::InvalidArguments(e) => McpError::invalid_params(e.to_string(), None),
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// A fresh set of subscriptions for one session.
pub(crate) fn no_subscriptions() -> Subscribed {
    Arc::new(Mutex::new(Default::default()))
}
