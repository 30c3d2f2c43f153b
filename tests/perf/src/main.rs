//! `moat-perf`: moat against its baselines, measured side by side in one run.
//!
//! * **P1** stdio `tools/call` round trip of `echo`: moat vs `native-echo` (the same tool written
//!   in plain Rust on rmcp) and the same tool on the official TypeScript and Python SDKs
//!   (`ts-sdk-echo`, `py-sdk-echo`, in `baselines/`), one client, the servers' calls interleaved.
//! * **P2** Streamable HTTP calls per second with 64 concurrent sessions: moat vs `native-echo`,
//!   and vs the TypeScript and Python SDKs' own Streamable HTTP servers (the same baselines run
//!   with `--http`), rounds alternating.
//! * **P3** (`startup`) time from process start to the first `tools/list` answer, 1 and 50
//!   plugins, with an empty compile cache (cold) and a filled one (warm); the three echo
//!   baselines' beside it. Cold starts also to every plugin's first answer and to optimized code.
//! * **P4** moat's resident memory with 50 plugins, idle and at its peak under 64 concurrent calls.
//! * **P5** a CPU-heavy call (sha256 of 8 MiB) in moat vs the same component in a bare wasmtime
//!   embedding (the engine's floor), and vs native code.
//! * **P6**, **P7** (`service`): authentication's cost, and quotas keeping callers apart.
//! * **P8** (`asking`): a 2026-07-28 call that asks the client one question (both rounds:
//!   `input_required`, then the answered call replaying the guest) against one plain call.
//! * **P9** (`guests`): the echo plugin built by componentize-js and by componentize-py: cold
//!   start to the first answer, a warm call against moat's Rust echo, resident memory.
//! * **P10**, **P11** (`cluster`): what `[cluster]` costs one replica (a rate quota decided in
//!   Redis against one kept in process), and calls per second through haproxy to 1, 2 and 3
//!   replicas sharing one Redis, with the Redis commands a call costs.
//! * **P12** (`sdk_server`): an MCP server written with the TypeScript SDK, built by `moat build`
//!   and served by moat, beside the same server on Node over stdio: a start to the first answer
//!   (compile cache filled), a warm call, resident memory.
//! * **P13** (`policies`): P2's load with every call decided by 20 Cedar policies, against none.
//! * **P14** (`console`): P2's load on a moat with `[console]` and one operator watching the calls
//!   live (`/console/live/events`), against the same moat without `[console]`.
//!
//! Prints a markdown table and writes the figures as JSON. Targets are reported, never enforced:
//! the run fails only when something breaks (a server does not start, an answer is wrong). A
//! figure that only moat's log can give is reported missing when the log does not give it.

mod asking;
mod cluster;
mod console;
mod guests;
mod http;
mod logwatch;
mod native;
mod policies;
mod procfs;
mod report;
mod sdk_server;
mod service;
mod startup;
mod stats;
mod stdio;
mod watchdog;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use moat_tests::floor::Floor;
use serde_json::{Value, json};
use wasmtime::component::Val;

use crate::http::{HttpServer, HttpSession, free_addr, load};
use crate::procfs::{memory, mib, reset_peak};
use crate::report::{JUDGED, Row, Target, machine, machine_line, table};
use crate::stats::{Stats, interleaved, median, micros, millis};
use crate::stdio::StdioServer;

