//! The tools being served right now: a [`Registry`] that a reload swaps whole, listed page by
//! page, and the clients to tell when it changes.
//!
//! A request takes the current registry once and keeps its `Arc` to the end, so a call in flight
//! finishes on the plugin it started with while new requests already see the new set. Swapping is
//! one store under a lock held only to replace or clone an `Arc`.
//!
//! `notifications/tools/list_changed` reaches a client the way its protocol era allows:
//! a legacy session (one that sent `initialize`) gets it on its connection; a 2026-07-28 client
//! only on a `subscriptions/listen` stream that asked for `toolsListChanged`.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::service::Peer;
use tokio::sync::watch;

use crate::access::Principal;
use crate::access::quotas::Quotas;
use crate::access::tool_sets::ToolSets;
use crate::mcp::audit::AuditLog;
use crate::mcp::instructions;
use crate::mcp::metrics::Metrics;
use crate::mcp::request_state::Sealer;
use crate::mcp::tasks::Tasks;
use crate::mcp::traces::Traces;
use crate::plugin::prompts::Prompt;
use crate::plugin::registry::Registry;
use crate::plugin::resources::{Located, Resource};
use crate::plugin::{Plugin, Tool};
use crate::policy::{Facts, Policies};
use crate::shared::Backends;
use crate::shared::replicas::Event;
use crate::upstream::Broker;

mod changes;

/// Tools per `tools/list` page unless configured otherwise.
pub const DEFAULT_PAGE_SIZE: NonZeroUsize = NonZeroUsize::new(100).unwrap();

/// Resource updates a subscription stream may fall behind by; a slower stream misses some.
const MAX_PENDING_UPDATES: usize = 256;

/// Resource URIs one session or subscription stream follows, at most.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// What a cursor holds before the name it encodes, so a cursor from elsewhere is told apart.
const CURSOR_PREFIX: &str = "after:";

/// What serves `[credentials]` next: the broker serving now, or a new one (none without
/// sources) with the store it keeps tokens in.
pub enum CredentialSources {
    Unchanged,
    New(
        Option<Arc<Broker>>,
        Option<crate::shared::consents::Settings>,
    ),
}

/// The registry being served, shared by every session; cloning shares it.
#[derive(Clone)]
pub struct Catalogue {
    inner: Arc<Inner>,
}

struct Inner {
    /// The current registry; receivers wake when a swap changed the tool list.
    current: watch::Sender<Arc<Registry>>,
    page_size: NonZeroUsize,
    /// Legacy sessions and whom they serve, each told of a change of its own tools by a
    /// notification on its own connection.
    sessions: Mutex<Vec<(Peer<RoleServer>, Principal)>>,
    /// Where every call is recorded, whatever registry served it.
    audit: Option<Arc<AuditLog>>,
    /// What every call counts towards.
    metrics: Metrics,
    /// Which principal sees which tools; a reload of the configuration replaces it.
    tool_sets: Mutex<Arc<ToolSets>>,
    /// The Cedar policies over each request; a reload replaces them with the registry.
    policies: std::sync::RwLock<Policies>,
    /// Where the spans of calls go, when traces are on.
    traces: std::sync::OnceLock<Traces>,
    /// Seals the state of 2026-07-28 calls that ask the client something.
    sealer: std::sync::RwLock<Arc<Sealer>>,
    /// Legacy sessions with the resource URIs each subscribed to.
    watchers: Mutex<Vec<(Peer<RoleServer>, Subscribed)>>,
    /// The calls that went on as tasks.
    tasks: Arc<Tasks>,
    /// What each principal may ask, and the call slots it holds.
    quotas: Arc<Quotas>,
    /// Resource URIs as they change, for 2026-07-28 subscription streams.
    updates: tokio::sync::broadcast::Sender<String>,
    /// Tool-list changes other replicas announce, for 2026-07-28 subscription streams.
    tools_elsewhere: tokio::sync::broadcast::Sender<()>,
    /// Where the state shared with other replicas (if any) is kept, and the replicas themselves.
    backends: Backends,
    /// Where callers' own credentials for upstreams come from (`[credentials]`); a reload
    /// replaces it when the sources changed.
    credentials: std::sync::RwLock<Option<Arc<Broker>>>,
    /// The credential store `credentials` was made with.
    credential_store: Mutex<Option<crate::shared::consents::Settings>>,
    /// The listeners a stdio moat takes consent callbacks on.
    loopback: crate::mcp::http::consent::Loopback,
    /// Cancelled when moat stops the calls still running as it shuts down.
    stopping_calls: tokio_util::sync::CancellationToken,
    /// The calls as they start and end, once something watches them.
    live_calls: std::sync::OnceLock<Arc<crate::mcp::live_calls::LiveCalls>>,
}

