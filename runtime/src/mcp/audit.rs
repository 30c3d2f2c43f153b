//! The audit log: one JSON line per tool call, appended to a file only its owner can read.
//!
//! ```json
//! {"time":"2026-11-30T09:00:00.123Z","session":"5c1f…","client_claimed":"claude-code 1.2.0",
//!  "plugin":"notes","digest":"sha256:…","tool":"notes_read",
//!  "arguments_sha256":"…","duration_ms":1.84,"outcome":"ok","denied":[]}
//! ```
//!
//! Arguments are recorded by their digest (sha256 of their canonical JSON: object keys sorted, no
//! whitespace), so a log holds no secrets by default but still shows two calls had equal
//! arguments; `arguments` holds them in full only when the operator asks for it. A failed write
//! is logged and never fails the call.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::access::Principal;
use crate::plugin::CallError;

/// The audit path that means standard output.
pub const STDOUT: &str = "-";

/// An open audit log.
pub struct AuditLog {
    path: PathBuf,
    /// The file, or standard output (`-`) for a collector that reads it.
    file: Mutex<Box<dyn Write + Send>>,
    include_arguments: bool,
    /// The replica writing, when replicas share one service.
    replica: Option<String>,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A result.
    Ok,
    /// The tool's own error (`isError: true`, an `err` of a `result`).
    ToolError,
    /// Arguments that do not fit the tool; the guest never ran.
    InvalidArguments,
    /// The guest trapped: a panic, a limit, out of memory.
    Trap,
    /// Stopped at its deadline.
    Deadline,
    /// Stopped when its fuel ran out.
    OutOfFuel,
    /// A result moat cannot hand on (too large, malformed).
    BadResult,
    /// Refused: too many calls running or waiting.
    Busy,
    /// The host could not set the call up.
    SetupError,
    /// Cancelled by the client.
    Cancelled,
    /// A tool that no plugin has.
    UnknownTool,
    /// Stopped to ask the client questions that its next request answers.
    InputRequired,
    /// Went on as a task.
    Detached,
    /// A Cedar policy denied it (or none permitted it); the guest never ran.
    Denied,
}

impl Outcome {
    /// The name the audit log and the metrics give it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::Trap => "trap",
            Outcome::Deadline => "deadline",
            Outcome::OutOfFuel => "out_of_fuel",
            Outcome::BadResult => "bad_result",
            Outcome::Denied => "denied",
            Outcome::Busy => "busy",
            Outcome::SetupError => "setup_error",
            Outcome::Cancelled => "cancelled",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::InputRequired => "input_required",
            Outcome::Detached => "task",
        }
    }
}

/// One call, as it is written.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    /// RFC 3339, UTC.
    pub time: String,
    /// The replica that served the call, when replicas share one service (`[cluster]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<&'a str>,
    /// Whom the call acted for, as moat authenticated it: an API key (`key:NAME`), a token's
    /// subject, `local` (the local token), `stdio`, or `anonymous` with authentication off.
    pub principal: &'a str,
    /// How the principal was authenticated (`jwt`, `introspection`, `api-key`, `local-token`,
    /// `stdio`, `none`).
    pub authenticated_by: &'static str,
    /// The token's client, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<&'a str>,
    /// The caller's address (HTTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The MCP session (Streamable HTTP) moat created at `initialize` and found this request in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// An `Mcp-Session-Id` a request outside any session carried: only what the client says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_claimed: Option<String>,
    /// The client's name and version as it gave them (at `initialize`, or in a request's
    /// `_meta`): only what the client says, unlike `principal`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_claimed: Option<String>,
    pub plugin: Option<&'a str>,
    /// `sha256:` and the hex sha256 of the component's bytes.
    pub digest: Option<&'a str>,
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'a str,
    /// The tool or prompt name, or the resource URI.
    pub tool: &'a str,
    pub arguments_sha256: String,
    /// The arguments themselves, only when the log is set to include them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    pub duration_ms: f64,
    pub outcome: Outcome,
    /// The error's text, for any outcome but `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Capability uses the sandbox refused during the call (a socket to a host not granted…).
    pub denied: Vec<String>,
    /// The `[credentials]` sources whose credential for this principal the call's requests
    /// carried: the source, never the credential.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// The Cedar policies that decided the request (`[policy] cedar`): the permits that
    /// allowed it, or the forbids that denied it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
}

