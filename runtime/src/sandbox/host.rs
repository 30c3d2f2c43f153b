//! What a guest sees of the host during one call: a WASI context holding only its grants,
//! `wasi:http` behind moat's network checks, moat's `log`, `progress`, `resources` and `client`
//! imports, and a bounded capture of its stdout and stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::mpsc;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::sandbox::grants::Grants;
use crate::sandbox::guest_log::GuestLog;
use crate::sandbox::limits::Limits;
use crate::sandbox::network::{CallCredentials, CallReach, Denials, HttpHooks, PendingInput};

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "moat:plugin/imports",
        imports: {
            "moat:plugin/client.ask": async | trappable,
            "moat:plugin/mcp-client.request": async | trappable,
            "moat:plugin/client.capabilities": async | trappable,
            "moat:plugin/tasks.detach": async | trappable,
        },
    });
}

use bindings::moat::plugin::client;
use bindings::moat::plugin::content::ContentBlock;
pub use bindings::moat::plugin::log::Level;

/// The longest log or progress message a guest may send; longer ones are cut.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// Something a guest reported while it ran, for the client that made the call.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestEvent {
    Log {
        level: Level,
        message: String,
    },
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// The plugin's resource `uri` (without its scheme) changed.
    ResourceUpdated {
        uri: String,
    },
}

/// How the keys of moat's own questions begin (a credential's consent): no guest's may.
pub const MOATS_OWN: &str = "moat:";

/// One question a guest asked the client: the MCP request it becomes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Question {
    /// The guest's name for it, unique in the call.
    pub key: String,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    pub params: serde_json::Value,
    /// The plugin's form (its exported `forms` function) whose schema the elicitation's
    /// `requestedSchema` is to be, and whose types an accepted answer must fit.
    #[serde(skip)]
    pub form: Option<String>,
}

/// Why a client's answers did not come.
#[derive(Debug)]
pub enum AskError {
    /// The client cannot be asked this; the guest gets the reason as its `err`.
    Refused(String),
    /// The answers will come with the client's next request: the call stops here.
    InputRequired(InputRequired),
    /// The request did not declare a client capability the question needs: the call stops.
    MissingCapability(MissingCapability),
}

/// Stops a call that needs a client capability its request did not declare (MCP's -32021).
#[derive(Debug, Clone, Copy)]
pub struct MissingCapability(pub &'static str);

impl std::fmt::Display for MissingCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request did not declare the `{}` client capability",
            self.0
        )
    }
}

impl std::error::Error for MissingCapability {}

/// Stops a call whose questions the client answers in a later request (2026-07-28): the
/// host function traps with it, and the call's caller finds it in the error.
#[derive(Debug)]
pub struct InputRequired(pub Vec<Question>);

impl std::fmt::Display for InputRequired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the call asked the client {} question(s)", self.0.len())
    }
}

impl std::error::Error for InputRequired {}

/// The client answers: each question's key, with the client's result as JSON.
pub type Answers = Vec<(String, serde_json::Value)>;

/// What a client declared it can be asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Declared {
    pub elicitation: bool,
    pub elicitation_url: bool,
    pub sampling: bool,
    pub roots: bool,
}

/// What a guest's `detach` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach {
    /// The client does not follow tasks: the call goes on as it is.
    Unsupported,
    /// The call stops here and goes on as a task.
    Now,
    /// This run is the task's: it goes on.
    Running,
}

/// Stops a call that goes on as a task: the host function traps with it.
#[derive(Debug)]
pub struct Detached;

impl std::fmt::Display for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call goes on as a task")
    }
}

impl std::error::Error for Detached {}

/// Whom a call's questions go to.
pub trait Client: Send + Sync {
    fn declared(&self) -> Declared;

    /// What the guest's `detach` does in this run.
    fn detach(&self) -> Detach {
        Detach::Unsupported
    }