/// The resource URIs one session subscribed to.
pub type Subscribed = Arc<Mutex<BTreeSet<String>>>;

/// One page of `tools/list`.
pub struct Page<'a> {
    pub tools: Vec<(&'a Arc<Plugin>, &'a Tool)>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

impl Catalogue {
    /// Serves `registry`, listing `page_size` tools per page, as a moat with no other replica.
    pub fn new(registry: Arc<Registry>, page_size: NonZeroUsize) -> Self {
        Self::build(registry, page_size, None, Backends::alone())
    }

    /// Serves `registry` as [`Catalogue::new`] does, recording every call in `audit`, keeping
    /// what replicas share in `backends`, and acting on what the other replicas tell (from
    /// within the runtime, which it listens on).
    pub fn with_backends(
        registry: Arc<Registry>,
        page_size: NonZeroUsize,
        audit: Option<Arc<AuditLog>>,
        backends: Backends,
    ) -> Self {
        let catalogue = Self::build(registry, page_size, audit, backends);
        let events = catalogue.inner.backends.replicas.events();
        tokio::spawn(changes::hear_updates(
            Arc::downgrade(&catalogue.inner),
            events,
        ));
        catalogue
    }

    fn build(
        registry: Arc<Registry>,
        page_size: NonZeroUsize,
        audit: Option<Arc<AuditLog>>,
        backends: Backends,
    ) -> Self {
        let quotas = Arc::new(Quotas::counted_in(backends.quotas.clone()));
        let current = watch::Sender::new(registry);
        let tasks = Tasks::new(
            quotas.clone(),
            current.subscribe(),
            backends.tasks.clone(),
            backends.replicas.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                tasks: Arc::new(tasks),
                current,
                page_size,
                sessions: Mutex::new(Vec::new()),
                audit,
                metrics: Metrics::default(),
                tool_sets: Mutex::default(),
                policies: std::sync::RwLock::default(),
                traces: std::sync::OnceLock::new(),
                sealer: std::sync::RwLock::new(Arc::new(Sealer::default())),
                watchers: Mutex::default(),
                quotas,
                updates: tokio::sync::broadcast::Sender::new(MAX_PENDING_UPDATES),
                tools_elsewhere: tokio::sync::broadcast::Sender::new(MAX_PENDING_UPDATES),
                backends,
                credentials: std::sync::RwLock::default(),
                credential_store: Mutex::default(),
                loopback: Default::default(),
                stopping_calls: Default::default(),
                live_calls: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The calls as they start and end, kept from now on.
    pub fn watch_calls(&self) -> Arc<crate::mcp::live_calls::LiveCalls> {
        let replicas = &self.inner.backends.replicas;
        let made = || crate::mcp::live_calls::LiveCalls::new(replicas.clone());
        self.inner
            .live_calls
            .get_or_init(|| Arc::new(made()))
            .clone()
    }

    /// The calls as they start and end, when something watches them.
    pub fn live_calls(&self) -> Option<&Arc<crate::mcp::live_calls::LiveCalls>> {
        self.inner.live_calls.get()
    }

    /// The series every call counts towards.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Sends a span of every call from now on (once; a second call is ignored).
    pub fn set_traces(&self, traces: Traces) {
        let _ = self.inner.traces.set(traces);
    }

    /// Where the spans of calls go, when traces are on.
    pub fn traces(&self) -> Option<&Traces> {
        self.inner.traces.get()
    }

    /// The audit log calls are recorded in, if any.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.inner.audit.as_deref()
    }

    /// Which principal sees which tools, as they are now.
    pub fn tool_sets(&self) -> Arc<ToolSets> {
        self.inner.tool_sets.lock().expect("tool sets lock").clone()
    }

    /// Gives each principal the tools `tool_sets` allows it from now on; the sessions whose
    /// tools this changes are told.
    pub fn set_tool_sets(&self, tool_sets: ToolSets) {
        let tool_sets = Arc::new(tool_sets);
        let previous = std::mem::replace(
            &mut *self.inner.tool_sets.lock().expect("tool sets lock"),
            tool_sets.clone(),
        );
        if previous != tool_sets {
            let registry = self.current();
            self.notify_sessions((&registry, &previous), (&registry, &tool_sets));
            self.inner.current.send_modify(|_| {});
        }
    }

    /// The Cedar policies in force.
    pub fn policies(&self) -> Policies {
        self.inner.policies.read().expect("policies lock").clone()
    }

    /// Decides by `policies` from now on; when they are other policies than before, every
    /// client is told its lists may have changed (what each one now sees is for it to ask).
    pub fn set_policies(&self, policies: Policies) {
        let previous = std::mem::replace(
            &mut *self.inner.policies.write().expect("policies lock"),
            policies.clone(),
        );
        if previous.fingerprint() != policies.fingerprint() {
            self.tell_everyone_tools_changed();
            self.inner.current.send_modify(|_| {});
        }
    }

    /// The tool named `name` in `registry`, if `principal` may see it: a tool it may not is
    /// unknown to it, as if nobody served it.
    pub fn find<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        name: &str,
    ) -> Option<(&'a Arc<Plugin>, &'a Tool)> {
        let (plugin, tool) = registry.find(name)?;
        self.tool_sets()
            .allows(principal, &plugin.name, &tool.name)
            .then_some((plugin, tool))
    }

