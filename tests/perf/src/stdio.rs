//! A minimal MCP client over a child process's stdin and stdout: one JSON-RPC message per line,
//! blocking reads, nothing else in the way, so that it measures the server and not itself.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::logwatch::Marks;

/// The protocol version the clients speak (with a session, the era every host speaks today).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// An MCP server running as a child process, spoken to over stdio.
pub struct StdioServer {
    child: Child,
    /// `None` once closed, which asks the server to exit.
    stdin: Option<BufWriter<ChildStdin>>,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
    next_id: u64,
    line: String,
}

impl StdioServer {
    /// Starts `command` with its stderr in `log`; call [`StdioServer::initialize`] next.
    pub fn spawn(command: Command, log: &Path) -> Result<Self> {
        Self::start(command, log, create(log)?.into()).map(|(server, _)| server)
    }

    /// Like [`StdioServer::spawn`], and keeps the lines of stderr that contain `marker`, with the
    /// moment each came.
    pub fn spawn_watched(command: Command, log: &Path, marker: &str) -> Result<(Self, Marks)> {
        let file = create(log)?;
        let (server, stderr) = Self::start(command, log, Stdio::piped())?;
        let marks = Marks::watch(stderr.expect("piped stderr"), file, marker);
        Ok((server, marks))
    }

    fn start(
        mut command: Command,
        log: &Path,
        stderr: Stdio,
    ) -> Result<(Self, Option<ChildStderr>)> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {:?}", command.get_program()))?;
        crate::watchdog::register(child.id());
        let stderr = child.stderr.take();
        let server = Self {
            stdin: Some(BufWriter::new(child.stdin.take().expect("piped stdin"))),
            stdout: BufReader::new(child.stdout.take().expect("piped stdout")),
            child,
            log: log.to_path_buf(),
            next_id: 0,
            line: String::new(),
        };
        Ok((server, stderr))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The MCP handshake: `initialize`, then `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<Value> {
        let result = self.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "moat-perf", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    /// Every tool the server lists, page after page.
    pub fn list_tools(&mut self) -> Result<Vec<Value>> {
        let mut tools = Vec::new();
        let mut params = json!({});
        loop {
            let result = self.request("tools/list", params)?;
            match result.get("tools") {
                Some(Value::Array(page)) => tools.extend(page.iter().cloned()),
                _ => bail!("tools/list answered without tools: {result}"),
            }
            match result.get("nextCursor") {
                Some(cursor) => params = json!({ "cursor": cursor }),
                None => return Ok(tools),
            }
        }
    }

    /// Calls a tool and returns its result; a tool error is an error here.
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value> {
        let result = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        if result.get("isError") == Some(&Value::Bool(true)) {
            bail!("{name} failed: {result}");
        }
        Ok(result)
    }

    /// Sends a request and waits for its answer, skipping notifications.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            self.line.clear();
            let read = self
                .stdout
                .read_line(&mut self.line)
                .with_context(|| self.died(method))?;
            if read == 0 {
                return Err(anyhow::anyhow!("the server closed stdout")).context(self.died(method));
            }
            let message: Value = serde_json::from_str(&self.line).with_context(|| {
                format!("the server wrote a line that is not JSON: {}", self.line)
            })?;
            if message.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("{method} failed: {error}");
            }
            return message
                .get("result")
                .cloned()
                .with_context(|| format!("{method}: an answer without a result: {message}"));
        }
    }

    fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin is closed")?;
        serde_json::to_writer(&mut *stdin, message)?;
        stdin.write_all(b"\n")?;
        stdin.flush().with_context(|| self.died("writing"))
    }

    /// Closes stdin, which asks an MCP server to exit, and gives it up to `grace` to do so
    /// (whatever it still writes, a cache entry, is then complete); past that it is killed.
    pub fn close(mut self, grace: Duration) {
        self.stdin = None;
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What went wrong with the server, with the end of its log.
    fn died(&mut self, during: &str) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => format!("it exited ({status})"),
            _ => "it is still running".into(),
        };
        format!(
            "the server stopped answering during {during}; {status}; its log ends with:\n{}",
            log_tail(&self.log)
        )
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        // Closing stdin asks an MCP server to exit; don't wait on one that does not
        // ([`StdioServer::close`] does).
        crate::watchdog::unregister(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last lines of a server's log, for error messages.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn create(log: &Path) -> Result<std::fs::File> {
    std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))
}
