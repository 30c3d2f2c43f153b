//! Streamable HTTP: a minimal MCP client (one keep-alive connection and one session per client,
//! requests one after another, answers read from JSON or from the SSE stream), the load of many
//! such clients, and the server under test as a child process.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::stdio::{PROTOCOL_VERSION, log_tail};
use crate::{MESSAGE, check_echo};

/// The bearer token every session sends: moat serving HTTP requires one (the native server takes
/// no notice). [`write_token_file`] puts it where moat reads it.
pub const TOKEN: &str = "moat_perf_0123456789abcdefghijklmnopqrstuvwxyzABCDEF";

/// Writes [`TOKEN`] to `path`, private to its owner as moat requires.
pub fn write_token_file(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{TOKEN}\n"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// One MCP session over one HTTP/1.1 connection.
pub struct HttpSession {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    /// The `Authorization` header's value.
    authorization: String,
    session: Option<String>,
    next_id: u64,
}

impl HttpSession {
    /// Connects to `http://addr/mcp` with [`TOKEN`] and performs the MCP handshake.
    pub async fn open(addr: SocketAddr) -> Result<Self> {
        Self::open_as(addr, TOKEN).await
    }

    /// Connects to `http://addr/mcp` with the bearer `token` and performs the MCP handshake.
    pub async fn open_as(addr: SocketAddr, token: &str) -> Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake")?;
        tokio::spawn(connection);
        let mut session = Self {
            sender,
            authority: addr.to_string(),
            authorization: format!("Bearer {token}"),
            session: None,
            next_id: 0,
        };
        session
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "moat-perf", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await?;
        session
            .post(
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                None,
            )
            .await?;
        Ok(session)
    }

    /// Calls a tool and returns its result; a tool error is an error here.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value> {
        let result = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await?;
        if result.get("isError") == Some(&Value::Bool(true)) {
            bail!("{name} failed: {result}");
        }
        Ok(result)
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self
            .post(message, Some(id))
            .await?
            .with_context(|| format!("{method}: no answer in the response"))?;
        if let Some(error) = answer.get("error") {
            bail!("{method} failed: {error}");
        }
        answer
            .get("result")
            .cloned()
            .with_context(|| format!("{method}: an answer without a result: {answer}"))
    }

    /// Calls a tool and returns only the HTTP status (a quota's 429 is no error here).
    pub async fn call_status(&mut self, name: &str, arguments: Value) -> Result<StatusCode> {
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                             "params": {"name": name, "arguments": arguments}});
        Ok(self.exchange(message).await?.0)
    }

    /// POSTs one message; returns the status, whether the answer is JSON, and its body.
    async fn exchange(&mut self, message: Value) -> Result<(StatusCode, bool, Bytes)> {
        let mut request = Request::post("/mcp")
            .header(HOST, &self.authority)
            .header(AUTHORIZATION, &self.authorization)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let request = request.body(Full::new(Bytes::from(serde_json::to_vec(&message)?)))?;
        self.sender.ready().await.context("the connection closed")?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = Some(session.to_str()?.to_string());
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, is_json, body))
    }

    /// POSTs one message; returns the JSON-RPC answer with `id`, if one was expected.
    async fn post(&mut self, message: Value, id: Option<u64>) -> Result<Option<Value>> {
        let (status, is_json, body) = self.exchange(message).await?;
        if !status.is_success() {
            bail!("HTTP {status}: {}", String::from_utf8_lossy(&body));
        }
        let Some(id) = id else {
            if status != StatusCode::ACCEPTED {
                bail!("a notification answered with HTTP {status}, not 202");
            }
            return Ok(None);
        };
        if is_json {
            return Ok(Some(serde_json::from_slice(&body)?));
        }
        // An SSE stream: the answer is the `data:` event that carries our id.
        let text = std::str::from_utf8(&body).context("an SSE stream that is not UTF-8")?;
        for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
            let data = data.trim();
            if data.is_empty() {
                continue;
            }
            let event: Value = serde_json::from_str(data)?;
            if event.get("id") == Some(&json!(id)) {
                return Ok(Some(event));
            }
        }
        bail!("the SSE stream ended without the answer: {text}")
    }
}

/// An MCP server serving HTTP, as a child process.
pub struct HttpServer {
    pub child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl HttpServer {
    /// Starts `command` and waits until it accepts connections at `addr`.
    pub fn spawn(mut command: Command, addr: SocketAddr, log: &Path) -> Result<Self> {
        let stderr = std::fs::File::create(log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {:?}", command.get_program()))?;
        crate::watchdog::register(child.id());
        let mut server = Self {
            child,
            addr,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = server.child.try_wait()? {
                bail!("it exited ({status}) before it listened: {}", server.died());
            }
            if Instant::now() > deadline {
                bail!("it did not listen within 120 s: {}", server.died());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    pub fn died(&self) -> String {
        format!(
            "the server at {} failed; its log ends with:\n{}",
            self.addr,
            log_tail(&self.log)
        )
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        crate::watchdog::unregister(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address with a port free right now.
pub fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

pub struct Load {
    pub calls: u64,
    pub elapsed: Duration,
}

/// `clients` sessions calling echo tools (client `i` calls `tools[i % len]`) for `duration`.
pub async fn load(
    addr: SocketAddr,
    clients: usize,
    tools: &[String],
    duration: Duration,
) -> Result<Load> {
    load_as(addr, TOKEN, clients, tools, duration).await
}

/// [`load`] with the bearer `token`.
pub async fn load_as(
    addr: SocketAddr,
    token: &str,
    clients: usize,
    tools: &[String],
    duration: Duration,
) -> Result<Load> {
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let token = token.to_string();
        sessions.push(tokio::spawn(async move {
            HttpSession::open_as(addr, &token).await
        }));
    }
    let mut clients = tokio::task::JoinSet::new();
    let start = Instant::now();
    let end = start + duration;
    for (i, session) in sessions.into_iter().enumerate() {
        let mut session = session.await??;
        let tool = tools[i % tools.len()].clone();
        clients.spawn(async move {
            let mut calls = 0u64;
            while Instant::now() < end {
                let result = session
                    .call_tool(&tool, json!({"message": MESSAGE}))
                    .await?;
                check_echo(&result)?;
                calls += 1;
            }
            anyhow::Ok(calls)
        });
    }
    let mut calls = 0;
    while let Some(done) = clients.join_next().await {
        calls += done??;
    }
    Ok(Load {
        calls,
        elapsed: start.elapsed(),
    })
}
