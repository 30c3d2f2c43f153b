//! Calls that go on as tasks (`io.modelcontextprotocol/tasks`, SEP-2663).
//!
//! A tool asks for it with `moat:plugin/tasks.detach`; when the request's client follows tasks
//! the call stops there and the client gets a task at once. The task then runs the tool again,
//! from the start, in a fresh instance of its own under the plugin's limits and deadline, with
//! the answers the call had gathered. A task that asks the client something waits in
//! `input_required`; `tasks/update` brings the answers, and once every question of the round is
//! answered the tool runs again with them, as a 2026-07-28 call is replayed. Tasks belong to
//! the principal that started them: another principal's task is as unknown as a missing one.
//! They are bounded in number, overall and per principal, and forgotten [`TASK_TTL`] after they
//! began. Each run holds one of its principal's call slots ([`Quotas`]) while the tool runs,
//! waiting for one when they are all taken: a caller's tasks are no way around its quota.
//!
//! When replicas share state (`[cluster]`), the records live in Redis and any replica
//! answers `tasks/get`, `tasks/update` and `tasks/cancel`: the replica that takes a round's last
//! answer runs the tool again; a cancel reaches the replica running the guest, which stops it;
//! and a task whose replica died while running it is failed, or run again where it is asked
//! about when its tool is marked `@idempotent`. A replica other than the one the task began on
//! runs the tool of that name it serves.

mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientCapabilities, DetailedTask, ErrorCode, InputResponses, JsonObject, Task, TaskPayload,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::access::quotas::Quotas;
use crate::mcp::asking::{self, Round, Rounds};
use crate::plugin::registry::Registry;
use crate::plugin::{CallError, Exchange};
use crate::sandbox::host::{Detach, Question};
use crate::sandbox::network::{CallCredentials, CallReach};
use crate::shared::replicas::{Event, Replicas};
use crate::shared::tasks::TaskRecords;
use store::{Record, Runner, State, Store, now, now_ms, unreachable};

/// How long a task is kept, from when it began.
pub const TASK_TTL: Duration = Duration::from_secs(10 * 60);

/// How often a client should ask for a task's state.
pub const POLL_INTERVAL_MS: u64 = 500;

/// The most tasks kept at once, and per principal.
pub const MAX_TASKS: usize = 1024;
pub const MAX_TASKS_PER_PRINCIPAL: usize = 64;
/// The most one task's record may hold (arguments, answers, questions, result): with the bounds
/// above, what one principal, and everyone, may make moat keep (in Redis, under `[cluster]`).
pub const MAX_RECORD_BYTES: usize = 256 << 10;

/// Whether `value` fits in a task's record.
fn fits(value: &impl serde::Serialize) -> bool {
    serde_json::to_vec(value).is_ok_and(|bytes| bytes.len() <= MAX_RECORD_BYTES)
}

fn too_large(what: &str) -> String {
    format!(
        "{what} more than the {} KiB a task keeps",
        MAX_RECORD_BYTES >> 10
    )
}

/// What a task runs: one tool call, as it was asked.
pub struct Job {
    /// The registry the call began on: the task's first run is on the plugin it started with.
    pub registry: Arc<Registry>,
    pub tool: String,
    pub arguments: Option<JsonObject>,
    /// What the client declared it can be asked.
    pub capabilities: ClientCapabilities,
    /// Who started it.
    pub caller: Caller,
}

/// A caller's credentials for a run, when `[credentials]` names sources: those of whoever
/// started, answered or polled the task (always its owner).
pub type Credentials = Option<Arc<dyn CallCredentials>>;

/// Who a run is for: whoever started, answered or polled the task (always its owner).
#[derive(Clone)]
pub struct Caller {
    /// Their credentials for the headers moat injects (`[credentials]`).
    pub credentials: Credentials,
    /// Whether they may call a tool, by its MCP name, as their access is when the run begins:
    /// asked before every run, so that a task never runs what its owner may not call now (nor
    /// what a record changed where it is kept names instead).
    pub may_call: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Their policy over where a run of a tool (by its MCP name) may send requests.
    pub reach: ReachOf,
}

/// The policy over where a run of a tool (by its MCP name) may send requests, if any.
pub type ReachOf = Arc<dyn Fn(&str) -> Option<Arc<dyn CallReach>> + Send + Sync>;

impl Caller {
    /// A caller who may call every tool served, without credentials (stdio's user, tests).
    pub fn anything() -> Self {
        Self {
            credentials: None,
            may_call: Arc::new(|_| true),
            reach: Arc::new(|_| None),
        }
    }
}

