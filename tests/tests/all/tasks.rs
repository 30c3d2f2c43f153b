//! Tasks (`io.modelcontextprotocol/tasks`) of the `conformance` plugin's fixtures, through moat's
//! task store: each run a fresh instance, questions answered through updates (all of a round
//! before the tool runs again), cancellation that stops the guest, and tasks that belong to the
//! principal that started them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moat::access::quotas::{Quota, Quotas};
use moat::mcp::tasks::{Caller, Job, MAX_TASKS_PER_PRINCIPAL, Tasks};
use moat::plugin::registry::Registry;
use moat::shared::StoreError;
use moat::shared::replicas::Alone;
use moat::shared::tasks::{Bounds, Memory, Stored, TaskRecords};
use moat_tests::{engine, plugins, source};
use rmcp::model::{DetailedTask, InputResponses, TaskStatus};
use serde_json::{Value, json};

fn registry() -> Arc<Registry> {
    let (registry, errors) =
        Registry::load(engine(), &[source("test", plugins::CONFORMANCE)]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    Arc::new(registry)
}

/// Tasks that run again on `registry`, under no quota.
fn tasks_on(registry: &Arc<Registry>) -> Arc<Tasks> {
    tasks_kept_in(registry, Arc::new(Memory::default()))
}

/// Tasks as [`tasks_on`], their records kept in `records`.
fn tasks_kept_in(registry: &Arc<Registry>, records: Arc<dyn TaskRecords>) -> Arc<Tasks> {
    let (_, serving) = tokio::sync::watch::channel(registry.clone());
    let replicas = Arc::new(Alone::default());
    Arc::new(Tasks::new(Arc::default(), serving, records, replicas))
}

fn job(registry: &Arc<Registry>, tool: &str, arguments: Value) -> Job {
    Job {
        registry: registry.clone(),
        tool: tool.into(),
        arguments: arguments.as_object().cloned(),
        capabilities: serde_json::from_value(json!({"elicitation": {}})).unwrap(),
        caller: Caller::anything(),
    }
}

/// alice's task of `test_multi_input`, which asks two questions in one round.
async fn asking(tasks: &Arc<Tasks>, registry: &Arc<Registry>) -> rmcp::model::Task {
    let job = job(registry, "test_multi_input", json!({}));
    tasks.start("alice", job, Vec::new()).await.unwrap()
}

/// Answers to both questions of `test_multi_input`'s round: Ada, teal.
fn both_answers() -> InputResponses {
    [
        (
            "user_name",
            json!({"action": "accept", "content": {"name": "Ada"}}),
        ),
        (
            "user_color",
            json!({"action": "accept", "content": {"color": "teal"}}),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The task once its status is `status`, failing after ten seconds.
async fn until(tasks: &Arc<Tasks>, principal: &str, id: &str, status: TaskStatus) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let task: DetailedTask = tasks.get(principal, id, Caller::anything()).await.unwrap();
        if task.status() == status {
            return serde_json::to_value(rmcp::model::GetTaskResult::new(task)).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "task {id} stayed {:?}",
            task.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_task_runs_to_its_result_for_its_principal_only() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let job = job(
        &registry,
        "test_slow_compute",
        json!({"seconds": 0, "label": "quick"}),
    );
    let task = tasks.start("alice", job, Vec::new()).await.unwrap();
    assert_eq!(task.ttl_ms, Some(600_000));
    let done = until(&tasks, "alice", &task.task_id, TaskStatus::Completed).await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Computed quick in 0 s."
    );

    // Another principal cannot see, answer or cancel it: it is unknown to them.
    let id = &task.task_id;
    assert!(
        tasks
            .get("bob", id, Caller::anything())
            .await
            .unwrap_err()
            .message
            .contains("unknown task")
    );
    assert!(tasks.cancel("bob", id).await.is_err());
    assert!(
        tasks
            .update("bob", id, &Default::default(), Caller::anything())
            .await
            .is_err()
    );
    // Cancelling an ended task changes nothing.
    tasks.cancel("alice", id).await.unwrap();
    until(&tasks, "alice", id, TaskStatus::Completed).await;
}

#[tokio::test]
async fn a_task_waits_for_every_answer_of_its_round() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let task = asking(&tasks, &registry).await;
    let id = &task.task_id;
    let waiting = until(&tasks, "alice", id, TaskStatus::InputRequired).await;
    let mut keys: Vec<&String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    keys.sort();
    assert_eq!(keys, ["user_color", "user_name"]);

    // One answer (and one for a question nobody asked): the other is still pending.
    let name = json!({"action": "accept", "content": {"name": "Ada"}});
    let partial = [
        ("user_name".to_string(), name),
        ("nobody".to_string(), json!({})),
    ];
    tasks
        .update(
            "alice",
            id,
            &partial.into_iter().collect(),
            Caller::anything(),
        )
        .await
        .unwrap();
    let still = until(&tasks, "alice", id, TaskStatus::InputRequired).await;
    let pending: Vec<&String> = still["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(pending, ["user_color"]);

    let color = json!({"action": "accept", "content": {"color": "teal"}});
    tasks
        .update(
            "alice",
            id,
            &[("user_color".to_string(), color)].into_iter().collect(),
            Caller::anything(),
        )
        .await
        .unwrap();
    let done = until(&tasks, "alice", id, TaskStatus::Completed).await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada likes teal.");
    assert!(
        tasks
            .update("alice", id, &Default::default(), Caller::anything())
            .await
            .is_err(),
        "nothing is pending"
    );
}

#[tokio::test]
async fn a_run_asks_again_whether_its_caller_may_call_the_tool() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let task = asking(&tasks, &registry).await;
    let id = &task.task_id;
    until(&tasks, "alice", id, TaskStatus::InputRequired).await;
    // Meanwhile alice lost the tool (a reload of [[access]], a group taken away): her answers
    // run nothing.
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let refusing = Caller {
        credentials: None,
        may_call: {
            let asked = asked.clone();
            std::sync::Arc::new(move |tool: &str| {
                asked.lock().unwrap().push(tool.to_string());
                false
            })
        },
        ..Caller::anything()
    };
    let answers = both_answers();
    tasks.update("alice", id, &answers, refusing).await.unwrap();
    let failed = until(&tasks, "alice", id, TaskStatus::Failed).await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("may not call the tool \"test_multi_input\""),
        "{failed}"
    );
    assert_eq!(*asked.lock().unwrap(), ["test_multi_input"]);
}

#[tokio::test]
async fn a_task_keeps_no_more_than_its_budget() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let label = "x".repeat(moat::mcp::tasks::MAX_RECORD_BYTES);
    let job = job(
        &registry,
        "test_slow_compute",
        json!({"seconds": 0, "label": label}),
    );
    let refused = tasks.start("alice", job, Vec::new()).await.unwrap_err();
    assert!(
        refused
            .message
            .contains("more than the 256 KiB a task keeps"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn cancelling_a_task_stops_its_guest() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let job = job(
        &registry,
        "test_slow_compute",
        json!({"seconds": 20, "label": "slow"}),
    );
    let task = tasks.start("alice", job, Vec::new()).await.unwrap();
    let (plugin, _) = registry.find("test_slow_compute").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while plugin.calls_running() == 0 {
        assert!(Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tasks.cancel("alice", &task.task_id).await.unwrap();
    until(&tasks, "alice", &task.task_id, TaskStatus::Cancelled).await;
    while plugin.calls_running() != 0 {
        assert!(Instant::now() < deadline, "the cancelled guest still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_crash_fails_the_task_and_a_tool_error_completes_it() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    let crash = tasks
        .start(
            "alice",
            job(&registry, "test_protocol_error_job", json!({})),
            Vec::new(),
        )
        .await
        .unwrap();
    let failed = until(&tasks, "alice", &crash.task_id, TaskStatus::Failed).await;
    assert_eq!(failed["error"]["code"], -32603);
    assert!(failed.get("result").is_none());
    let error = tasks
        .start(
            "alice",
            job(&registry, "test_failing_job", json!({})),
            Vec::new(),
        )
        .await
        .unwrap();
    let completed = until(&tasks, "alice", &error.task_id, TaskStatus::Completed).await;
    assert_eq!(completed["result"]["isError"], true);
}

#[tokio::test]
async fn a_principal_has_a_bounded_number_of_tasks() {
    let registry = registry();
    let tasks = tasks_on(&registry);
    for _ in 0..MAX_TASKS_PER_PRINCIPAL {
        tasks
            .start(
                "alice",
                job(&registry, "test_greet", json!({"name": "x"})),
                Vec::new(),
            )
            .await
            .unwrap();
    }
    let refused = tasks
        .start(
            "alice",
            job(&registry, "test_greet", json!({"name": "x"})),
            Vec::new(),
        )
        .await
        .unwrap_err();
    assert!(refused.message.contains("too many tasks"), "{refused:?}");
    // Another principal's tasks are counted apart.
    tasks
        .start(
            "bob",
            job(&registry, "test_greet", json!({"name": "x"})),
            Vec::new(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_task_runs_in_one_of_its_principals_call_slots() {
    let registry = registry();
    let one_at_a_time = Quota {
        requests_per_minute: None,
        concurrent_calls: Some(1),
    };
    let quotas = Arc::new(Quotas::new(one_at_a_time, Default::default()));
    let (_, serving) = tokio::sync::watch::channel(registry.clone());
    let (records, replicas) = (Arc::new(Memory::default()), Arc::new(Alone::default()));
    let tasks = Arc::new(Tasks::new(quotas.clone(), serving, records, replicas));
    // Alice's one slot is taken (by a call of hers that is running).
    let held = quotas.call("alice").await.unwrap();
    let quick = json!({"seconds": 0, "label": "quick"});
    let task = tasks
        .start(
            "alice",
            job(&registry, "test_slow_compute", quick),
            Vec::new(),
        )
        .await
        .unwrap();
    let id = &task.task_id;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = tasks.get("alice", id, Caller::anything()).await.unwrap();
    assert_eq!(
        waiting.status(),
        TaskStatus::Working,
        "it waits for the slot"
    );
    // Bob's slots are his own.
    assert!(quotas.call("bob").await.is_ok());
    drop(held);
    until(&tasks, "alice", id, TaskStatus::Completed).await;

    // While a task runs, it holds the slot: no other call of Alice's fits.
    let slow = json!({"seconds": 2, "label": "slow"});
    let task = tasks
        .start(
            "alice",
            job(&registry, "test_slow_compute", slow),
            Vec::new(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        quotas.call("alice").await.is_err(),
        "the running task holds it"
    );
    tasks.cancel("alice", &task.task_id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        quotas.call("alice").await.is_ok(),
        "a cancelled task gives it back"
    );
}

#[tokio::test]
async fn a_replica_sharing_the_records_answers_for_a_task_another_began() {
    let registry = registry();
    let records: Arc<dyn TaskRecords> = Arc::new(Memory::default());
    let (here, there) = (
        tasks_kept_in(&registry, records.clone()),
        tasks_kept_in(&registry, records),
    );
    let task = asking(&here, &registry).await;
    let id = &task.task_id;
    until(&there, "alice", id, TaskStatus::InputRequired).await;
    assert!(there.get("bob", id, Caller::anything()).await.is_err());

    // Answered there, it runs there, and here reads the result.
    let answers = both_answers();
    there
        .update("alice", id, &answers, Caller::anything())
        .await
        .unwrap();
    let done = until(&here, "alice", id, TaskStatus::Completed).await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada likes teal.");
}

/// A store that cannot be asked now (Redis down).
struct Unreachable;

#[async_trait::async_trait]
impl TaskRecords for Unreachable {
    async fn create(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: Duration,
        _: Bounds,
    ) -> Result<bool, StoreError> {
        Err(StoreError::Unreachable("no answer".into()))
    }

    async fn load(&self, _: &str) -> Result<Option<Stored>, StoreError> {
        Err(StoreError::Unreachable("no answer".into()))
    }

    async fn replace(&self, _: &str, _: u64, _: &str) -> Result<bool, StoreError> {
        Err(StoreError::Unreachable("no answer".into()))
    }
}

#[tokio::test]
async fn a_store_that_cannot_be_reached_refuses_tasks_and_says_to_retry() {
    let registry = registry();
    let tasks = tasks_kept_in(&registry, Arc::new(Unreachable));
    let job = job(
        &registry,
        "test_slow_compute",
        json!({"seconds": 0, "label": "x"}),
    );
    let refused = tasks.start("alice", job, Vec::new()).await.unwrap_err();
    assert!(
        refused.message.contains("try again in a moment"),
        "{}",
        refused.message
    );
    assert_eq!(refused.data, Some(json!({"retryable": true})));
    let unknown = tasks
        .get("alice", "t1", Caller::anything())
        .await
        .unwrap_err();
    assert_eq!(
        unknown.data,
        Some(json!({"retryable": true})),
        "{}",
        unknown.message
    );
}