    fn ask(
        self: Arc<Self>,
        questions: Vec<Question>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Answers, AskError>> + Send>>;

    /// Tells the client that what the URL elicitation `id` sent the person to do is done
    /// (`notifications/elicitation/complete`), where it can be told.
    fn elicitation_complete(
        &self,
        _id: &str,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// The most questions one `ask` may hold, and the most bytes of JSON they may take.
const MAX_QUESTIONS: usize = 16;
pub(super) const MAX_QUESTION_BYTES: usize = 256 * 1024;

/// Where a call's [`GuestEvent`]s go; `None` when nobody listens.
pub type EventSink = Option<mpsc::Sender<GuestEvent>>;

/// Events a call may have waiting for the client; past that, new ones are dropped, so a guest
/// that reports faster than the client reads cannot make moat's memory grow.
pub const MAX_PENDING_EVENTS: usize = 256;

/// The store data of one call.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: CallLimits,
    log: Arc<GuestLog>,
    events: EventSink,
    client: Option<Arc<dyn Client>>,
    /// The question keys this call asked: a key names one question for the whole call, as a
    /// replayed 2026-07-28 call answers every `ask` from one map of answers.
    asked: BTreeSet<String>,
    http: WasiHttpCtx,
    http_hooks: HttpHooks,
    config: Arc<BTreeMap<String, String>>,
}

/// The guest's captured stdout and stderr.
pub struct CapturedOutput {
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
}

impl HostState {
    /// A state that grants only `grants`: beyond them no files, no network, no environment, and
    /// no stdin.
    pub fn new(
        plugin: Arc<str>,
        grants: &Grants,
        limits: &Limits,
        log: Arc<GuestLog>,
    ) -> Result<(Self, CapturedOutput)> {
        let output = CapturedOutput {
            stdout: MemoryOutputPipe::new(limits.max_output_bytes),
            stderr: MemoryOutputPipe::new(limits.max_output_bytes),
        };
        let mut wasi = WasiCtx::builder();
        wasi.stdout(output.stdout.clone())
            .stderr(output.stderr.clone());
        grants.apply(&mut wasi)?;
        let denials = Denials::new(log.clone());
        let network = grants.network.clone();
        let (socket_plugin, socket_denials) = (plugin.clone(), denials.clone());
        // A TCP socket is a host descriptor from the moment it is created, before any address
        // is checked: only a plugin granted some IP address may create one. Name lookup is never
        // needed (socket grants name addresses; `wasi:http` resolves on the host), and each
        // lookup would be a query a plugin could smuggle data out through.
        wasi.allow_tcp(network.grants_sockets())
            .allow_ip_name_lookup(false)
            .socket_addr_check(move |addr, use_| {
                let verdict = network.check_socket(addr, use_, &socket_plugin);
                if let Err(message) = &verdict {
                    socket_denials.record(message.clone());
                }
                Box::pin(std::future::ready(verdict.is_ok()))
            });
        let state = Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: CallLimits::new(limits.max_memory_bytes),
            log,
            events: None,
            client: None,
            asked: BTreeSet::new(),
            http: WasiHttpCtx::new(),
            http_hooks: HttpHooks {
                plugin,
                network: grants.network.clone(),
                denials,
                credentials: None,
                reach: None,
                client: None,
                pending: PendingInput::default(),
            },
            config: grants.config.clone(),
        };
        Ok((state, output))
    }

    /// Where the guest's log and progress reports go from now on.
    pub fn set_events(&mut self, events: EventSink) {
        self.events = events;
    }

    /// Whom the guest's questions go to from now on; `None`: it may ask nobody.
    pub fn set_client(&mut self, client: Option<Arc<dyn Client>>) {
        self.http_hooks.client = client.clone();
        self.client = client;
    }

    /// The questions the call's requests left for the client, taken.
    pub fn take_pending_input(&self) -> Option<InputRequired> {
        self.http_hooks.pending.take()
    }

    /// Whose credentials the guest's requests carry from now on; `None`: no caller's.
    pub fn set_credentials(&mut self, credentials: Option<Arc<dyn CallCredentials>>) {
        self.http_hooks.credentials = credentials;
    }

    /// Whose policy the guest's requests are decided by from now on; `None`: the grants alone.
    pub fn set_reach(&mut self, reach: Option<Arc<dyn CallReach>>) {
        self.http_hooks.reach = reach;
    }

    /// The settings granted to the plugin, for `wasi:config/store`.
    pub(crate) fn config(&self) -> &BTreeMap<String, String> {
        &self.config
    }

    pub fn limits(&mut self) -> &mut CallLimits {
        &mut self.limits
    }

    /// The network accesses denied during the call so far; the host keeps them even when the
    /// guest swallows its own error.
    pub fn denials(&self) -> Denials {
        self.http_hooks.denials.clone()
    }

    /// Whom the guest's questions go to, and the keys the call has asked under so far.
    pub(super) fn asking(&mut self) -> (Option<Arc<dyn Client>>, &mut BTreeSet<String>) {
        (self.client.clone(), &mut self.asked)
    }

    fn emit(&self, event: GuestEvent) {
        if let Some(events) = &self.events {
            // Full: the client is behind, and this report is dropped. Closed: nobody listens.
            let _ = events.try_send(event);
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl bindings::moat::plugin::log::Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let message = truncate(message);
        // Over the plugin's log budget, a message is neither logged nor sent to the client.
        if !self.log.admit(message.len()) {
            return;
        }
        let plugin = &*self.http_hooks.plugin;
        match level {
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info | Level::Notice => tracing::info!(plugin, "{message}"),
            Level::Warning => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
        self.emit(GuestEvent::Log { level, message });
    }
}

impl bindings::moat::plugin::progress::Host for HostState {
    fn report(&mut self, progress: f64, total: Option<f64>, message: Option<String>) {
        // Progress goes only to the client, through the call's bounded queue, never to moat's
        // own log.
        let message = message.map(truncate);
        self.emit(GuestEvent::Progress {
            progress,
            total,
            message,
        });
    }
}

impl bindings::moat::plugin::content::Host for HostState {}

impl bindings::moat::plugin::prompt::Host for HostState {}

impl bindings::moat::plugin::resources::Host for HostState {
    fn updated(&mut self, uri: String) {
        if uri.len() <= MAX_MESSAGE_BYTES {
            self.emit(GuestEvent::ResourceUpdated { uri });
        }
    }
}

impl bindings::moat::plugin::tasks::Host for HostState {
    async fn detach(&mut self) -> wasmtime::Result<bool> {
        match self
            .client
            .as_ref()
            .map_or(Detach::Unsupported, |c| c.detach())
        {
            Detach::Unsupported => Ok(false),
            Detach::Running => Ok(true),
            Detach::Now => Err(wasmtime::Error::new(Detached)),
        }
    }
}

impl client::Host for HostState {
    async fn capabilities(&mut self) -> wasmtime::Result<client::ClientCapabilities> {
        let declared = self
            .client
            .as_ref()
            .map(|c| c.declared())
            .unwrap_or_default();
        let mut flags = client::ClientCapabilities::empty();
        for (declared, flag) in [
            (
                declared.elicitation,
                client::ClientCapabilities::ELICITATION,
            ),
            (declared.sampling, client::ClientCapabilities::SAMPLING),
            (declared.roots, client::ClientCapabilities::ROOTS),
        ] {
            if declared {
                flags |= flag;
            }
        }
        Ok(flags)
    }

    async fn ask(
        &mut self,
        questions: Vec<(String, client::Question)>,
    ) -> wasmtime::Result<Result<Vec<(String, String)>, String>> {
        let Some(client) = self.client.clone() else {
            return Ok(Err("this request cannot ask the client anything".into()));
        };
        let questions = match mcp_questions(questions, &self.asked) {
            Ok(questions) => questions,
            Err(message) => return Ok(Err(message)),
        };
        self.asked.extend(questions.iter().map(|q| q.key.clone()));
        match client.ask(questions).await {
            Ok(answers) => Ok(Ok(answers
                .into_iter()
                .map(|(key, answer)| (key, answer.to_string()))
                .collect())),
            Err(AskError::Refused(message)) => Ok(Err(message)),
            Err(AskError::InputRequired(stop)) => Err(wasmtime::Error::new(stop)),
            Err(AskError::MissingCapability(stop)) => Err(wasmtime::Error::new(stop)),
        }
    }
}

/// The guest's questions as MCP requests, checked: keys unique and not `asked` before in the
/// call, few enough questions, small enough.
fn mcp_questions(
    questions: Vec<(String, client::Question)>,
    asked: &BTreeSet<String>,
) -> Result<Vec<Question>, String> {
    if questions.is_empty() || questions.len() > MAX_QUESTIONS {
        return Err(format!(
            "ask between 1 and {MAX_QUESTIONS} questions at once"
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut bytes = 0;
    let mut out = Vec::with_capacity(questions.len());
    for (key, question) in questions {
        if key.is_empty() || !seen.insert(key.clone()) {
            return Err(format!("question key \"{key}\" is empty or used twice"));
        }
        if key.starts_with(MOATS_OWN) {
            return Err(format!(
                "question key \"{key}\" starts with `{MOATS_OWN}`, which names moat's own questions"
            ));
        }
        if asked.contains(&key) {
            return Err(format!(
                "question key \"{key}\" was asked before in this call: a key names one \
                 question for the whole call"
            ));
        }
        let mut declared_form = None;
        let (method, params) = match question {
            client::Question::ElicitTyped(form) => {
                declared_form = Some(form.name);
                let params = serde_json::json!({"mode": "form", "message": form.message});
                ("elicitation/create", params)
            }
            client::Question::Elicit(form) => {
                let schema: serde_json::Value = serde_json::from_str(&form.schema)
                    .map_err(|e| format!("question \"{key}\": its schema is not JSON: {e}"))?;
                let params = serde_json::json!({
                    "mode": "form",
                    "message": form.message,
                    "requestedSchema": schema,
                });
                ("elicitation/create", params)
            }
            client::Question::ElicitUrl(page) => {
                let params = serde_json::json!({
                    "mode": "url",
                    "message": page.message,
                    "url": page.url,
                    "elicitationId": page.elicitation_id,
                });
                ("elicitation/create", params)
            }
            client::Question::Sample(sampling) => {
                let messages = sampling
                    .messages
                    .into_iter()
                    .map(|m| {
                        let role = match m.role {
                            bindings::moat::plugin::prompt::Role::User => "user",
                            bindings::moat::plugin::prompt::Role::Assistant => "assistant",
                        };
                        let content = sampling_content(m.content)
                            .map_err(|e| format!("question \"{key}\": {e}"))?;
                        Ok(serde_json::json!({"role": role, "content": content}))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                let mut params = serde_json::json!({
                    "messages": messages,
                    "maxTokens": sampling.max_tokens,
                });
                if let Some(system) = sampling.system_prompt {
                    params["systemPrompt"] = system.into();
                }
                ("sampling/createMessage", params)
            }
            client::Question::Roots => ("roots/list", serde_json::json!({})),
        };
        bytes += key.len() + params.to_string().len();
        if bytes > MAX_QUESTION_BYTES {
            return Err(format!(
                "the questions take more than the {MAX_QUESTION_BYTES} bytes one ask may"
            ));
        }
        out.push(Question {
            key,
            method: method.to_string(),
            params,
            form: declared_form,
        });
    }
    Ok(out)
}

/// A sampling message's content: text, an image or a sound.
fn sampling_content(block: ContentBlock) -> Result<serde_json::Value, String> {
    use base64::Engine as _;
    let base64 = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
    Ok(match block {
        ContentBlock::Text(text) => serde_json::json!({"type": "text", "text": text}),
        ContentBlock::Image(image) => serde_json::json!({
            "type": "image", "data": base64(&image.data), "mimeType": image.mime_type,
        }),
        ContentBlock::Audio(audio) => serde_json::json!({
            "type": "audio", "data": base64(&audio.data), "mimeType": audio.mime_type,
        }),
        ContentBlock::ResourceLink(_) | ContentBlock::Resource(_) => {
            return Err("a sampling message holds text, an image or a sound".into());
        }
    })
}

/// Adds everything moat offers to guests: WASI 0.2 with `wasi:http` (whose context grants
/// nothing by default), `wasi:config/store` and the `moat:plugin` interfaces.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    crate::sandbox::config_store::add_to_linker(linker)?;
    bindings::Imports::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    Ok(())
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// What one instance may use of the host's memory and tables: wasmtime's [`StoreLimits`] for each
/// memory and table, and the total of all its linear memories, since a component may have
/// several and `max_memory_mb` is what the whole instance may hold.
pub struct CallLimits {
    each: StoreLimits,
    max_total: usize,
    total: usize,
}

impl CallLimits {
    fn new(max_memory_bytes: usize) -> Self {
        Self {
            each: StoreLimitsBuilder::new()
                .memory_size(max_memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            max_total: max_memory_bytes,
            total: 0,
        }
    }
}

impl ResourceLimiter for CallLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.each.memory_growing(current, desired, maximum)? {
            return Ok(false);
        }
        let total = self.total - current.min(self.total) + desired;
        if total > self.max_total {
            // A trap, as for one memory past the limit: the guest cannot go on without it.
            wasmtime::bail!(
                "forcing trap when growing memory to {desired} bytes: the instance's memories \
                 would hold {total} bytes, more than the {} allowed",
                self.max_total
            );
        }
        self.total = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.each.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.each.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.each.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.each.instances()
    }

    fn tables(&self) -> usize {
        self.each.tables()
    }

    fn memories(&self) -> usize {
        self.each.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{MemorySection, MemoryType, Module};

    /// A core module with one memory of `pages` 64 KiB pages per entry of `memories`.
    fn module_with_memories(memories: &[u64]) -> Vec<u8> {
        let mut section = MemorySection::new();
        for &pages in memories {
            section.memory(MemoryType {
                minimum: pages,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            });
        }
        let mut module = Module::new();
        module.section(&section);
        module.finish()
    }

    fn instantiate(memories: &[u64], limit: usize) -> wasmtime::Result<()> {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, module_with_memories(memories))?;
        let mut store = wasmtime::Store::new(&engine, CallLimits::new(limit));
        store.limiter(|limits| limits);
        wasmtime::Instance::new(&mut store, &module, &[]).map(drop)
    }

    fn form(schema: &str) -> client::Question {
        client::Question::Elicit(client::Form {
            message: "?".into(),
            schema: schema.into(),
        })
    }

    /// The questions checked as the first `ask` of a call.
    fn checked(questions: Vec<(String, client::Question)>) -> Result<Vec<Question>, String> {
        mcp_questions(questions, &BTreeSet::new())
    }

    #[test]
    fn a_key_names_one_question_for_the_whole_call() {
        let asked = BTreeSet::from(["a".to_string()]);
        let again = mcp_questions(vec![("a".into(), client::Question::Roots)], &asked);
        assert!(again.unwrap_err().contains("was asked before in this call"));
        let other = mcp_questions(vec![("b".into(), client::Question::Roots)], &asked);
        assert_eq!(other.unwrap()[0].key, "b");
    }

    #[test]
    fn a_guest_cannot_ask_under_moats_own_keys() {
        // moat asks a caller to connect an account as `moat:consent:SOURCE`; a guest's question
        // under that key would take the caller's answer to it.
        let error = checked(vec![(
            "moat:consent:tracker".into(),
            client::Question::Roots,
        )]);
        assert!(error.unwrap_err().contains("names moat's own questions"));
    }

    #[test]
    fn a_guest_asks_few_small_uniquely_named_questions() {
        let ok = checked(vec![
            ("a".into(), form("{}")),
            ("b".into(), client::Question::Roots),
        ]);
        let ok = ok.unwrap();
        assert_eq!(ok[0].method, "elicitation/create");
        assert_eq!(ok[0].params["requestedSchema"], serde_json::json!({}));
        assert_eq!(ok[1].method, "roots/list");

        let twice = checked(vec![("a".into(), form("{}")), ("a".into(), form("{}"))]);
        assert!(twice.unwrap_err().contains("used twice"));
        let empty_key = checked(vec![(String::new(), form("{}"))]);
        assert!(empty_key.is_err());
        assert!(checked(Vec::new()).is_err());
        let many = (0..=MAX_QUESTIONS)
            .map(|i| (i.to_string(), form("{}")))
            .collect();
        assert!(checked(many).unwrap_err().contains("between 1 and"));
        let huge = format!(
            "{{\"description\": \"{}\"}}",
            "x".repeat(MAX_QUESTION_BYTES)
        );
        assert!(
            checked(vec![("a".into(), form(&huge))])
                .unwrap_err()
                .contains("bytes")
        );
        let not_json = checked(vec![("a".into(), form("{"))]);
        assert!(not_json.unwrap_err().contains("not JSON"));
        let link = client::Question::Sample(client::Sampling {
            messages: vec![client::SamplingMessage {
                role: bindings::moat::plugin::prompt::Role::User,
                content: ContentBlock::ResourceLink(
                    bindings::moat::plugin::content::ResourceLink {
                        uri: "x://y".into(),
                        name: "y".into(),
                        description: None,
                        mime_type: None,
                    },
                ),
            }],
            system_prompt: None,
            max_tokens: 1,
        });
        assert!(
            checked(vec![("a".into(), link)])
                .unwrap_err()
                .contains("sampling message")
        );
    }

    #[test]
    fn the_memory_limit_is_the_total_of_all_memories() {
        let limit = 32 << 20;
        // 300 pages are 18.75 MiB: one fits, two together do not, though each would alone.
        instantiate(&[300], limit).unwrap();
        instantiate(&[300, 100], limit).unwrap();
        let error = instantiate(&[300, 300], limit).unwrap_err();
        assert!(
            format!("{error:?}").contains("the instance's memories would hold"),
            "{error:?}"
        );
        instantiate(&[100, 100, 100, 100, 100, 100], limit).unwrap_err();
    }
}
