//! `/console/plugins` and `/console/plugins/{name}`: each plugin, where it came from, why it
//! may load, what it was granted and why, what `moat lint` finds, and its tools.

use axum::extract::{Path, State};
use maud::html;

use crate::console::answer::Refusal;
use crate::console::layout::frame;
use crate::console::session::Operator;
use crate::console::{Page, Shared, html as page_html};
use crate::plugin::lint::lint;

pub async fn list(State(console): Shared, operator: Operator) -> Page {
    let registry = console.catalogue().current();
    let current = console.inner.reloads.current();
    let body = html! {
        table #plugins {
            thead { tr { th { "Plugin" } th { "Source" } th { "Publisher" } th { "Tools" } th { "Allowed by" } } }
            tbody {
                @for plugin in registry.plugins() {
                    tr data-plugin=(plugin.name) {
                        td { a href=(format!("/console/plugins/{}", plugin.name)) { (plugin.name) } }
                        td.source { (current.sources.get(&*plugin.name).map_or("", |s| s)) }
                        td { (plugin.admission.publisher.as_deref().unwrap_or("unsigned")) }
                        td { (plugin.tools.len()) }
                        td { (plugin.admission.allowed_by) }
                    }
                }
            }
        }
    };
    Ok(page_html(frame(
        &operator,
        "/console/plugins",
        "Plugins",
        body,
    )))
}

pub async fn page(State(console): Shared, operator: Operator, Path(name): Path<String>) -> Page {
    let registry = console.catalogue().current();
    let plugin = registry
        .plugins()
        .iter()
        .find(|p| *p.name == *name)
        .ok_or_else(|| Refusal::not_found(&format!("The plugin \"{name}\"")))?;
    let current = console.inner.reloads.current();
    let admission = &plugin.admission;
    let grants = &plugin.grants;
    let limits = &plugin.limits;
    let findings = lint(plugin);
    let body = html! {
        @if let Some(summary) = &plugin.summary { p.summary { (summary) } }
        dl.facts {
            dt { "Source" } dd #source { (current.sources.get(&*plugin.name).map_or("", |s| s)) }
            dt { "Digest" } dd #digest { code { (admission.digest) } }
            dt { "Publisher" } dd #publisher {
                @match &admission.publisher {
                    Some(publisher) => { "signed by " (publisher) }
                    None => "unsigned",
                }
            }
            dt { "Allowed by" } dd #allowed-by { (admission.allowed_by) }
            dt { "Manifest" } dd { @if admission.manifest.is_some() { "declares what it needs" } @else { "none: the operator's grants stand, within the policy" } }
        }
        h2 { "What it may reach, and why" }
        table #grants {
            thead { tr { th { "Grant or limit" } th { "Fate" } th { "Why" } } }
            tbody {
                @for note in &admission.notes {
                    tr.note data-fate=(note.fate.as_str()) { td { (note.grant) } td.fate { (note.fate.as_str()) } td { (note.reason) } }
                }
                @for injection in &grants.network.inject {
                    tr.grant { td { "header " (injection.header) " to " (injection.to) } td.fate { "added" } td { "moat.toml inject (the value is never shown)" } }
                }
                tr.limit { td { "calls at once" } td.fate { (limits.max_concurrent_calls) } td { (limits.max_queued_calls) " more may wait" } }
            }
        }
        h2 { "Lint" }
        @if findings.is_empty() { p #lint { "moat lint finds nothing." } }
        @else {
            ul #lint { @for finding in &findings { li { b { (finding.subject) } ": " (finding.message) } } }
        }
        h2 { "Tools" }
        ul #tools {
            @for tool in &plugin.tools {
                li { a href=(format!("/console/tools/{}", tool.name)) { (tool.name) } @if let Some(title) = &tool.title { " — " (title) } }
            }
        }
    };
    let title = format!("Plugin {}", plugin.name);
    Ok(page_html(frame(
        &operator,
        "/console/plugins",
        &title,
        body,
    )))
}