/// Every task kept, and the runs of their tools on this replica.
pub struct Tasks {
    store: Store,
    /// Whose call slots the runs take.
    quotas: Arc<Quotas>,
    /// The registry served now, for the runs after the first.
    serving: watch::Receiver<Arc<Registry>>,
    /// The runs going on here, by run id, to stop on `tasks/cancel`.
    runs: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// Set once this replica listens for the runs other replicas cancel: from its first run.
    listening: std::sync::Once,
}

fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!("unknown task \"{id}\""),
        Some(json!({"taskId": id})),
    )
}

impl Tasks {
    /// Tasks kept in `records`, whose runs count towards `quotas`, and run again on the tools
    /// of `serving`; the runs here that another of `replicas` cancels are stopped.
    pub fn new(
        quotas: Arc<Quotas>,
        serving: watch::Receiver<Arc<Registry>>,
        records: Arc<dyn TaskRecords>,
        replicas: Arc<dyn Replicas>,
    ) -> Self {
        Self {
            store: Store::new(records, replicas),
            quotas,
            serving,
            runs: Mutex::default(),
            listening: std::sync::Once::new(),
        }
    }

    /// Starts `job` as a task of `principal`, with the rounds its call had answered; the task
    /// exists (a `tasks/get` finds it) before this returns.
    pub async fn start(
        self: &Arc<Self>,
        principal: &str,
        job: Job,
        answered: Vec<Round>,
    ) -> Result<Task, McpError> {
        let id = random_id()?;
        let runner = self.runner()?;
        let created_at = now();
        let record = Record {
            principal: principal.to_string(),
            began: now_ms(),
            updated_at: created_at.clone(),
            created_at,
            state: State::Working,
            tool: job.tool,
            arguments: job.arguments,
            capabilities: job.capabilities,
            answered,
            runner: Some(runner.clone()),
        };
        if !fits(&record) {
            return Err(McpError::invalid_params(
                too_large("the call's arguments and answers are"),
                None,
            ));
        }
        self.store.create(&id, &record).await?;
        self.run(&id, &runner, job.registry, &record, job.caller);
        Ok(record.task(&id))
    }

    /// A new run on this replica.
    fn runner(&self) -> Result<Runner, McpError> {
        Ok(Runner {
            instance: self.store.instance().to_string(),
            run: random_id()?,
        })
    }

    /// Runs the task's tool (again), as `runner`, with the rounds answered so far.
    fn run(
        self: &Arc<Self>,
        id: &str,
        runner: &Runner,
        registry: Arc<Registry>,
        record: &Record,
        caller: Caller,
    ) {
        self.listening.call_once(|| {
            let events = self.store.events();
            tokio::spawn(stop_runs_cancelled_elsewhere(Arc::downgrade(self), events));
        });
        let tasks = self.clone();
        let (id, run) = (id.to_string(), runner.run.clone());
        let principal = record.principal.clone();
        // A run waits for a call slot no longer than its task is kept.
        let kept_for = u64::try_from(record.began + TASK_TTL.as_millis() as i64 - now_ms())
            .map_or(Duration::ZERO, Duration::from_millis);
        let call = (record.tool.clone(), record.arguments.clone());
        let (capabilities, answered) = (record.capabilities.clone(), record.answered.clone());
        let mut runs = self.runs.lock().expect("runs lock");
        runs.retain(|_, handle| !handle.is_finished());
        let handle = tokio::spawn(async move {
            let waited = tokio::time::timeout(kept_for, tasks.quotas.wait_for_call(&principal));
            let Ok(slot) = waited.await else {
                let why = "no call slot came free while the task was kept".to_string();
                tasks
                    .finish(&id, &run, failed(ErrorCode::INTERNAL_ERROR, why))
                    .await;
                return;
            };
            let mut state = run_tool(&registry, call, (capabilities, caller), answered).await;
            if !fits(&state) {
                let why = too_large("the tool's result (or its questions) is");
                state = failed(ErrorCode::INTERNAL_ERROR, why);
            }
            drop(slot);
            tasks.finish(&id, &run, state).await;
        });
        runs.insert(runner.run.clone(), handle.abort_handle());
    }

