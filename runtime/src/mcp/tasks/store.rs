//! Task records as the tasks read and write them, kept by whichever backend moat started with
//! ([`TaskRecords`]): a record carries a version that every change bumps, so a change made from
//! a stale read is refused and made again.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{ClientCapabilities, JsonObject, Task, TaskStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{MAX_TASKS, MAX_TASKS_PER_PRINCIPAL, POLL_INTERVAL_MS, TASK_TTL};
use crate::mcp::asking::Round;
use crate::sandbox::host::Question;
use crate::shared::StoreError;
use crate::shared::replicas::{Event, Replicas};
use crate::shared::tasks::{Bounds, TaskRecords};

/// One task: whose it is, what it runs, where it stands.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Record {
    pub principal: String,
    /// When it began, in milliseconds since the Unix epoch.
    pub began: i64,
    pub created_at: String,
    pub updated_at: String,
    pub state: State,
    pub tool: String,
    pub arguments: Option<JsonObject>,
    /// What the client declared it can be asked.
    pub capabilities: ClientCapabilities,
    /// The rounds of questions answered so far, in the order the tool asked them.
    pub answered: Vec<Round>,
    /// The run of the tool going on now, and where.
    pub runner: Option<Runner>,
}

/// A run of a task's tool: the replica (instance) it runs on, and its id there.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct Runner {
    pub instance: String,
    pub run: String,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(super) enum State {
    Working,
    /// Waiting for the answers to `questions`; `answers` holds those already given.
    InputRequired {
        questions: Vec<Question>,
        answers: BTreeMap<String, Value>,
    },
    Completed {
        result: JsonObject,
    },
    Failed {
        error: JsonObject,
    },
    Cancelled,
}

impl Record {
    pub fn task(&self, id: &str) -> Task {
        Task::new(id, self.status(), &self.created_at, &self.updated_at)
            .with_ttl_ms(TASK_TTL.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
    }

    pub fn status(&self) -> TaskStatus {
        match self.state {
            State::Working => TaskStatus::Working,
            State::InputRequired { .. } => TaskStatus::InputRequired,
            State::Completed { .. } => TaskStatus::Completed,
            State::Failed { .. } => TaskStatus::Failed,
            State::Cancelled => TaskStatus::Cancelled,
        }
    }

    /// Whether it has not ended yet.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Working | State::InputRequired { .. })
    }

    pub fn touch(&mut self) {
        self.updated_at = now();
    }
}

pub(super) fn now() -> String {
    jiff::Timestamp::now().to_string()
}

pub(super) fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The task records, and the replicas that may run them.
pub(super) struct Store {
    records: Arc<dyn TaskRecords>,
    replicas: Arc<dyn Replicas>,
}

/// The error of a store that cannot answer now.
pub(super) fn unreachable(error: StoreError) -> McpError {
    match error {
        StoreError::Unreachable(_) => McpError::internal_error(
            "tasks are shared between replicas through Redis, which does not answer now: try \
             again in a moment",
            Some(json!({"retryable": true})),
        ),
        StoreError::Sealing(why) => McpError::internal_error(why, None),
    }
}

impl Store {
    pub fn new(records: Arc<dyn TaskRecords>, replicas: Arc<dyn Replicas>) -> Self {
        Self { records, replicas }
    }

    /// This replica (run) as runners name it.
    pub fn instance(&self) -> &str {
        self.replicas.instance()
    }

    /// Keeps the new task `id`, unless its principal (or everyone) has too many.
    pub async fn create(&self, id: &str, record: &Record) -> Result<(), McpError> {
        let bounds = Bounds {
            per_principal: MAX_TASKS_PER_PRINCIPAL,
            in_all: MAX_TASKS,
        };
        let text = serde_json::to_string(record)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let kept = (self.records)
            .create(id, &record.principal, &text, TASK_TTL, bounds)
            .await
            .map_err(unreachable)?;
        if kept {
            return Ok(());
        }
        Err(McpError::internal_error(
            format!(
                "too many tasks: at most {MAX_TASKS_PER_PRINCIPAL} per caller and {MAX_TASKS} in \
                 all are kept, each for {} minutes",
                TASK_TTL.as_secs() / 60
            ),
            None,
        ))
    }

    /// Task `id`'s record and version, while it is kept.
    pub async fn load(&self, id: &str) -> Result<Option<(Record, u64)>, StoreError> {
        let Some(stored) = self.records.load(id).await? else {
            return Ok(None);
        };
        match serde_json::from_str(&stored.record) {
            Ok(record) => Ok(Some((record, stored.version))),
            Err(error) => {
                // Written by another version of moat, or by something else: not a task of ours.
                tracing::warn!("a task record that moat cannot read: {error}");
                Ok(None)
            }
        }
    }

    /// Replaces task `id`'s record read at `version`: `false` if it changed meanwhile.
    pub async fn replace(
        &self,
        id: &str,
        version: u64,
        record: &Record,
    ) -> Result<bool, StoreError> {
        let text = serde_json::to_string(record)
            .map_err(|error| StoreError::Sealing(format!("a task record: {error}")))?;
        self.records.replace(id, version, &text).await
    }

    /// Whether replica run `instance` is alive; when no one can say, it is taken to be.
    pub async fn alive(&self, instance: &str) -> bool {
        self.replicas.alive(instance).await
    }

    /// Tells the replica running `run` to stop it.
    pub async fn stop_elsewhere(&self, run: &str) {
        let run = run.to_string();
        self.replicas.publish(Event::StopRun { run }).await;
    }

    /// What other replicas raise, the runs they cancel among it.
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.replicas.events()
    }
}
