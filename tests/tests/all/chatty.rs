//! The `chatty` test plugin: log and progress events, panics, deadlines, concurrency, and guest
//! output.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use moat::plugin::Plugin;
use moat::sandbox::host::{GuestEvent, Level};
use moat::sandbox::limits::Limits;
use moat_tests::{call, load, load_with, plugins, structured, text, try_call};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The deadline and output limit of [`strict`].
const DEADLINE: Duration = Duration::from_millis(200);
const MAX_OUTPUT: usize = 1024;

/// `chatty` with the default limits, compiled once for all these tests.
fn chatty() -> Arc<Plugin> {
    static CHATTY: OnceLock<Arc<Plugin>> = OnceLock::new();
    CHATTY
        .get_or_init(|| load("chatty", plugins::CHATTY))
        .clone()
}

/// `chatty` with a short deadline and a small output limit, compiled once for all these tests.
fn strict() -> Arc<Plugin> {
    static STRICT: OnceLock<Arc<Plugin>> = OnceLock::new();
    STRICT
        .get_or_init(|| {
            let limits = Limits {
                deadline: DEADLINE,
                max_output_bytes: MAX_OUTPUT,
                ..Limits::default()
            };
            load_with("chatty", plugins::CHATTY, limits)
        })
        .clone()
}

/// Calls `tool` with an event sink and returns the result and every event the guest sent.
async fn call_with_events(
    plugin: &Plugin,
    tool: &str,
    args: Value,
) -> (Result<CallToolResult, String>, Vec<GuestEvent>) {
    let tool = plugin
        .tools
        .iter()
        .find(|t| t.name == tool)
        .unwrap_or_else(|| panic!("chatty has no tool {tool}"));
    let Value::Object(args) = args else {
        panic!("arguments must be an object");
    };
    // Roomy enough that no test's events are dropped for a full queue.
    let (sender, mut receiver) = mpsc::channel(1 << 16);
    let result = plugin
        .call(tool, Some(&args), Some(sender))
        .await
        .map_err(|e| e.to_string());
    // The store, and with it the sender, is gone once the call returns: the channel is closed.
    let mut events = Vec::new();
    while let Some(event) = receiver.recv().await {
        events.push(event);
    }
    (result, events)
}

#[tokio::test]
async fn a_panic_is_a_failed_call_that_names_the_panic() {
    let chatty = chatty();
    let error = try_call(
        &chatty,
        "chatty_crash",
        json!({"message": "the sky is falling"}),
    )
    .await
    .expect_err("a panicking tool must fail");
    assert!(error.contains("crashed"), "{error}");
    assert!(error.contains("the sky is falling"), "{error}");
    // The plugin is not poisoned: every call has its own instance.
    let result = call(&chatty, "chatty_nap", json!({"ms": 0})).await;
    assert_eq!(structured(&result), &json!({"value": 0}));
}

#[tokio::test]
async fn a_busy_loop_is_stopped_at_the_deadline() {
    let strict = strict();
    let started = Instant::now();
    let error = try_call(&strict, "chatty_spin", json!({}))
        .await
        .expect_err("an endless loop must be stopped");
    let elapsed = started.elapsed();
    assert!(error.contains("deadline"), "{error}");
    assert!(
        elapsed >= DEADLINE,
        "stopped after {elapsed:?}, before its deadline"
    );
    assert!(
        elapsed < DEADLINE + Duration::from_secs(2),
        "stopped only after {elapsed:?}"
    );
    // The same plugin serves the next call as usual.
    let result = call(
        &strict,
        "chatty_log_levels",
        json!({"message": "still here"}),
    )
    .await;
    assert_eq!(structured(&result), &json!({"value": 5}));
}

#[tokio::test]
async fn a_sleep_past_the_deadline_is_stopped_at_the_deadline() {
    let strict = strict();
    let started = Instant::now();
    let error = try_call(&strict, "chatty_nap", json!({"ms": 2_000}))
        .await
        .expect_err("a call that outlives its deadline must fail");
    let elapsed = started.elapsed();
    assert!(error.contains("deadline"), "{error}");
    assert!(
        elapsed < DEADLINE + Duration::from_secs(1),
        "stopped only after {elapsed:?}"
    );
}

#[tokio::test]
async fn calls_of_one_plugin_run_side_by_side() {
    let chatty = chatty();
    let nap = Duration::from_millis(200);
    let calls = 10;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let chatty = chatty.clone();
        set.spawn(async move { call(&chatty, "chatty_nap", json!({"ms": 200})).await });
    }
    while let Some(result) = set.join_next().await {
        assert_eq!(structured(&result.unwrap()), &json!({"value": 200}));
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < nap * calls / 2,
        "{calls} naps of {nap:?} took {elapsed:?}: they ran one after another"
    );
}