    /// Records how run `run` ended, unless the task moved on without it (was cancelled). While
    /// the store cannot be reached it tries again every second, for as long as the task is kept.
    async fn finish(&self, id: &str, run: &str, state: State) {
        let until = tokio::time::Instant::now() + TASK_TTL;
        loop {
            let finished = self
                .change(id, |record| {
                    let mine = record.runner.as_ref().is_some_and(|r| r.run == run);
                    if mine && matches!(record.state, State::Working) {
                        record.state = state.clone();
                        record.runner = None;
                        record.touch();
                    }
                })
                .await;
            if finished.is_ok() || tokio::time::Instant::now() >= until {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Applies `change` to task `id`'s record and stores it, reading and changing it again when
    /// someone else changed it in between; `None` when no such task is kept.
    async fn change<T>(
        &self,
        id: &str,
        mut change: impl FnMut(&mut Record) -> T,
    ) -> Result<Option<(T, Record)>, crate::shared::StoreError> {
        loop {
            let Some((mut record, version)) = self.store.load(id).await? else {
                return Ok(None);
            };
            let outcome = change(&mut record);
            if self.store.replace(id, version, &record).await? {
                return Ok(Some((outcome, record)));
            }
        }
    }

    /// Task `id`'s record, if it is `principal`'s.
    async fn record_of(&self, principal: &str, id: &str) -> Result<Record, McpError> {
        self.store
            .load(id)
            .await
            .map_err(unreachable)?
            .map(|(record, _)| record)
            .filter(|record| record.principal == principal)
            .ok_or_else(|| unknown(id))
    }

    /// The task as `tasks/get` shows it: still-pending questions, or its result or error.
    pub async fn get(
        self: &Arc<Self>,
        principal: &str,
        id: &str,
        caller: Caller,
    ) -> Result<DetailedTask, McpError> {
        let mut record = self.record_of(principal, id).await?;
        if let (State::Working, Some(runner)) = (&record.state, &record.runner)
            && !self.store.alive(&runner.instance).await
        {
            let (dead, tool) = (runner.clone(), record.tool.clone());
            record = self
                .orphaned(id, dead, &tool, caller)
                .await?
                .unwrap_or(record);
        }
        let payload = match &record.state {
            State::Working => TaskPayload::Working,
            State::InputRequired { questions, answers } => {
                let pending: Vec<Question> = questions
                    .iter()
                    .filter(|q| !answers.contains_key(&q.key))
                    .cloned()
                    .collect();
                let input_requests = asking::input_requests(&pending)
                    .map_err(|e| McpError::internal_error(e, None))?;
                TaskPayload::InputRequired { input_requests }
            }
            State::Completed { result } => TaskPayload::Completed {
                result: result.clone(),
            },
            State::Failed { error } => TaskPayload::Failed {
                error: error.clone(),
            },
            State::Cancelled => TaskPayload::Cancelled,
        };
        Ok(DetailedTask::new(record.task(id), payload))
    }

    /// A task whose run died with its replica: run again here when its tool says running it
    /// twice is harmless (`@idempotent`), failed otherwise. The record as it then is.
    async fn orphaned(
        self: &Arc<Self>,
        id: &str,
        dead: Runner,
        tool: &str,
        caller: Caller,
    ) -> Result<Option<Record>, McpError> {
        let registry = self.serving.borrow().clone();
        let idempotent = registry.find(tool).is_some_and(|(_, tool)| {
            tool.annotations
                .as_ref()
                .is_some_and(|a| a.idempotent_hint == Some(true))
        });
        let replay = self.runner()?;
        let changed = self
            .change(id, |record| {
                if record.runner.as_ref() != Some(&dead) || !matches!(record.state, State::Working)
                {
                    return false;
                }
                if idempotent {
                    record.runner = Some(replay.clone());
                } else {
                    record.state = failed(
                        ErrorCode::INTERNAL_ERROR,
                        format!(
                            "the replica running this task ({}) stopped before it finished; \
                             its tool is not marked @idempotent, so it is not run again",
                            replica_name(&dead.instance)
                        ),
                    );
                    record.runner = None;
                }
                record.touch();
                true
            })
            .await
            .map_err(unreachable)?;
        Ok(match changed {
            Some((true, record)) if idempotent => {
                tracing::info!(
                    task = id,
                    "replica {} died running this task; running its @idempotent tool again here",
                    replica_name(&dead.instance)
                );
                self.run(id, &replay, registry, &record, caller);
                Some(record)
            }
            Some((_, record)) => Some(record),
            None => None,
        })
    }

    /// Takes answers to the task's pending questions (others are ignored); once every question
    /// of the round has its answer, the tool runs again with them, here.
    pub async fn update(
        self: &Arc<Self>,
        principal: &str,
        id: &str,
        responses: &InputResponses,
        caller: Caller,
    ) -> Result<(), McpError> {
        let next = self.runner()?;
        let changed = self
            .change(id, |record| {
                if record.principal != principal {
                    return Err(unknown(id));
                }
                let before = record.clone();
                let outcome = answer(record, id, responses, &next);
                if outcome.is_ok() && !fits(record) {
                    *record = before;
                    return Err(McpError::invalid_params(too_large("the answers are"), None));
                }
                outcome
            })
            .await
            .map_err(unreachable)?;
        let Some((complete, record)) = changed else {
            return Err(unknown(id));
        };
        if complete? {
            let registry = self.serving.borrow().clone();
            self.run(id, &next, registry, &record, caller);
        }
        Ok(())
    }

    /// Stops the task, if it has not ended; cancelling an ended task changes nothing.
    pub async fn cancel(&self, principal: &str, id: &str) -> Result<(), McpError> {
        let changed = self
            .change(id, |record| {
                if record.principal != principal {
                    return Err(unknown(id));
                }
                if !record.is_open() {
                    return Ok(None);
                }
                record.state = State::Cancelled;
                record.touch();
                Ok(record.runner.take())
            })
            .await
            .map_err(unreachable)?;
        let Some((stopped, _)) = changed else {
            return Err(unknown(id));
        };
        // Stopped here if it runs here; otherwise the replica running it is told to.
        if let Some(runner) = stopped?
            && !self.stop(&runner.run)
        {
            self.store.stop_elsewhere(&runner.run).await;
        }
        Ok(())
    }

    /// Stops run `run` if it goes on here: whether it did.
    fn stop(&self, run: &str) -> bool {
        let handle = self.runs.lock().expect("runs lock").remove(run);
        handle.inspect(tokio::task::AbortHandle::abort).is_some()
    }
}

/// Stops the runs here that other replicas cancel, while the tasks live.
async fn stop_runs_cancelled_elsewhere(
    tasks: Weak<Tasks>,
    mut events: tokio::sync::broadcast::Receiver<Event>,
) {
    while let Some(event) = crate::shared::replicas::next(&mut events).await {
        let Some(tasks) = tasks.upgrade() else {
            return;
        };
        if let Event::StopRun { run } = event {
            tasks.stop(&run);
        }
    }
}

/// Takes `responses` to task `id`'s pending questions into `record`; once its round is whole, the
/// task goes back to work as `next`. Whether it did.
fn answer(
    record: &mut Record,
    id: &str,
    responses: &InputResponses,
    next: &Runner,
) -> Result<bool, McpError> {
    let State::InputRequired { questions, answers } = &mut record.state else {
        return Err(McpError::invalid_params(
            format!("task \"{id}\" is not waiting for input"),
            None,
        ));
    };
    for question in questions.iter() {
        if let Some(answer) = responses.get(&question.key) {
            answers.insert(question.key.clone(), answer.clone());
        }
    }
    let round: Option<Round> = questions
        .iter()
        .map(|q| Some((q.key.clone(), answers.get(&q.key)?.clone())))
        .collect();
    let complete = round.is_some();
    if let Some(round) = round {
        record.answered.push(round);
        record.state = State::Working;
        record.runner = Some(next.clone());
    }
    record.touch();
    Ok(complete)
}

/// One run of a task's tool, and the state it leaves the task in.
async fn run_tool(
    registry: &Registry,
    (tool, arguments): (String, Option<JsonObject>),
    (capabilities, caller): (ClientCapabilities, Caller),
    answered: Vec<Round>,
) -> State {
    if !(caller.may_call)(&tool) {
        return failed(
            ErrorCode::INVALID_PARAMS,
            format!("the task's caller may not call the tool \"{tool}\" (any more)"),
        );
    }
    let Some((plugin, tool)) = registry.find(&tool) else {
        return failed(ErrorCode::INTERNAL_ERROR, "the tool is gone".into());
    };
    let client = Rounds::new(capabilities, answered, Default::default()).detaching(Detach::Running);
    let exchange = Exchange {
        events: None,
        client: Some(Arc::new(client)),
        credentials: caller.credentials,
        reach: (caller.reach)(&tool.name),
    };
    let outcome = plugin.call_asking(tool, arguments.as_ref(), exchange).await;
    match outcome.result {
        Ok(result) => match serde_json::to_value(result) {
            Ok(Value::Object(result)) => State::Completed { result },
            _ => failed(ErrorCode::INTERNAL_ERROR, "an unreadable result".into()),
        },
        Err(CallError::InputRequired(questions)) => State::InputRequired {
            questions,
            answers: BTreeMap::new(),
        },
        Err(error @ CallError::MissingCapability(_)) => failed(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            error.to_string(),
        ),
        Err(error) => failed(ErrorCode::INTERNAL_ERROR, error.to_string()),
    }
}

fn failed(code: ErrorCode, message: String) -> State {
    let mut error = JsonObject::new();
    error.insert("code".into(), code.0.into());
    error.insert("message".into(), message.into());
    State::Failed { error }
}

/// The replica's name in a runner's instance (`NAME/SUFFIX`).
fn replica_name(instance: &str) -> &str {
    instance.rsplit_once('/').map_or(instance, |(name, _)| name)
}

/// 128 random bits: an id no one guesses.
fn random_id() -> Result<String, McpError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| McpError::internal_error(format!("no randomness: {e}"), None))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
