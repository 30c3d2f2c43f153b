//! P12: an MCP server written with the TypeScript SDK (tests/ts-sdk/compute), as moat serves it
//! once `moat build` made it a component, beside the same server.ts on Node over stdio, which is
//! how its users run it today: a start to the first answer with moat's compile cache filled, a
//! warm call's round trip, and each process's resident memory after the calls.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::Bench;
use crate::procfs::{memory, mib};
use crate::report::{Row, Target};
use crate::stats::{interleaved, median, micros, millis};
use crate::stdio::StdioServer;

/// What the issue asks: a start within 100 ms with a warm cache, a warm call within 2× Node's.
const COLD_ANSWER_MS: f64 = 100.0;
const WARM_CALL_RATIO: f64 = 2.0;

/// The tool both servers are timed on, and its answer.
const TOOL: &str = "add";
const ANSWER: &str = "5";

/// The server measured: its component and its source, and how to run each.
struct Contenders {
    name: String,
    wasm: PathBuf,
    cache: PathBuf,
    source: PathBuf,
    node: PathBuf,
}

impl Bench {
    pub(crate) fn sdk_server(&mut self) -> Result<()> {
        let Some(project) = self.sdk_server.clone() else {
            let note = "P12: no --sdk-server given (./dev bench builds tests/ts-sdk/compute)";
            eprintln!("moat-perf:   {note}");
            self.notes.push(note.to_string());
            return Ok(());
        };
        let servers = self.contenders(&project)?;
        self.fill_cache(&servers)?;
        let what = |figure: &str| format!("TS-SDK server `{}`: {figure}", servers.name);

        let mut starts = [Vec::new(), Vec::new()];
        for _ in 0..self.settings.cold_starts {
            for (which, command) in [self.in_moat(&servers), in_node(&servers)]
                .into_iter()
                .enumerate()
            {
                starts[which].push(millis(self.first_answer(command, &servers, which)?));
            }
        }
        let [moat_start, node_start] = starts.map(median);
        self.rows.push(Row {
            id: "P12",
            what: what("start to the first answer, compile cache filled"),
            unit: "ms",
            moat: Some(moat_start),
            baseline: Some(("Node, stdio", node_start)),
            target: Target::AtMost(COLD_ANSWER_MS),
        });

        let mut ours = StdioServer::spawn(self.in_moat(&servers), &self.log("sdk-server-moat"))?;
        let mut node = StdioServer::spawn(in_node(&servers), &self.log("sdk-server-node"))?;
        ours.initialize()?;
        node.initialize()?;
        let tools = [0, 1].map(|which| servers.tool(which));
        let [moat_calls, node_calls] = interleaved(self.settings.stdio_calls, |which| {
            let server = if which == 0 { &mut ours } else { &mut node };
            let start = Instant::now();
            let result = server.call_tool(&tools[which], json!({"a": 2, "b": 3}))?;
            let time = start.elapsed();
            check_sum(&result)?;
            Ok(time)
        })?;
        self.rows.push(Row {
            id: "P12",
            what: what(&format!(
                "warm tools/call round trip, p50 ({} calls)",
                moat_calls.count
            )),
            unit: "µs",
            moat: Some(micros(moat_calls.p50)),
            baseline: Some(("Node, stdio", micros(node_calls.p50))),
            target: Target::RatioAtMost(WARM_CALL_RATIO),
        });
        let [moat_rss, node_rss] = [ours.pid(), node.pid()].map(|pid| memory(pid).map(|m| m.rss));
        self.rows.push(Row {
            id: "P12",
            what: what("resident memory after the calls"),
            unit: "MiB",
            moat: Some(mib(moat_rss?)),
            baseline: Some(("Node, stdio", mib(node_rss?))),
            target: Target::None,
        });
        ours.close(Duration::from_secs(2));
        node.close(Duration::from_secs(2));
        Ok(())
    }

    /// The component `moat build` made in `project`, and the Node that runs its source (the
    /// one the TypeScript SDK baseline runs on: Node 22 strips the types itself).
    fn contenders(&self, project: &Path) -> Result<Contenders> {
        let name = project
            .file_name()
            .and_then(|n| n.to_str())
            .context("the server's folder name")?
            .to_string();
        let wasm = project.join("build").join(format!("{name}.wasm"));
        let source = project.join("server.ts");
        for path in [&wasm, &source] {
            ensure!(
                path.is_file(),
                "{} not found; `./dev bench` builds it",
                path.display()
            );
        }
        let node = self
            .baselines
            .iter()
            .find(|b| b.name == "ts-sdk-echo")
            .map(|b| b.program.clone())
            .context("the TypeScript SDK baseline's Node")?;
        Ok(Contenders {
            cache: self.work.join(format!("cache-sdk-{name}")),
            name,
            wasm,
            source,
            node,
        })
    }

    /// Fills the compile cache: Cranelift's code (`moat pull`); the quick mode's debug build
    /// keeps what a first start leaves there, as P9 does.
    fn fill_cache(&self, servers: &Contenders) -> Result<()> {
        let wasm = servers.wasm.to_str().context("a non-UTF-8 path")?;
        if !self.settings.quick {
            let status = self
                .moat_command(&["-q", "pull", wasm], &servers.cache)
                .status()
                .context("running moat pull")?;
            if !status.success() {
                bail!("moat pull {wasm} failed ({status})");
            }
        }
        self.first_answer(self.in_moat(servers), servers, 0)?;
        Ok(())
    }

    fn in_moat(&self, servers: &Contenders) -> Command {
        let wasm = servers.wasm.to_string_lossy();
        self.moat_command(&["serve", &wasm], &servers.cache)
    }

    /// From spawning `command` to its answer to the first call (after the handshake).
    fn first_answer(
        &self,
        command: Command,
        servers: &Contenders,
        which: usize,
    ) -> Result<Duration> {
        let side = ["moat", "node"][which];
        let start = Instant::now();
        let mut server =
            StdioServer::spawn(command, &self.log(&format!("sdk-server-start-{side}")))?;
        server.initialize()?;
        check_sum(&server.call_tool(&servers.tool(which), json!({"a": 2, "b": 3}))?)?;
        let time = start.elapsed();
        server.close(Duration::from_secs(2));
        Ok(time)
    }
}

impl Contenders {
    /// The timed tool as contender `which` (0, moat; 1, Node) names it.
    fn tool(&self, which: usize) -> String {
        match which {
            0 => format!("{}_{TOOL}", self.name),
            _ => TOOL.to_string(),
        }
    }
}

fn in_node(servers: &Contenders) -> Command {
    let mut command = Command::new(&servers.node);
    // Node 22 warns that it strips the types: nothing to measure.
    command.arg("--no-warnings").arg(&servers.source);
    command
}

fn check_sum(result: &Value) -> Result<()> {
    if result["content"][0]["text"] != ANSWER || result["isError"] == true {
        bail!("a wrong sum: {result}");
    }
    Ok(())
}