    /// Whether `principal` may see everything `registry` serves, but what the policy withholds
    /// from everyone: only such a caller may read what the metrics say of every plugin.
    pub fn sees_all(&self, registry: &Registry, principal: &Principal) -> bool {
        let sets = self.tool_sets();
        registry.plugins().iter().all(|plugin| {
            let names = plugin.tools.iter().map(|t| &t.name);
            let mut names = names
                .chain(plugin.prompts.iter().map(|p| &p.name))
                .chain(plugin.resources.iter().map(|r| &r.name));
            names.all(|name| {
                sets.allows(principal, &plugin.name, name)
                    || sets.denied.iter().any(|p| p.covers(&plugin.name, name))
            })
        })
    }

    /// The server's `instructions` for `principal`: what each plugin it may use says of
    /// itself (a plugin none of whose tools, prompts or resources it sees, by the rules and the
    /// policies, is not named).
    pub fn instructions(
        &self,
        registry: &Registry,
        principal: &Principal,
        facts: &Facts,
    ) -> String {
        let (sets, policies) = (self.tool_sets(), self.policies());
        let visible = registry.plugins().iter().filter(|plugin| {
            let sees = |name: &str, listed: &dyn Fn(&str) -> bool| {
                sets.allows(principal, &plugin.name, name) && listed(name)
            };
            let tool = |name: &str| policies.lists_tool(principal, name, facts);
            let prompt = |name: &str| policies.lists_prompt(principal, name, facts);
            let resource = |name: &str| policies.lists_resource(principal, name, facts);
            plugin.tools.iter().any(|t| sees(&t.name, &tool))
                || plugin.prompts.iter().any(|p| sees(&p.name, &prompt))
                || plugin.resources.iter().any(|r| sees(&r.name, &resource))
        });
        instructions::compose(visible.map(|plugin| (&*plugin.name, plugin.summary.as_deref())))
    }