/// What the caller knows about one finished call.
pub struct Call<'a> {
    /// Whom the call acted for, as moat authenticated it.
    pub principal: &'a Principal,
    /// The caller's address (HTTP), as the connection or a trusted proxy gives it.
    pub remote: Option<std::net::IpAddr>,
    pub client_claimed: Option<String>,
    pub session: Option<String>,
    pub session_claimed: Option<String>,
    pub plugin: Option<&'a str>,
    pub digest: Option<&'a str>,
    pub method: &'a str,
    pub tool: &'a str,
    pub arguments: Option<&'a Map<String, Value>>,
    pub duration: Duration,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub denied: Vec<String>,
    pub credentials: Vec<String>,
    pub policies: Vec<String>,
}

impl AuditLog {
    /// Opens `path` for appending, creating it readable and writable by its owner only; `-`
    /// is standard output.
    pub fn open(path: &Path, include_arguments: bool) -> Result<Self> {
        let file: Box<dyn Write + Send> = if path == Path::new(STDOUT) {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(path)
                    .with_context(|| format!("opening the audit log {}", path.display()))?,
            )
        };
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            include_arguments,
            replica: None,
        })
    }

    /// Names `replica` in every line.
    pub fn with_replica(mut self, replica: &str) -> Self {
        self.replica = Some(replica.to_string());
        self
    }

    /// The file the log is written to; none for standard output.
    pub fn file(&self) -> Option<&Path> {
        (self.path != Path::new(STDOUT)).then_some(&*self.path)
    }

    /// Appends one line for what an operator did in the console (`action`: `reload`,
    /// `revoke`, `cancel`) to `target`. A tool call an operator makes is a call like any other.
    pub fn operator_action(&self, principal: &Principal, action: &str, target: &str) {
        #[derive(Serialize)]
        struct Action<'a> {
            time: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            replica: Option<&'a str>,
            principal: &'a str,
            authenticated_by: &'static str,
            method: &'static str,
            action: &'a str,
            target: &'a str,
        }
        let action = Action {
            time: jiff::Timestamp::now().to_string(),
            replica: self.replica.as_deref(),
            principal: &principal.name,
            authenticated_by: principal.via.as_str(),
            method: "console",
            action,
            target,
        };
        self.write(&serde_json::to_string(&action).expect("an action is plain JSON"));
    }

    /// Appends one line for `call`. A write that fails is logged, never returned.
    pub fn record(&self, call: Call<'_>) {
        let arguments = Value::Object(call.arguments.cloned().unwrap_or_default());
        let record = Record {
            time: jiff::Timestamp::now().to_string(),
            replica: self.replica.as_deref(),
            principal: &call.principal.name,
            authenticated_by: call.principal.via.as_str(),
            client_id: call.principal.client_id.as_deref(),
            remote: call.remote.map(|ip| ip.to_string()),
            session: call.session,
            session_claimed: call.session_claimed,
            client_claimed: call.client_claimed,
            plugin: call.plugin,
            digest: call.digest,
            method: call.method,
            tool: call.tool,
            arguments_sha256: hex(&Sha256::digest(canonical_json(&arguments).as_bytes())),
            arguments: self.include_arguments.then_some(arguments),
            duration_ms: call.duration.as_secs_f64() * 1000.0,
            outcome: call.outcome,
            error: call.error,
            denied: call.denied,
            credentials: call.credentials,
            policies: call.policies,
        };
        self.write(&serde_json::to_string(&record).expect("a record is plain JSON"));
    }

    fn write(&self, json: &str) {
        let mut line = one_line(json);
        line.push('\n');
        // One write per line on an O_APPEND file: lines from concurrent calls never interleave.
        let written = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("a writer panicked"))
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            tracing::error!(
                "could not write to the audit log {}: {e}",
                self.path.display()
            );
        }
    }
}

/// The outcome of a call that produced no result.
pub fn outcome_of(error: &CallError) -> Outcome {
    match error {
        CallError::InvalidArguments(_) => Outcome::InvalidArguments,
        CallError::DeadlineExceeded(_) => Outcome::Deadline,
        CallError::OutOfFuel(_) => Outcome::OutOfFuel,
        CallError::Trap { .. } => Outcome::Trap,
        CallError::BadResult(_) => Outcome::BadResult,
        CallError::Busy { .. } => Outcome::Busy,
        CallError::Setup(_) => Outcome::SetupError,
        CallError::InputRequired(_) => Outcome::InputRequired,
        CallError::MissingCapability(_) => Outcome::InvalidArguments,
        CallError::Detached => Outcome::Detached,
    }
}

