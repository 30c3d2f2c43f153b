//! `/console/callers`: the principals this moat has seen call, each with the tools their tool
//! set gives them, their quota and its use now, and their latest refusals and failures.

use axum::extract::State;
use maud::html;

use crate::console::layout::{frame, when};
use crate::console::session::Operator;
use crate::console::{Page, Shared, html as page_html};

/// Tools named per caller before the rest are counted.
const TOOLS_SHOWN: usize = 12;

pub async fn page(State(console): Shared, operator: Operator) -> Page {
    let registry = console.catalogue().current();
    let tool_sets = console.catalogue().tool_sets();
    let quotas = console.catalogue().quotas();
    let (running, _) = console.inner.calls.now();
    let seen = console.inner.calls.seen();
    let body = html! {
        p { "Principals seen calling tools since moat started (on this replica), the latest first." }
        table #callers {
            thead { tr { th { "Principal" } th { "Signed in by" } th { "Groups" } th { "Tool set" } th { "Quota" } th { "Calls" } th { "Latest refusals and failures" } } }
            tbody {
                @for caller in &seen {
                    @let principal = &caller.principal;
                    @let tools: Vec<&str> = registry.tools().filter(|(p, t)| tool_sets.allows(principal, &p.name, &t.name)).map(|(_, t)| t.name.as_str()).collect();
                    @let quota = quotas.quota(&principal.name);
                    @let now = running.iter().filter(|r| r.principal == principal.name).count();
                    tr data-principal=(principal.name) {
                        td.principal {
                            a href=(format!("/console/audit?{}", query("principal", &principal.name))) title="This caller's calls in the audit log" { (principal.name) }
                        }
                        td { (principal.via.as_str()) }
                        td { (principal.groups.join(", ")) }
                        td.tools {
                            (tools.len()) " of " (registry.tools().count())
                            @if !tools.is_empty() {
                                ": " (tools.iter().take(TOOLS_SHOWN).copied().collect::<Vec<_>>().join(", "))
                                @if tools.len() > TOOLS_SHOWN { ", …" }
                            }
                        }
                        td.quota {
                            (now) " running"
                            @if let Some(limit) = quota.concurrent_calls { " of " (limit) }
                            @if let Some(rate) = quota.requests_per_minute { "; " (rate) " requests a minute" }
                        }
                        td { (caller.calls) " since " (when(caller.last)) }
                        td.problems {
                            @if caller.problems.is_empty() { "none" }
                            ul {
                                @for problem in caller.problems.iter().rev() {
                                    @if let Some(end) = &problem.ended {
                                        li { b { (end.outcome) } " " (problem.tool) @if let Some(error) = &end.error { ": " (error) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page_html(frame(
        &operator,
        "/console/callers",
        "Callers",
        body,
    )))
}

/// `name=value`, encoded for a URL's query.
fn query(name: &str, value: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair(name, value)
        .finish()
}
