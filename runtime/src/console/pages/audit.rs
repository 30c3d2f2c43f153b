//! `/console/audit`: the audit log's latest lines, filtered by principal, tool, outcome and
//! time. Read from the end of the file, a bounded amount, at each view.

use std::io::{Read, Seek, SeekFrom};

use axum::extract::{Query, State};
use maud::html;
use serde::Deserialize;
use serde_json::Value;

use crate::console::layout::frame;
use crate::console::session::Operator;
use crate::console::{Page, Shared, html as page_html};

/// How much of the end of the log is read.
const TAIL_BYTES: u64 = 4 << 20;
/// Lines shown at most.
const SHOWN: usize = 200;

#[derive(Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    principal: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    outcome: String,
    /// An RFC 3339 time (or its start: `2026-12-07T10`): lines from then on.
    #[serde(default)]
    since: String,
}

impl Filter {
    fn keeps(&self, line: &Value) -> bool {
        let field = |name: &str| line.get(name).and_then(Value::as_str).unwrap_or("");
        let matches = |wanted: &str, name: &str| wanted.is_empty() || field(name) == wanted;
        matches(&self.principal, "principal")
            && (self.tool.is_empty() || field("tool") == self.tool || field("target") == self.tool)
            && (self.outcome.is_empty()
                || field("outcome") == self.outcome
                || field("action") == self.outcome)
            && (self.since.is_empty() || field("time") >= self.since.as_str())
    }
}

pub async fn page(
    State(console): Shared,
    operator: Operator,
    Query(filter): Query<Filter>,
) -> Page {
    let file = console
        .catalogue()
        .audit()
        .and_then(|a| a.file().map(|p| p.to_path_buf()));
    let lines = match &file {
        Some(path) => tokio::task::spawn_blocking({
            let path = path.clone();
            move || tail(&path)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string())),
        None => Ok(Vec::new()),
    };
    let body = html! {
        form #audit-filter method="get" action="/console/audit" {
            label { "Principal " input type="text" name="principal" value=(filter.principal); }
            label { "Tool " input type="text" name="tool" value=(filter.tool); }
            label { "Outcome " input type="text" name="outcome" value=(filter.outcome) list="outcomes"; }
            datalist #outcomes { @for o in ["ok", "tool_error", "denied", "invalid_arguments", "trap", "deadline", "cancelled", "busy", "unknown_tool"] { option value=(o) {} } }
            label { "Since " input type="text" name="since" value=(filter.since) placeholder="2026-12-07T10:00"; }
            button type="submit" { "Filter" }
        }
        @match (&file, &lines) {
            (None, _) => p #no-audit { "This moat keeps no audit log file ([audit] path, or --audit FILE)." }
            (Some(path), Err(why)) => p.failed { "The audit log " (path.display()) " could not be read: " (why) }
            (Some(path), Ok(lines)) => {
                p { "The latest lines of " code { (path.display()) } " that match, the newest first." }
                table #audit {
                    thead { tr { th { "Time" } th { "Principal" } th { "Tool or action" } th { "Outcome" } th { "ms" } th { "Detail" } } }
                    tbody {
                        @for line in lines.iter().rev().filter(|l| filter.keeps(l)).take(SHOWN) {
                            @let text = |name: &str| line.get(name).and_then(Value::as_str).unwrap_or("").to_string();
                            tr.audit-line {
                                td.time { (text("time")) }
                                td.principal { (text("principal")) }
                                td.tool { (text("tool")) (text("target")) }
                                td.outcome { (text("outcome")) (text("action")) }
                                td { (line.get("duration_ms").and_then(Value::as_f64).map(|d| format!("{d:.1}")).unwrap_or_default()) }
                                td.detail {
                                    (text("error"))
                                    @for key in ["denied", "policies", "credentials"] {
                                        @if let Some(items) = line.get(key).and_then(Value::as_array) {
                                            @if !items.is_empty() { " " (key) ": " (items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page_html(frame(&operator, "/console/audit", "Audit", body)))
}

/// The JSON lines at the end of the file at `path`, the oldest first.
fn tail(path: &std::path::Path) -> Result<Vec<Value>, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let start = size.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    // A read from the middle of the file starts within a line: that part is left out.
    let whole = if start > 0 {
        text.split_once('\n').map_or("", |(_, rest)| rest)
    } else {
        &text
    };
    Ok(whole
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}