/// `json` with U+2028 and U+2029 escaped: JSON lets them stand raw in strings, and readers that
/// split on Unicode line breaks (JavaScript's, many log viewers') would cut the line there.
fn one_line(json: &str) -> String {
    json.replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// JSON with every object's keys sorted and no whitespace, so equal values hash equal.
pub fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical_json(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_line_holds_no_unicode_line_break_and_reads_back_the_same() {
        let value = serde_json::json!({"tool": "a\u{2028}b", "error": "c\u{2029}d\ne"});
        let line = one_line(&value.to_string());
        assert!(!line.contains(['\u{2028}', '\u{2029}', '\n']), "{line}");
        assert!(
            line.contains("a\\u2028b") && line.contains("c\\u2029d"),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), value);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "é"}}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#
        );
        assert_eq!(canonical_json(&a), canonical_json(&b));
    }

    /// moat's own log, caught for a test to read.
    #[derive(Clone, Default)]
    struct Caught(std::sync::Arc<Mutex<Vec<u8>>>);

    impl Write for Caught {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_only_logged() {
        let caught = Caught::default();
        let writer = caught.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        // Every write to /dev/full fails (ENOSPC): `record` returns as usual, and says so in
        // moat's log.
        let log = AuditLog::open(Path::new("/dev/full"), false).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            log.record(Call {
                principal: &Principal::anonymous(),
                remote: None,
                client_claimed: None,
                session: None,
                session_claimed: None,
                plugin: None,
                digest: None,
                method: "tools/call",
                tool: "x",
                arguments: None,
                duration: Duration::ZERO,
                outcome: Outcome::UnknownTool,
                error: None,
                denied: vec![],
                credentials: vec![],
                policies: vec![],
            })
        });
        let logged = String::from_utf8(caught.0.lock().unwrap().clone()).unwrap();
        assert!(
            logged.contains("ERROR")
                && logged.contains("could not write to the audit log /dev/full: No space left"),
            "{logged:?}"
        );
    }

    #[test]
    fn records_append_as_private_json_lines() {
        let path = std::env::temp_dir().join(format!("moat-audit-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let args: Map<String, Value> = serde_json::from_str(r#"{"secret": "hunter2"}"#).unwrap();
        for include in [false, true] {
            let log = AuditLog::open(&path, include).unwrap();
            log.record(Call {
                principal: &Principal::api_key("ci"),
                remote: Some([127, 0, 0, 1].into()),
                client_claimed: Some("test 1.0".into()),
                session: Some("5c1f".into()),
                session_claimed: None,
                plugin: Some("notes"),
                digest: Some("sha256:00"),
                method: "tools/call",
                tool: "notes_read",
                arguments: Some(&args),
                duration: Duration::from_micros(1500),
                outcome: Outcome::Ok,
                error: None,
                denied: vec![],
                credentials: vec!["tracker".into()],
                policies: vec![],
            });
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert!(
            !lines[0].to_string().contains("hunter2"),
            "redacted by default"
        );
        assert_eq!(lines[1]["arguments"]["secret"], "hunter2");
        assert_eq!(lines[0]["arguments_sha256"], lines[1]["arguments_sha256"]);
        assert_eq!(
            lines[0]["arguments_sha256"],
            hex(&Sha256::digest(br#"{"secret":"hunter2"}"#))
        );
        assert_eq!(lines[0]["duration_ms"], 1.5);
        assert_eq!(lines[0]["outcome"], "ok");
        assert_eq!(lines[0]["credentials"], serde_json::json!(["tracker"]));
        assert_eq!(lines[0]["client_claimed"], "test 1.0");
        assert_eq!(lines[0]["session"], "5c1f");
        assert_eq!(lines[0]["principal"], "key:ci");
        assert_eq!(lines[0]["authenticated_by"], "api-key");
        assert_eq!(lines[0]["remote"], "127.0.0.1");
        assert!(lines[0].get("client").is_none() && lines[0].get("session_claimed").is_none());
        let time = lines[0]["time"].as_str().unwrap();
        assert!(
            time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
            "{time}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
