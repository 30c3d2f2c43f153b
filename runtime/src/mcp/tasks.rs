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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientCapabilities, DetailedTask, ErrorCode, InputResponses, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};

use crate::access::quotas::Quotas;
use crate::mcp::asking::{self, Round, Rounds};
use crate::plugin::registry::Registry;
use crate::plugin::{CallError, Exchange};
use crate::sandbox::host::{Detach, Question};

/// How long a task is kept, from when it began.
pub const TASK_TTL: Duration = Duration::from_secs(10 * 60);

/// How often a client should ask for a task's state.
pub const POLL_INTERVAL_MS: u64 = 500;

/// The most tasks kept at once, and per principal.
pub const MAX_TASKS: usize = 1024;
pub const MAX_TASKS_PER_PRINCIPAL: usize = 64;

/// What a task runs: one tool call, as it was asked.
pub struct Job {
    /// The registry the call began on: the task finishes on the plugin it started with.
    pub registry: Arc<Registry>,
    pub tool: String,
    pub arguments: Option<JsonObject>,
    /// What the client declared it can be asked.
    pub capabilities: ClientCapabilities,
}

/// Every task kept.
#[derive(Default)]
pub struct Tasks {
    entries: Mutex<HashMap<String, Entry>>,
    /// Whose call slots the runs take.
    quotas: Arc<Quotas>,
}

struct Entry {
    principal: String,
    began: Instant,
    created_at: String,
    updated_at: String,
    state: State,
    job: Arc<Job>,
    /// The rounds of questions answered so far, in the order the tool asked them.
    answered: Vec<Round>,
    /// The run in progress, to stop on `tasks/cancel`.
    run: Option<tokio::task::AbortHandle>,
}

enum State {
    Working,
    /// Waiting for the answers to `questions`; `answers` holds those already given.
    InputRequired {
        questions: Vec<Question>,
        answers: BTreeMap<String, Value>,
    },
    Completed(JsonObject),
    Failed(JsonObject),
    Cancelled,
}

impl Entry {
    fn task(&self, id: &str) -> Task {
        Task::new(id, self.status(), &self.created_at, &self.updated_at)
            .with_ttl_ms(TASK_TTL.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
    }

    fn status(&self) -> TaskStatus {
        match self.state {
            State::Working => TaskStatus::Working,
            State::InputRequired { .. } => TaskStatus::InputRequired,
            State::Completed(_) => TaskStatus::Completed,
            State::Failed(_) => TaskStatus::Failed,
            State::Cancelled => TaskStatus::Cancelled,
        }
    }

    fn touch(&mut self) {
        self.updated_at = now();
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!("unknown task \"{id}\""),
        Some(json!({"taskId": id})),
    )
}

impl Tasks {
    /// Tasks whose runs count towards `quotas`.
    pub fn new(quotas: Arc<Quotas>) -> Self {
        Self {
            entries: Mutex::default(),
            quotas,
        }
    }

    /// Starts `job` as a task of `principal`, with the rounds its call had answered; the task
    /// exists (a `tasks/get` finds it) before this returns.
    pub fn start(
        self: &Arc<Self>,
        principal: &str,
        job: Job,
        answered: Vec<Round>,
    ) -> Result<Task, McpError> {
        let id = task_id()?;
        let task = {
            let mut entries = self.entries.lock().expect("tasks lock");
            entries.retain(|_, entry| entry.began.elapsed() < TASK_TTL);
            let mine = entries
                .values()
                .filter(|e| e.principal == principal)
                .count();
            if entries.len() >= MAX_TASKS || mine >= MAX_TASKS_PER_PRINCIPAL {
                return Err(McpError::internal_error(
                    format!(
                        "too many tasks: at most {MAX_TASKS_PER_PRINCIPAL} per caller and \
                         {MAX_TASKS} in all are kept, each for {} minutes",
                        TASK_TTL.as_secs() / 60
                    ),
                    None,
                ));
            }
            let created_at = now();
            let entry = Entry {
                principal: principal.to_string(),
                began: Instant::now(),
                updated_at: created_at.clone(),
                created_at,
                state: State::Working,
                job: Arc::new(job),
                answered,
                run: None,
            };
            let task = entry.task(&id);
            entries.insert(id.clone(), entry);
            task
        };
        self.run(&id);
        Ok(task)
    }