/// Benchmarks moat against a native MCP server and a bare wasmtime embedding.
#[derive(Parser)]
struct Cli {
    /// Few iterations, for CI: checks that everything runs and answers right; figures are rough.
    #[arg(long)]
    quick: bool,
    /// The moat binary (a release build).
    #[arg(long, default_value = "target/release/moat")]
    moat: PathBuf,
    /// The native baseline server; default: `native-echo` next to this binary.
    #[arg(long)]
    native: Option<PathBuf>,
    /// The Node.js that runs the ts-sdk-echo baseline (which finds the SDK in tests/npm).
    #[arg(long, default_value = "tests/npm/node_modules/.bin/node")]
    node: PathBuf,
    /// The Python, with the `mcp` SDK installed, that runs the py-sdk-echo baseline.
    #[arg(long, default_value = ".venv/bin/python")]
    python: PathBuf,
    /// The folder holding the SDK baselines' scripts, ts_echo.mjs and py_echo.py.
    #[arg(long, default_value = "tests/perf/baselines")]
    baselines: PathBuf,
    /// The folder holding echo.wasm, text.wasm, time.wasm and burn.wasm.
    #[arg(long, default_value = "target/wasm-plugins/wasm32-wasip2/release")]
    plugins: PathBuf,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/bench/results.json")]
    out: PathBuf,
    /// Give up (stopping the servers) after this many seconds; default 300 with --quick, else 1800.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// How long moat may take after a cold start to log that every plugin runs optimized code;
    /// default 60 with --quick, else 120.
    #[arg(long, value_name = "SECONDS")]
    optimized_timeout: Option<u64>,
    /// Plugins built by other toolchains, each an echo whose tool is `{file stem}_echo`
    /// (`target/js-plugins/echo_js.wasm,target/py-plugins/echo_py.wasm`), for P9.
    #[arg(long, value_delimiter = ',')]
    guests: Vec<PathBuf>,
    /// An MCP server project written with the TypeScript SDK, built by `moat build` (its
    /// build/NAME.wasm) and run from its server.ts on Node, for P12 (`tests/ts-sdk/compute`).
    #[arg(long, value_name = "DIR")]
    sdk_server: Option<PathBuf>,
    /// Run only these measurements (e.g. `--only P1,P3`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// How much of each measurement to do.
struct Settings {
    /// The quick mode: P9 keeps Winch's code rather than compile 30 MB with Cranelift ahead.
    quick: bool,
    stdio_calls: usize,
    http_rounds: usize,
    http_round: Duration,
    cold_starts: usize,
    /// Compiling 50 plugins takes most of a minute on two cores: too long for CI.
    cold_many: bool,
    /// The plugins the 50 are copies of, in turn.
    many_kinds: &'static [&'static str],
    warm_starts: usize,
    /// How long a cold start's optimized code may take to be in use.
    optimized_wait: Duration,
    memory_load: Duration,
    hash_calls: usize,
}

impl Settings {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                stdio_calls: 300,
                http_rounds: 1,
                http_round: Duration::from_millis(700),
                cold_starts: 1,
                cold_many: false,
                // Small ones only: even a warm start must first fill the cache.
                many_kinds: &["echo"],
                warm_starts: 2,
                // A debug build's Cranelift is slow.
                optimized_wait: Duration::from_secs(60),
                memory_load: Duration::from_millis(700),
                hash_calls: 3,
            }
        } else {
            Self {
                quick,
                stdio_calls: 10_000,
                http_rounds: 3,
                http_round: Duration::from_secs(3),
                cold_starts: 3,
                cold_many: true,
                many_kinds: &["echo", "text", "time"],
                warm_starts: 9,
                optimized_wait: Duration::from_secs(120),
                memory_load: Duration::from_secs(3),
                hash_calls: 20,
            }
        }
    }
}

/// Concurrent clients for the HTTP and memory measurements.
const CLIENTS: usize = 64;
/// Plugins in the large configuration.
const MANY_PLUGINS: usize = 50;
/// MiB hashed by the CPU-heavy call.
const HASH_MIB: u32 = 8;
const MESSAGE: &str = "hello, moat";

/// One of the measurements.
type Step = fn(&mut Bench) -> Result<()>;

/// A plugin as the generated configs name it.
#[derive(Clone)]
struct Plugin {
    name: String,
    /// The bundled plugin it is, or is a copy of.
    kind: &'static str,
    /// Absolute.
    path: PathBuf,
}

/// A server offering the `echo_echo` tool of moat's `echo` plugin over stdio (and, given
/// `--http ADDRESS`, over Streamable HTTP), with the same input schema and result, that moat's
/// round trip, start-up and throughput are compared with.
struct Baseline {
    name: &'static str,
    program: PathBuf,
    script: Option<PathBuf>,
    /// What moat's P1 p50 and p99 should be against this server's.
    round_trip: [Target; 2],
}

impl Baseline {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.script);
        command
    }
}

