//! P9: plugins written in JavaScript and Python (componentize-js, componentize-py: the echo
//! plugin in each), beside moat's Rust echo in the same run: the first answer from a cold start,
//! a warm call's round trip, and what each plugin adds to moat's resident memory.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::http::{HttpServer, free_addr};
use crate::procfs::{memory, mib};
use crate::report::{Row, Target};
use crate::stats::{interleaved, micros, millis};
use crate::stdio::StdioServer;
use crate::{Bench, MESSAGE, check_echo};

/// Calls at once in the memory measurement: as many as a plugin runs at once by default.
const BUSY_CLIENTS: usize = 16;

/// What the issue asks of a JavaScript or Python plugin: its first answer within 1.5 s of a cold
/// start, a warm call within 0.3 ms.
const COLD_ANSWER_MS: f64 = 1500.0;
const WARM_CALL_US: f64 = 300.0;

impl Bench {
    pub(crate) fn guest_languages(&mut self) -> Result<()> {
        if self.guests.is_empty() {
            let note = "P9: no --guests given (./dev bench builds echo_js and echo_py)".to_string();
            eprintln!("moat-perf:   {note}");
            self.notes.push(note);
            return Ok(());
        }
        self.warm_bundled("echo")?;
        for path in self.guests.clone() {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .context("a guest plugin's file name")?
                .to_string();
            self.cold_guest(&name, &path)?;
            self.warm_guest(&name, &path)?;
            self.busy_guest(&name, &path)?;
        }
        Ok(())
    }

    /// A cold start on an empty compile cache: Winch's code, first list and first answer.
    fn cold_guest(&mut self, name: &str, path: &Path) -> Result<()> {
        let wasm = path.to_str().context("a non-UTF-8 path")?;
        let size = std::fs::metadata(path)?.len();
        let cache = self.work.join(format!("cache-cold-{name}"));
        let _ = std::fs::remove_dir_all(&cache);
        let start = Instant::now();
        let command = self.moat_command(&["serve", wasm], &cache);
        let mut server = StdioServer::spawn(command, &self.log(&format!("{name}-cold")))?;
        server.initialize()?;
        server.list_tools()?;
        let listed = start.elapsed();
        check_echo(&server.call_tool(&format!("{name}_echo"), json!({"message": MESSAGE}))?)?;
        let answered = start.elapsed();
        server.close(Duration::from_secs(2));
        let what = |event: &str| format!("{name} ({} MB), cold start to {event}", size >> 20);
        self.rows.push(Row {
            id: "P9",
            what: what("the first tools/list"),
            unit: "ms",
            moat: Some(millis(listed)),
            baseline: None,
            target: Target::None,
        });
        self.rows.push(Row {
            id: "P9",
            what: what("the first answer"),
            unit: "ms",
            moat: Some(millis(answered)),
            baseline: None,
            target: Target::AtMost(COLD_ANSWER_MS),
        });
        Ok(())
    }

    /// Warm calls of the guest's echo and the Rust echo, interleaved, each server on Cranelift's
    /// code from the cache (`moat pull` fills it; the quick mode keeps Winch's), and the resident
    /// memory of each server after them.
    fn warm_guest(&mut self, name: &str, path: &Path) -> Result<()> {
        let wasm = path.to_str().context("a non-UTF-8 path")?;
        let cache = self.work.join(format!("cache-{name}"));
        if !self.settings.quick {
            let status = self
                .moat_command(&["-q", "pull", wasm], &cache)
                .status()
                .context("running moat pull")?;
            if !status.success() {
                bail!("moat pull {wasm} failed ({status})");
            }
        }
        let echo = self.plugin("echo");
        let echo = echo.to_str().context("a non-UTF-8 path")?;
        let mut guest = StdioServer::spawn(
            self.moat_command(&["serve", wasm], &cache),
            &self.log(&format!("{name}-warm")),
        )?;
        let mut rust = StdioServer::spawn(
            self.moat_command(&["serve", echo], &self.warm_cache()),
            &self.log(&format!("{name}-rust-echo")),
        )?;
        guest.initialize()?;
        rust.initialize()?;
        let calls = self.settings.stdio_calls;
        let tool = format!("{name}_echo");
        let [ours, rusts] = interleaved(calls, |which| {
            let (server, tool) = if which == 0 {
                (&mut guest, tool.as_str())
            } else {
                (&mut rust, "echo_echo")
            };
            let start = Instant::now();
            let result = server.call_tool(tool, json!({"message": MESSAGE}))?;
            let time = start.elapsed();
            check_echo(&result)?;
            Ok(time)
        })?;
        self.rows.push(Row {
            id: "P9",
            what: format!(
                "{name} warm tools/call round trip, p50 ({} calls)",
                ours.count
            ),
            unit: "µs",
            moat: Some(micros(ours.p50)),
            baseline: Some(("moat, Rust echo", micros(rusts.p50))),
            target: Target::AtMost(WARM_CALL_US),
        });
        let [guest_rss, rust_rss] = [guest.pid(), rust.pid()].map(|pid| memory(pid).map(|m| m.rss));
        self.rows.push(Row {
            id: "P9",
            what: format!("{name}: moat's resident memory after the calls"),
            unit: "MiB",
            moat: Some(mib(guest_rss?)),
            baseline: Some(("moat, Rust echo", mib(rust_rss?))),
            target: Target::None,
        });
        guest.close(Duration::from_secs(2));
        rust.close(Duration::from_secs(2));
        Ok(())
    }

    /// moat's resident memory serving the guest alone over HTTP, idle and under
    /// [`BUSY_CLIENTS`] concurrent calls (each in its own instance), beside the Rust echo's.
    fn busy_guest(&mut self, name: &str, path: &Path) -> Result<()> {
        let echo = self.plugin("echo");
        let mut figures = Vec::new();
        for (wasm, cache, tool) in [
            (
                path.to_path_buf(),
                self.work.join(format!("cache-{name}")),
                format!("{name}_echo"),
            ),
            (echo, self.warm_cache(), "echo_echo".to_string()),
        ] {
            let wasm = wasm.to_str().context("a non-UTF-8 path")?.to_string();
            let addr = free_addr()?;
            let server = HttpServer::spawn(
                self.moat_command(&["serve", "--http", &addr.to_string(), &wasm], &cache),
                addr,
                &self.log(&format!("{name}-busy-{tool}")),
            )?;
            figures.push(self.idle_and_peak(&server, &[tool], BUSY_CLIENTS)?);
        }
        let [(guest_idle, guest_peak), (rust_idle, rust_peak)] = figures[..] else {
            unreachable!("two servers were measured")
        };
        self.rows.push(Row {
            id: "P9",
            what: format!("{name}: moat's resident memory serving it alone, idle"),
            unit: "MiB",
            moat: Some(mib(guest_idle)),
            baseline: Some(("moat, Rust echo", mib(rust_idle))),
            target: Target::None,
        });
        self.rows.push(Row {
            id: "P9",
            what: format!(
                "{name}: resident memory, peak − idle under {BUSY_CLIENTS} concurrent calls"
            ),
            unit: "MiB",
            moat: Some(mib(guest_peak.saturating_sub(guest_idle))),
            baseline: Some(("moat, Rust echo", mib(rust_peak.saturating_sub(rust_idle)))),
            target: Target::None,
        });
        Ok(())
    }
}