#[tokio::test]
async fn log_messages_reach_the_event_sink_in_order() {
    let chatty = chatty();
    let (result, events) =
        call_with_events(&chatty, "chatty_log_levels", json!({"message": "héllo ✓"})).await;
    assert_eq!(structured(&result.unwrap()), &json!({"value": 5}));
    let expected: Vec<GuestEvent> = [
        Level::Debug,
        Level::Info,
        Level::Notice,
        Level::Warning,
        Level::Error,
    ]
    .into_iter()
    .map(|level| GuestEvent::Log {
        level,
        message: "héllo ✓".into(),
    })
    .collect();
    assert_eq!(events, expected);
}

#[tokio::test]
async fn long_log_messages_are_cut() {
    let chatty = chatty();
    let long = "x".repeat(100_000);
    let (result, events) =
        call_with_events(&chatty, "chatty_log_levels", json!({"message": long})).await;
    result.unwrap();
    assert_eq!(events.len(), 5);
    for event in events {
        let GuestEvent::Log { message, .. } = event else {
            panic!("not a log event: {event:?}");
        };
        assert!(message.len() < 17 * 1024, "{} bytes", message.len());
        assert!(message.ends_with('…'), "the cut is not marked");
    }
}

#[tokio::test]
async fn progress_reports_reach_the_event_sink_in_order() {
    let chatty = chatty();
    let (result, events) =
        call_with_events(&chatty, "chatty_count", json!({"steps": 4, "pause": 0})).await;
    assert_eq!(structured(&result.unwrap()), &json!({"value": 4}));
    let expected: Vec<GuestEvent> = (1..=4)
        .map(|step| GuestEvent::Progress {
            progress: f64::from(step),
            total: Some(4.0),
            message: Some(format!("step {step} of 4")),
        })
        .collect();
    assert_eq!(events, expected);
}

#[tokio::test]
async fn events_sent_before_the_deadline_are_kept() {
    let strict = strict();
    // Far more reports than fit in the deadline, without a pause: the guest reports until it is
    // stopped.
    let (result, events) = call_with_events(
        &strict,
        "chatty_count",
        json!({"steps": u32::MAX, "pause": 0}),
    )
    .await;
    let error = result.expect_err("the call outlives its deadline");
    assert!(error.contains("deadline"), "{error}");
    assert!(!events.is_empty());
    for (n, event) in events.iter().enumerate() {
        let GuestEvent::Progress {
            progress, total, ..
        } = event
        else {
            panic!("not a progress event: {event:?}");
        };
        assert_eq!(*progress, (n + 1) as f64);
        assert_eq!(*total, Some(f64::from(u32::MAX)));
    }
}

#[tokio::test]
async fn stderr_before_a_crash_is_in_the_error() {
    let chatty = chatty();
    // The panic message goes to the guest's stderr, which moat captures and quotes.
    let error = try_call(
        &chatty,
        "chatty_crash",
        json!({"message": "quoted from stderr"}),
    )
    .await
    .unwrap_err();
    assert!(error.contains("its last output"), "{error}");
    assert!(error.contains("panicked at"), "{error}");
}

#[tokio::test]
async fn an_output_flood_is_cut_off() {
    let strict = strict();
    let flood = "y".repeat(64 * MAX_OUTPUT);
    let error = try_call(&strict, "chatty_shout", json!({"out": flood, "err": ""}))
        .await
        .expect_err("writing past the output limit must fail");
    // The guest's write to stdout is what failed (its `expect` panics), with the closed pipe.
    assert!(error.contains("crashed"), "{error}");
    assert!(error.contains("writing stdout: "), "{error}");
    assert!(error.contains("Broken pipe"), "{error}");
    // Within the limit, the same tool succeeds.
    let result = call(&strict, "chatty_shout", json!({"out": "ok", "err": "ok"})).await;
    assert_eq!(text(&result), "done");
}

/// Marks guest output in [`guest_output_is_not_printed`].
const MARKER: &str = "chatty-marker-4f1c";

/// Run by [`guest_output_is_not_printed`] in a child process whose stdout and stderr it reads;
/// does nothing otherwise.
#[tokio::test]
async fn guest_output_child() {
    if std::env::var_os("MOAT_TESTS_GUEST_OUTPUT_CHILD").is_none() {
        return;
    }
    let chatty = chatty();
    let result = call(
        &chatty,
        "chatty_shout",
        json!({"out": format!("{MARKER} out\n"), "err": format!("{MARKER} err\n")}),
    )
    .await;
    assert_eq!(text(&result), "done");
    println!("child done");
}

#[test]
fn guest_output_is_not_printed() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "chatty::guest_output_child", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("MOAT_TESTS_GUEST_OUTPUT_CHILD", "1")
        .output()
        .expect("running the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("child done"),
        "the child did not run:\n{stdout}"
    );
    assert!(
        !stdout.contains(MARKER),
        "guest output reached stdout:\n{stdout}"
    );
    assert!(
        !stderr.contains(MARKER),
        "guest output reached stderr:\n{stderr}"
    );
}