struct Bench {
    moat: PathBuf,
    native: PathBuf,
    /// `native-echo` first: the floor.
    baselines: Vec<Baseline>,
    plugins: PathBuf,
    settings: Settings,
    /// Generated configs, compile caches and server logs.
    work: PathBuf,
    runtime: tokio::runtime::Runtime,
    /// The measurements to run, by id; all when empty.
    only: Vec<String>,
    rows: Vec<Row>,
    /// What the run could not measure, printed under the table.
    notes: Vec<String>,
    /// The plugins in the warm compile cache, by path.
    warmed: HashSet<PathBuf>,
    /// The other toolchains' echo plugins P9 measures.
    guests: Vec<PathBuf>,
    /// The TypeScript SDK server P12 measures.
    sdk_server: Option<PathBuf>,
    /// Whether moat logs when a plugin's optimized code is in use; unknown until a cold start.
    swap_logged: Option<bool>,
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("moat-perf: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let native = match cli.native {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("native-echo"),
    };
    for path in [&cli.moat, &native] {
        ensure!(
            path.is_file(),
            "{} not found; build it first (`./dev bench` does)",
            path.display()
        );
    }
    let baselines = vec![
        Baseline {
            name: "native-echo",
            program: native.clone(),
            script: None,
            round_trip: [Target::RatioAtMost(1.1), Target::RatioAtMost(1.1)],
        },
        Baseline {
            name: "ts-sdk-echo",
            program: cli.node,
            script: Some(cli.baselines.join("ts_echo.mjs")),
            round_trip: [Target::RatioAtMost(1.0), Target::None],
        },
        Baseline {
            name: "py-sdk-echo",
            program: cli.python,
            script: Some(cli.baselines.join("py_echo.py")),
            round_trip: [Target::None, Target::None],
        },
    ];
    let selected =
        |id: &str| cli.only.is_empty() || cli.only.iter().any(|o| o.eq_ignore_ascii_case(id));
    if selected("P1") || selected("P3") {
        for baseline in &baselines {
            for path in [Some(&baseline.program), baseline.script.as_ref()]
                .into_iter()
                .flatten()
            {
                ensure!(
                    path.is_file(),
                    "{} not found (for {}); `./dev bench` installs it",
                    path.display(),
                    baseline.name
                );
            }
        }
    }
    for plugin in ["echo", "text", "time", "burn"] {
        let path = cli.plugins.join(format!("{plugin}.wasm"));
        ensure!(
            path.is_file(),
            "{} not found; build the plugins first",
            path.display()
        );
    }
    let default_timeout = if cli.quick { 300 } else { 1800 };
    watchdog::start(Duration::from_secs(cli.timeout.unwrap_or(default_timeout)));
    let work = std::env::temp_dir().join(format!("moat-perf-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    http::write_token_file(&work.join("http-token"))?;
    let mut settings = Settings::new(cli.quick);
    if let Some(seconds) = cli.optimized_timeout {
        settings.optimized_wait = Duration::from_secs(seconds);
    }
    let mut bench = Bench {
        moat: cli.moat,
        native,
        baselines,
        plugins: cli.plugins,
        settings,
        work: work.clone(),
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        only: cli.only,
        rows: Vec::new(),
        notes: Vec::new(),
        warmed: HashSet::new(),
        guests: cli.guests,
        sdk_server: cli.sdk_server,
        swap_logged: None,
    };
    // A failed run keeps its configs and server logs for a look.
    if let Err(error) = bench.run_all() {
        return Err(error.context(format!(
            "server logs and configs kept in {}",
            work.display()
        )));
    }
    let _ = std::fs::remove_dir_all(&work);

    let machine = machine();
    println!("\n{}\n", machine_line(&machine));
    print!("{}", table(&bench.rows));
    for note in &bench.notes {
        println!("\nnote: {note}");
    }
    if !JUDGED {
        println!(
            "\na debug build: these figures show that each measurement runs, not how fast moat is"
        );
    }
    let report = json!({
        "mode": if cli.quick { "quick" } else { "full" },
        "build": if JUDGED { "release" } else { "debug" },
        "machine": machine,
        "results": bench.rows.iter().map(Row::json).collect::<Vec<_>>(),
        "notes": bench.notes,
    });
    if let Some(dir) = cli.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&cli.out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", cli.out.display()))?;
    println!("\nwrote {}", cli.out.display());
    Ok(())
}

impl Bench {
    fn run_all(&mut self) -> Result<()> {
        // P3 first: it fills the warm compile cache the others start from.
        let steps: [(&str, &str, Step); 14] = [
            ("P3", "start-up", Self::startup),
            ("P1", "stdio round trip", Self::stdio_round_trip),
            ("P2", "HTTP throughput", Self::http_throughput),
            ("P4", "memory", Self::memory),
            ("P5", "CPU-heavy call", Self::cpu_heavy),
            ("P6", "authentication cost", Self::auth_throughput),
            ("P7", "quota isolation", Self::quota_isolation),
            ("P8", "a question to the client", Self::asking_round_trip),
            (
                "P9",
                "plugins in JavaScript and Python",
                Self::guest_languages,
            ),
            ("P10", "the cost of [cluster]", Self::cluster_cost),
            ("P11", "replicas behind haproxy", Self::replicas_throughput),
            ("P12", "a TypeScript SDK server", Self::sdk_server),
            ("P13", "Cedar policies", Self::policy_cost),
            ("P14", "the console", Self::console_cost),
        ];
        for (id, name, step) in steps {
            if self.only.is_empty() || self.only.iter().any(|o| o.eq_ignore_ascii_case(id)) {
                eprintln!("moat-perf: {id}, {name}…");
                step(self).with_context(|| format!("{id}, {name}"))?;
            }
        }
        Ok(())
    }

    fn plugin(&self, name: &str) -> PathBuf {
        self.plugins.join(format!("{name}.wasm"))
    }

    /// The compile cache shared by every warm start.
    fn warm_cache(&self) -> PathBuf {
        self.work.join("cache-warm")
    }

    fn moat_command(&self, args: &[&str], cache: &Path) -> Command {
        let mut command = Command::new(&self.moat);
        command
            .args(args)
            .env("MOAT_CACHE_DIR", cache)
            .env("MOAT_TOKEN_FILE", self.work.join("http-token"));
        command
    }

    fn log(&self, name: &str) -> PathBuf {
        self.work.join(format!("{name}.log"))
    }

    /// A bundled plugin under its own name.
    fn bundled(&self, kind: &'static str) -> Result<Plugin> {
        Ok(Plugin {
            name: kind.to_string(),
            kind,
            path: self.plugin(kind).canonicalize()?,
        })
    }

    /// A moat.toml serving `count` plugins: copies of the bundled ones in turn (echo only in quick
    /// mode), under numbered names. Each copy differs from the others by a custom section, so
    /// that each is a component of its own to compile and cache, as `count` different plugins
    /// would be.
    fn config(&self, count: usize) -> Result<(String, Vec<Plugin>)> {
        let mut plugins = Vec::new();
        for i in 0..count {
            let kinds = self.settings.many_kinds;
            let kind = kinds[i % kinds.len()];
            plugins.push(if count == 1 {
                self.bundled(kind)?
            } else {
                let name = format!("{kind}{:02}", i + 1);
                let mut wasm = std::fs::read(self.plugin(kind))?;
                wasm.extend(custom_section("moat-perf-copy", name.as_bytes()));
                let path = std::path::absolute(self.work.join(format!("{name}.wasm")))?;
                std::fs::write(&path, wasm)?;
                Plugin { name, kind, path }
            });
        }
        let config = self.write_config(&format!("moat-{count}.toml"), &plugins)?;
        Ok((config, plugins))
    }

    /// Writes a moat.toml serving `plugins`; its path.
    fn write_config(&self, file: &str, plugins: &[Plugin]) -> Result<String> {
        let mut text = String::new();
        for Plugin { name, path, .. } in plugins {
            text.push_str(&format!("[plugins.{name}]\npath = {path:?}\n\n"));
        }
        let path = self.work.join(file);
        std::fs::write(&path, text)?;
        Ok(path
            .to_str()
            .context("a non-UTF-8 temp folder")?
            .to_string())
    }

    /// P1: stdio round trips of `echo`, moat's and every baseline's calls interleaved.
    fn stdio_round_trip(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let echo = self.plugin("echo");
        let echo = echo.to_str().context("a non-UTF-8 path")?;
        let mut servers = vec![StdioServer::spawn(
            self.moat_command(&["serve", echo], &self.warm_cache()),
            &self.log("moat-stdio"),
        )?];
        for baseline in &self.baselines {
            let log = self.log(&format!("{}-stdio", baseline.name));
            servers.push(StdioServer::spawn(baseline.command(), &log)?);
        }
        let mut schemas = Vec::new();
        for server in &mut servers {
            server.initialize()?;
            let tools = server.list_tools()?;
            let tool = echo_tool(&tools)?;
            schemas.push((tool["inputSchema"].clone(), tool["outputSchema"].clone()));
        }
        for (baseline, schema) in self.baselines.iter().zip(&schemas[1..]) {
            ensure!(
                *schema == schemas[0],
                "moat's and {}'s echo_echo differ: {:?} against {schema:?}",
                baseline.name,
                schemas[0]
            );
        }

        // Pair by pair: moat and one baseline, their calls interleaved. With more servers in
        // turn each waits longer between its calls, which flatters moat against a fast floor
        // (native-echo: 41 µs paired, 100 µs among four).
        let calls = self.settings.stdio_calls;
        let (moat, baselines) = servers.split_first_mut().expect("moat is served");
        for (baseline, theirs) in self.baselines.iter().zip(baselines) {
            let [ours, theirs] = interleaved(calls, |which| {
                let server = if which == 0 { &mut *moat } else { &mut *theirs };
                let start = Instant::now();
                let result = server.call_tool("echo_echo", json!({"message": MESSAGE}))?;
                let time = start.elapsed();
                check_echo(&result)?;
                Ok(time)
            })?;
            let [p50, p99] = baseline.round_trip;
            let count = ours.count;
            for (label, ours, theirs, target) in [
                ("p50", ours.p50, theirs.p50, p50),
                ("p99", ours.p99, theirs.p99, p99),
            ] {
                self.rows.push(Row {
                    id: "P1",
                    what: format!(
                        "stdio tools/call echo round trip, {label} ({count} calls each, paired)"
                    ),
                    unit: "µs",
                    moat: Some(micros(ours)),
                    baseline: Some((baseline.name, micros(theirs))),
                    target,
                });
            }
        }
        Ok(())
    }

    /// P2: calls per second over Streamable HTTP with [`CLIENTS`] sessions, rounds alternating.
    fn http_throughput(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let echo = self.plugin("echo");
        let echo = echo.to_str().context("a non-UTF-8 path")?;
        let moat_addr = free_addr()?;
        let moat = HttpServer::spawn(
            self.moat_command(
                &["serve", "--http", &moat_addr.to_string(), echo],
                &self.warm_cache(),
            ),
            moat_addr,
            &self.log("moat-http"),
        )?;
        let native_addr = free_addr()?;
        let mut native = Command::new(&self.native);
        native.args(["--http", &native_addr.to_string()]);
        let native = HttpServer::spawn(native, native_addr, &self.log("native-http"))?;

        let tools = ["echo_echo".to_string()];
        let [moat_rate, native_rate] =
            self.alternate_rates([&moat, &native], http::TOKEN, &tools)?;
        self.rows.push(Row {
            id: "P2",
            what: format!(
                "HTTP tools/call echo, {CLIENTS} sessions, calls/s (median of {} rounds of {:?})",
                moat_rate.len(),
                self.settings.http_round
            ),
            unit: "calls/s",
            moat: Some(median(moat_rate)),
            baseline: Some(("native-echo", median(native_rate))),
            target: Target::RatioAtLeast(0.8),
        });
        drop(native);

        // What users would run instead: the official SDKs' own Streamable HTTP servers.
        for baseline in self.baselines.iter().filter(|b| b.script.is_some()) {
            let addr = free_addr()?;
            let mut command = baseline.command();
            command.args(["--http", &addr.to_string()]);
            let sdk =
                HttpServer::spawn(command, addr, &self.log(&format!("{}-http", baseline.name)))?;
            let [moat_rate, sdk_rate] = self.alternate_rates([&moat, &sdk], http::TOKEN, &tools)?;
            self.rows.push(Row {
                id: "P2",
                what: format!(
                    "HTTP tools/call echo, {CLIENTS} sessions, calls/s (median of {} rounds)",
                    moat_rate.len()
                ),
                unit: "calls/s",
                moat: Some(median(moat_rate)),
                baseline: Some((baseline.name, median(sdk_rate))),
                target: Target::RatioAtLeast(1.0),
            });
        }
        Ok(())
    }

    /// Calls per second of each of `servers` under [`load_as`], in rounds that alternate which
    /// goes first, so that drift on a shared machine hits both alike.
    fn alternate_rates(
        &self,
        servers: [&HttpServer; 2],
        token: &str,
        tools: &[String],
    ) -> Result<[Vec<f64>; 2]> {
        let mut rates = [Vec::new(), Vec::new()];
        for round in 0..self.settings.http_rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let server = servers[which];
                let load = self
                    .runtime
                    .block_on(http::load_as(
                        server.addr,
                        token,
                        CLIENTS,
                        tools,
                        self.settings.http_round,
                    ))
                    .with_context(|| server.died())?;
                rates[which].push(load.calls as f64 / load.elapsed.as_secs_f64());
            }
        }
        Ok(rates)
    }