    /// Runs the task's tool (again) with the rounds answered so far.
    fn run(self: &Arc<Self>, id: &str) {
        let mut entries = self.entries.lock().expect("tasks lock");
        let Some(entry) = entries.get_mut(id) else {
            return;
        };
        let (job, answered) = (entry.job.clone(), entry.answered.clone());
        let tasks = self.clone();
        let task_id = id.to_string();
        let principal = entry.principal.clone();
        let handle = tokio::spawn(async move {
            let _slot = tasks.quotas.wait_for_call(&principal).await;
            let state = run(&job, answered).await;
            tasks.finish(&task_id, state);
        });
        entry.run = Some(handle.abort_handle());
    }

    fn finish(&self, id: &str, state: State) {
        let mut entries = self.entries.lock().expect("tasks lock");
        if let Some(entry) = entries.get_mut(id)
            && matches!(entry.state, State::Working)
        {
            entry.state = state;
            entry.run = None;
            entry.touch();
        }
    }

    /// The task as `tasks/get` shows it: still-pending questions, or its result or error.
    pub fn get(&self, principal: &str, id: &str) -> Result<DetailedTask, McpError> {
        let entries = self.entries.lock().expect("tasks lock");
        let entry = entries
            .get(id)
            .filter(|e| e.principal == principal && e.began.elapsed() < TASK_TTL)
            .ok_or_else(|| unknown(id))?;
        let payload = match &entry.state {
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
            State::Completed(result) => TaskPayload::Completed {
                result: result.clone(),
            },
            State::Failed(error) => TaskPayload::Failed {
                error: error.clone(),
            },
            State::Cancelled => TaskPayload::Cancelled,
        };
        Ok(DetailedTask::new(entry.task(id), payload))
    }

    /// Takes answers to the task's pending questions (others are ignored); once every question
    /// of the round has its answer, the tool runs again with them.
    pub fn update(
        self: &Arc<Self>,
        principal: &str,
        id: &str,
        responses: &InputResponses,
    ) -> Result<(), McpError> {
        let complete = {
            let mut entries = self.entries.lock().expect("tasks lock");
            let entry = entries
                .get_mut(id)
                .filter(|e| e.principal == principal)
                .ok_or_else(|| unknown(id))?;
            let State::InputRequired { questions, answers } = &mut entry.state else {
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
            if let Some(round) = &round {
                entry.answered.push(round.clone());
                entry.state = State::Working;
            }
            entry.touch();
            round.is_some()
        };
        if complete {
            self.run(id);
        }
        Ok(())
    }

    /// Stops the task, if it has not ended; cancelling an ended task changes nothing.
    pub fn cancel(&self, principal: &str, id: &str) -> Result<(), McpError> {
        let mut entries = self.entries.lock().expect("tasks lock");
        let entry = entries
            .get_mut(id)
            .filter(|e| e.principal == principal)
            .ok_or_else(|| unknown(id))?;
        if matches!(entry.state, State::Working | State::InputRequired { .. }) {
            if let Some(run) = entry.run.take() {
                run.abort();
            }
            entry.state = State::Cancelled;
            entry.touch();
        }
        Ok(())
    }
}

/// One run of a task's tool, and the state it leaves the task in.
async fn run(job: &Job, answered: Vec<Round>) -> State {
    let Some((plugin, tool)) = job.registry.find(&job.tool) else {
        return failed(ErrorCode::INTERNAL_ERROR, "the tool is gone".into());
    };
    let client = Rounds::new(job.capabilities.clone(), answered, Default::default())
        .detaching(Detach::Running);
    let exchange = Exchange {
        events: None,
        client: Some(Arc::new(client)),
    };
    let outcome = plugin
        .call_asking(tool, job.arguments.as_ref(), exchange)
        .await;
    match outcome.result {
        Ok(result) => match serde_json::to_value(result) {
            Ok(Value::Object(result)) => State::Completed(result),
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
    State::Failed(error)
}

/// 128 random bits: a task id no one guesses.
fn task_id() -> Result<String, McpError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| McpError::internal_error(format!("no randomness: {e}"), None))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