    /// The prompt named `name`, if `principal` may see it (tool sets match prompt names as they
    /// match tool names).
    pub fn find_prompt<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        name: &str,
    ) -> Option<(&'a Arc<Plugin>, &'a Prompt)> {
        let (plugin, prompt) = registry.find_prompt(name)?;
        self.tool_sets()
            .allows(principal, &plugin.name, &prompt.name)
            .then_some((plugin, prompt))
    }

    /// The prompts `principal` may see, in name order.
    pub fn prompts<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        facts: &Facts,
    ) -> Vec<(&'a Arc<Plugin>, &'a Prompt)> {
        let (sets, policies) = (self.tool_sets(), self.policies());
        registry
            .prompts()
            .filter(|(plugin, prompt)| {
                sets.allows(principal, &plugin.name, &prompt.name)
                    && policies.lists_prompt(principal, &prompt.name, facts)
            })
            .collect()
    }

    /// The resources and templates `principal` may see (by their `{plugin}_{function}` names).
    pub fn resources<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        facts: &Facts,
    ) -> Vec<(&'a Arc<Plugin>, &'a Resource)> {
        let (sets, policies) = (self.tool_sets(), self.policies());
        registry
            .resources()
            .filter(|(plugin, resource)| {
                sets.allows(principal, &plugin.name, &resource.name)
                    && policies.lists_resource(principal, &resource.name, facts)
            })
            .collect()
    }

    /// The resource at `uri` with its template's variables, if `principal` may see it.
    pub fn find_resource<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        uri: &str,
    ) -> Option<Located<'a>> {
        let (plugin, resource, variables) = registry.find_resource(uri)?;
        self.tool_sets()
            .allows(principal, &plugin.name, &resource.name)
            .then_some((plugin, resource, variables))
    }

    /// The calls that went on as tasks.
    pub fn tasks(&self) -> &Arc<Tasks> {
        &self.inner.tasks
    }

    /// What each principal may ask: its rate, and the call slots its guests hold while they
    /// run. A reload of the configuration sets them anew.
    pub fn quotas(&self) -> &Arc<Quotas> {
        &self.inner.quotas
    }

    /// What seals the state of calls that ask the client something.
    pub fn sealer(&self) -> Arc<Sealer> {
        self.inner.sealer.read().expect("sealer lock").clone()
    }

    /// The sources of callers' credentials, when `[credentials]` names some.
    pub fn credentials(&self) -> Option<Arc<Broker>> {
        self.inner
            .credentials
            .read()
            .expect("credentials lock")
            .clone()
    }

    /// Cancelled when moat, shutting down, stops the calls still running: a call cut then was
    /// not cancelled by its client.
    pub fn stopping_calls(&self) -> &tokio_util::sync::CancellationToken {
        &self.inner.stopping_calls
    }

    /// The listeners a stdio moat takes consent callbacks on, bound as calls need them.
    pub fn loopback(&self) -> &crate::mcp::http::consent::Loopback {
        &self.inner.loopback
    }

    /// Builds what would serve `sources`, keeping consented tokens as `store` says (a file, or
    /// under `[cluster]` Redis), without serving it yet: unchanged, the broker serving now (and
    /// the tokens it holds) stays. What cannot be built (a store that does not open) fails here.
    pub fn prepare_credential_sources(
        &self,
        sources: std::collections::BTreeMap<String, crate::upstream::Source>,
        store: Option<crate::shared::consents::Settings>,
    ) -> anyhow::Result<CredentialSources> {
        let current = self.inner.credentials.read().expect("credentials lock");
        let kept_store = self.inner.credential_store.lock().expect("store lock");
        let unchanged = *kept_store == store
            && match &*current {
                Some(broker) => broker.sources() == &sources,
                None => sources.is_empty(),
            };
        if unchanged {
            return Ok(CredentialSources::Unchanged);
        }
        if sources.is_empty() {
            return Ok(CredentialSources::New(None, store));
        }
        let keeping = self.inner.backends.consents.keeping(store.as_ref())?;
        let broker = Arc::new(Broker::new(sources, keeping)?);
        Ok(CredentialSources::New(Some(broker), store))
    }

    /// Serves what [`Catalogue::prepare_credential_sources`] built from now on.
    pub fn set_credential_sources(&self, prepared: CredentialSources) {
        if let CredentialSources::New(broker, store) = prepared {
            *self.inner.credentials.write().expect("credentials lock") = broker;
            *self.inner.credential_store.lock().expect("store lock") = store;
        }
    }

    /// Seals request states with `sealer` from now on (a key shared with other moats).
    pub fn set_sealer(&self, sealer: Sealer) {
        *self.inner.sealer.write().expect("sealer lock") = Arc::new(sealer);
    }

    /// Where the state shared with other replicas (if any) is kept.
    pub fn backends(&self) -> &Backends {
        &self.inner.backends
    }

    /// The registry as it is now; hold on to it for the whole request.
    pub fn current(&self) -> Arc<Registry> {
        self.inner.current.borrow().clone()
    }

    /// Serves `registry` from now on. When its tool list differs from the one it replaces, every
    /// client that asked to hear of it is told, and `true` is returned. Needs a Tokio runtime.
    pub fn replace(&self, registry: Arc<Registry>) -> bool {
        // Compared, and the old registry freed, outside the lock that requests take.
        let previous = self.current();
        let everyone = ToolSets::default();
        let changed = !changes::same_tools(
            (&previous, &everyone),
            (&registry, &everyone),
            &Principal::anonymous(),
        );
        self.inner.current.send_if_modified(|current| {
            *current = registry;
            changed
        });
        if changed {
            let sets = self.tool_sets();
            self.notify_sessions((&previous, &sets), (&self.current(), &sets));
            self.inner
                .backends
                .replicas
                .clone()
                .tell(Event::ToolsChanged);
        }
        changed
    }

    /// The page of `principal`'s tools after `cursor` (from the first tool without one). A
    /// cursor names the last tool of the page before, so it stays meaningful when the tool set
    /// changes between pages.
    pub fn page<'a>(
        &self,
        registry: &'a Registry,
        principal: &Principal,
        facts: &Facts,
        cursor: Option<&str>,
    ) -> Result<Page<'a>, McpError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let sets = self.tool_sets();
        let policies = self.policies();
        let mut tools = registry
            .tools_after(after.as_deref())
            .filter(|(plugin, tool)| {
                sets.allows(principal, &plugin.name, &tool.name)
                    && policies.lists_tool(principal, &tool.name, facts)
            });
        let page: Vec<_> = tools.by_ref().take(self.inner.page_size.get()).collect();
        let next_cursor = match (tools.next(), page.last()) {
            (Some(_), Some((_, last))) => Some(encode_cursor(&last.name)),
            _ => None,
        };
        Ok(Page {
            tools: page,
            next_cursor,
        })
    }
}

impl From<Arc<Registry>> for Catalogue {
    fn from(registry: Arc<Registry>) -> Self {
        Self::new(registry, DEFAULT_PAGE_SIZE)
    }
}

fn encode_cursor(last_name: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_PREFIX}{last_name}"))
}

fn decode_cursor(cursor: &str) -> Result<String, McpError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix(CURSOR_PREFIX).map(str::to_string))
        .ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "invalid cursor \"{cursor}\": not a cursor this server issued; \
                     list again without a cursor"
                ),
                None,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let cursor = encode_cursor("echo_repeat");
        assert_eq!(decode_cursor(&cursor).unwrap(), "echo_repeat");
        for bad in ["", "echo_repeat", "!!", &URL_SAFE_NO_PAD.encode("before:x")] {
            let error = decode_cursor(bad).unwrap_err();
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(error.message.contains("not a cursor this server issued"));
        }
    }
}