    /// P4: moat's memory with 50 plugins, idle and under [`CLIENTS`] concurrent calls.
    fn memory(&mut self) -> Result<()> {
        let (config, plugins) = self.config(MANY_PLUGINS)?;
        self.fill_warm_cache(&plugins)?;
        let echo_tools: Vec<String> = plugins
            .iter()
            .filter(|p| p.kind == "echo")
            .map(|p| format!("{}_echo", p.name))
            .collect();
        let addr = free_addr()?;
        let moat = HttpServer::spawn(
            self.moat_command(
                &["serve", "--http", &addr.to_string(), "--config", &config],
                &self.warm_cache(),
            ),
            addr,
            &self.log("moat-memory"),
        )?;
        let (moat_idle, moat_peak) = self.idle_and_peak(&moat, &echo_tools, CLIENTS)?;

        let addr = free_addr()?;
        let mut native = Command::new(&self.native);
        native.args(["--http", &addr.to_string()]);
        let native = HttpServer::spawn(native, addr, &self.log("native-memory"))?;
        let (native_idle, native_peak) =
            self.idle_and_peak(&native, &["echo_echo".to_string()], CLIENTS)?;

        self.rows.push(Row {
            id: "P4",
            what: format!(
                "resident memory, idle, moat with {MANY_PLUGINS} plugins ({})",
                self.settings.many_kinds.join(", ")
            ),
            unit: "MiB",
            moat: Some(mib(moat_idle)),
            baseline: Some(("native-echo", mib(native_idle))),
            target: Target::AtMost(150.0),
        });
        self.rows.push(Row {
            id: "P4",
            what: format!("resident memory, peak − idle under {CLIENTS} concurrent calls"),
            unit: "MiB",
            moat: Some(mib(moat_peak.saturating_sub(moat_idle))),
            baseline: Some(("native-echo", mib(native_peak.saturating_sub(native_idle)))),
            target: Target::AtMost(64.0),
        });
        Ok(())
    }

