//! Tasks (`io.modelcontextprotocol/tasks`) of the `conformance` plugin's fixtures, through moat's
//! task store: each run a fresh instance, questions answered through updates (all of a round
//! before the tool runs again), cancellation that stops the guest, and tasks that belong to the
//! principal that started them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moat::access::quotas::{Quota, Quotas};
use moat::mcp::tasks::{Job, MAX_TASKS_PER_PRINCIPAL, Tasks};
use moat::plugin::registry::Registry;
use moat_tests::{engine, plugins, source};
use rmcp::model::{DetailedTask, TaskStatus};
use serde_json::{Value, json};

fn registry() -> Arc<Registry> {
    let (registry, errors) =
        Registry::load(engine(), &[source("test", plugins::CONFORMANCE)]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    Arc::new(registry)
}

/// Tasks that run again on `registry`, under no quota.
fn tasks_on(registry: &Arc<Registry>) -> Arc<Tasks> {
    let (_, serving) = tokio::sync::watch::channel(registry.clone());
    Arc::new(Tasks::new(Arc::default(), serving))
}

fn job(registry: &Arc<Registry>, tool: &str, arguments: Value) -> Job {
    Job {
        registry: registry.clone(),
        tool: tool.into(),
        arguments: arguments.as_object().cloned(),
        capabilities: serde_json::from_value(json!({"elicitation": {}})).unwrap(),
        credentials: None,
    }
}

/// The task once its status is `status`, failing after ten seconds.
async fn until(tasks: &Arc<Tasks>, principal: &str, id: &str, status: TaskStatus) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let task: DetailedTask = tasks.get(principal, id, None).await.unwrap();
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
            .get("bob", id, None)
            .await
            .unwrap_err()
            .message
            .contains("unknown task")
    );
    assert!(tasks.cancel("bob", id).await.is_err());
    assert!(
        tasks
            .update("bob", id, &Default::default(), None)
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
    let task = tasks
        .start(
            "alice",
            job(&registry, "test_multi_input", json!({})),
            Vec::new(),
        )
        .await
        .unwrap();
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
        .update("alice", id, &partial.into_iter().collect(), None)
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
            None,
        )
        .await
        .unwrap();
    let done = until(&tasks, "alice", id, TaskStatus::Completed).await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada likes teal.");
    assert!(
        tasks
            .update("alice", id, &Default::default(), None)
            .await
            .is_err(),
        "nothing is pending"
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
    let tasks = Arc::new(Tasks::new(quotas.clone(), serving));
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
    let waiting = tasks.get("alice", id, None).await.unwrap();
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
