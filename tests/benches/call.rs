//! The cost of one tool call, measured in-process, against wasmtime's own floor, side by side.
//!
//! * **moat**: `Plugin::call` on `echo_echo`: JSON arguments checked and converted, a fresh
//!   instance with its limits (deadline, memory cap, output capture), the call, the result
//!   rendered as MCP content.
//! * **floor**: the same component on the same engine, called the leanest way wasmtime allows:
//!   a store holding only an empty WASI context, `InstancePre::instantiate_async`, the call; no
//!   limits, no output capture, no conversion.
//!
//! A second table measures a CPU-heavy call (`text_hash`, sha256 of 1 MiB) through moat against the
//! floor on an engine with epoch interruption switched off: what the deadline machinery costs
//! while a guest computes.
//!
//! A third set of tables measures what fuel metering costs a plugin that has no fuel limit once
//! some other plugin's limit turned metering on for the whole engine: the same calls on moat's
//! engine with and without `consume_fuel`.
//!
//! Run with `cargo bench -p moat-tests --bench call` (not part of `./dev bench`, which runs the
//! harness in `tests/perf/`); `MOAT_BENCH_CALLS` sets the number of calls per measurement
//! (default 20000).

use std::time::{Duration, Instant};

use moat::plugin::Plugin;
use moat::plugin::registry::Registry;
use moat::supply::PluginSource;
use moat_tests::floor::Floor;
use moat_tests::{engine, load, plugins};
use serde_json::json;
use wasmtime::component::Val;

fn main() {
    let calls: usize = std::env::var("MOAT_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let plugin = load("echo", plugins::ECHO);
    let tool = plugin.tools.iter().find(|t| t.name == "echo_echo").unwrap();
    let args = json!({"message": "hello, moat"});
    let args = args.as_object().unwrap();

    let floor = Floor::load(engine(), plugins::ECHO.as_ref(), None, "echo").unwrap();
    let message = [Val::String("hello, moat".into())];
    let floor = || async {
        floor.call(&message).await.unwrap();
    };
    let moat = || async {
        plugin.call(tool, Some(args), None).await.unwrap();
    };

    runtime.block_on(compare(
        &format!("echo, {calls} calls"),
        "moat / floor",
        calls,
        ("wasmtime floor", floor),
        ("moat `Plugin::call`", moat),
    ));
    runtime.block_on(hash_without_epochs(calls / 100));
    runtime.block_on(fuel_metering(calls));
}

/// `echo_echo`, and sha256 and statistics of 1 MiB, on moat's engine, and on the same engine with fuel metering
/// (the plugins themselves have no fuel limit), interleaved.
async fn fuel_metering(calls: usize) {
    let metering = moat::sandbox::engine::new_engine_with_fuel(true).unwrap();
    let load_on = |engine: &wasmtime::Engine, name: &str, path: &str| -> std::sync::Arc<Plugin> {
        let source = PluginSource {
            name: name.into(),
            source: moat::supply::source::Source::File(path.into()),
            limits: Default::default(),
            grants: Default::default(),
            tools: Default::default(),
        };
        Registry::load(engine, &[source]).unwrap().0.plugins()[0].clone()
    };
    let text = "moat ".repeat(1 << 18);
    let cases = [
        (
            "echo",
            plugins::ECHO,
            "echo_echo",
            json!({"message": "hello, moat"}),
            calls,
        ),
        (
            "text",
            plugins::TEXT,
            "text_hash",
            json!({"text": text, "algorithm": "sha256"}),
            (calls / 100).max(20),
        ),
        // Branchy code, unlike sha256's long straight runs: counting characters, words and lines.
        (
            "text",
            plugins::TEXT,
            "text_stats",
            json!({"text": text}),
            (calls / 100).max(20),
        ),
    ];
    for (name, path, tool, args, calls) in cases {
        let plain = load_on(engine(), name, path);
        let fueled = load_on(&metering, name, path);
        let args = args.as_object().unwrap();
        let call = |plugin: &std::sync::Arc<Plugin>| {
            let plugin = plugin.clone();
            async move {
                let tool = plugin.tools.iter().find(|t| t.name == tool).unwrap();
                plugin.call(tool, Some(args), None).await.unwrap();
            }
        };
        println!();
        compare(
            &format!("`{tool}`, {calls} calls"),
            "metered / unmetered",
            calls,
            ("moat, no fuel metering", || call(&plain)),
            ("moat, fuel metering on", || call(&fueled)),
        )
        .await;
    }
}

/// sha256 of 1 MiB in the `text` plugin: moat (epochs on, all limits) vs a floor engine whose
/// epoch interruption is off, interleaved.
async fn hash_without_epochs(calls: usize) {
    let calls = calls.max(20);
    let text = "moat ".repeat(1 << 18);
    let plugin = load("text", plugins::TEXT);
    let tool = plugin.tools.iter().find(|t| t.name == "text_hash").unwrap();
    let args = json!({"text": text, "algorithm": "sha256"});
    let args = args.as_object().unwrap();

    let mut config = moat::sandbox::engine::config();
    config.epoch_interruption(false);
    let no_epochs = wasmtime::Engine::new(&config).unwrap();
    let floor = Floor::load(
        &no_epochs,
        plugins::TEXT.as_ref(),
        Some("moat:text/tools@0.1.0"),
        "hash",
    )
    .unwrap();
    let params = [
        Val::String(text.clone()),
        Val::Enum("sha256".into()),
        Val::Option(None),
    ];
    let floor = || async {
        floor.call(&params).await.unwrap();
    };
    let moat = || async {
        plugin.call(tool, Some(args), None).await.unwrap();
    };
    println!();
    compare(
        &format!("sha256 of 1 MiB, {calls} calls"),
        "moat / floor",
        calls,
        ("floor, epoch interruption off", floor),
        ("moat, deadline and limits on", moat),
    )
    .await;
}

/// Runs both paths `calls` times, interleaved so that drift on a shared machine hits both alike,
/// after a warm-up that pages in the pool's slots and the code; prints a markdown table.
async fn compare<F, FF, M, MF>(
    title: &str,
    ratio_label: &str,
    calls: usize,
    (floor_label, floor): (&str, F),
    (moat_label, moat): (&str, M),
) where
    F: Fn() -> FF,
    FF: Future<Output = ()>,
    M: Fn() -> MF,
    MF: Future<Output = ()>,
{
    for _ in 0..(calls / 10).max(3) {
        floor().await;
        moat().await;
    }
    let (mut floor_times, mut moat_times) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let start = Instant::now();
        floor().await;
        floor_times.push(start.elapsed());
        let start = Instant::now();
        moat().await;
        moat_times.push(start.elapsed());
    }
    let (floor, moat) = (Stats::of(floor_times), Stats::of(moat_times));
    println!("| {title} | p50 | p99 | mean |");
    println!("|---|---|---|---|");
    println!("| {floor_label} | {} |", floor.row());
    println!("| {moat_label} | {} |", moat.row());
    println!(
        "| ratio {ratio_label} | {:.2}× | {:.2}× | {:.2}× |",
        ratio(moat.p50, floor.p50),
        ratio(moat.p99, floor.p99),
        ratio(moat.mean, floor.mean)
    );
}

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

impl Stats {
    fn of(mut times: Vec<Duration>) -> Self {
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        Self {
            p50: at(0.50),
            p99: at(0.99),
            mean: times.iter().sum::<Duration>() / times.len() as u32,
        }
    }

    fn row(&self) -> String {
        format!(
            "{:.1} µs | {:.1} µs | {:.1} µs",
            micros(self.p50),
            micros(self.p99),
            micros(self.mean)
        )
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