    /// A server's resident memory once it has answered a list, and its peak under the load of
    /// `clients` sessions calling `tools`.
    pub(crate) fn idle_and_peak(
        &self,
        server: &HttpServer,
        tools: &[String],
        clients: usize,
    ) -> Result<(u64, u64)> {
        let pid = server.child.id();
        self.runtime.block_on(async {
            let mut session = HttpSession::open(server.addr).await?;
            session.request("tools/list", json!({})).await?;
            anyhow::Ok(())
        })?;
        std::thread::sleep(Duration::from_millis(300));
        let idle = memory(pid)?.rss;
        let peak_was_reset = reset_peak(pid);
        let sampled_peak = Arc::new(AtomicU64::new(idle));
        let sampler = {
            let sampled_peak = sampled_peak.clone();
            let duration = self.settings.memory_load + Duration::from_secs(1);
            std::thread::spawn(move || {
                let end = Instant::now() + duration;
                while Instant::now() < end {
                    if let Ok(m) = memory(pid) {
                        sampled_peak.fetch_max(m.rss, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        self.runtime
            .block_on(load(server.addr, clients, tools, self.settings.memory_load))
            .with_context(|| server.died())?;
        let after = memory(pid)?;
        let _ = sampler.join();
        let sampled = sampled_peak.load(Ordering::Relaxed).max(after.rss);
        let peak = if peak_was_reset {
            after.hwm.max(sampled)
        } else {
            sampled
        };
        Ok((idle, peak))
    }

    /// P5: sha256 of 8 MiB in moat (limits on), in a bare wasmtime embedding, and natively.
    fn cpu_heavy(&mut self) -> Result<()> {
        self.warm_bundled("burn")?;
        let burn = self.plugin("burn");
        let mut moat = StdioServer::spawn(
            self.moat_command(
                &["serve", burn.to_str().context("a non-UTF-8 path")?],
                &self.warm_cache(),
            ),
            &self.log("moat-burn"),
        )?;
        moat.initialize()?;
        // The floor runs on wasmtime's default engine: no epochs, no fuel, no limits, no pooling.
        let floor = Floor::load(&wasmtime::Engine::default(), &burn, None, "sha256")?;
        let expected = native::sha256(HASH_MIB);
        let params = [Val::U32(HASH_MIB)];

        let mut times: [Vec<Duration>; 3] = Default::default();
        let calls = self.settings.hash_calls;
        for i in 0..calls + 2 {
            let start = Instant::now();
            let result = moat.call_tool("burn_sha256", json!({"mib": HASH_MIB}))?;
            let moat_time = start.elapsed();
            ensure!(
                result["content"][0]["text"] == expected,
                "moat's sha256 is wrong: {result}"
            );
            let start = Instant::now();
            let digest = self.runtime.block_on(floor.call(&params))?;
            let floor_time = start.elapsed();
            ensure!(
                digest == Val::String(expected.clone()),
                "the floor's sha256 is wrong: {digest:?}"
            );
            let start = Instant::now();
            let digest = native::sha256(HASH_MIB);
            let native_time = start.elapsed();
            ensure!(digest == expected, "the native sha256 is wrong: {digest}");
            if i >= 2 {
                for (series, time) in times.iter_mut().zip([moat_time, floor_time, native_time]) {
                    series.push(time);
                }
            }
        }
        let [moat, floor, native] = times.map(|t| Stats::of(t).expect("calls were made"));
        self.rows.push(Row {
            id: "P5",
            what: format!("sha256 of {HASH_MIB} MiB in a tool, p50 ({calls} calls)"),
            unit: "ms",
            moat: Some(millis(moat.p50)),
            baseline: Some(("wasmtime floor", millis(floor.p50))),
            target: Target::RatioAtMost(1.1),
        });
        self.rows.push(Row {
            id: "P5",
            what: format!("sha256 of {HASH_MIB} MiB, moat vs native code, p50 (for information)"),
            unit: "ms",
            moat: Some(millis(moat.p50)),
            baseline: Some(("native Rust", millis(native.p50))),
            target: Target::None,
        });
        Ok(())
    }
}

/// A WebAssembly custom section (id 0): valid at the end of a component, ignored by the engine.
fn custom_section(name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend(name.as_bytes());
    body.extend(payload);
    let mut section = vec![0];
    leb128(body.len(), &mut section);
    section.extend(body);
    section
}

/// The `echo_echo` tool in a server's list.
pub(crate) fn echo_tool(tools: &[Value]) -> Result<&Value> {
    tools
        .iter()
        .find(|t| t["name"] == "echo_echo")
        .context("no echo_echo tool")
}

/// An echo result must carry the message as text, and nothing else (a string is text alone).
pub(crate) fn check_echo(result: &Value) -> Result<()> {
    if result["content"][0]["text"] != MESSAGE || !result["structuredContent"].is_null() {
        bail!("a wrong echo: {result}");
    }
    Ok(())
}
