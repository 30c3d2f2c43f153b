//! `/console/tools/{name}`: a tool as models see it, and a form made from its input schema
//! that calls it as the signed-in operator, through `/mcp`'s own layers: under their tool set,
//! policies and quotas, audited as theirs. The result is shown as the model would get it.

use std::collections::HashMap;

use axum::extract::{Path, State};
use maud::html;
use serde_json::Value;

use crate::console::answer::Refusal;
use crate::console::form;
use crate::console::layout::{frame, json};
use crate::console::session::{Operator, Posted};
use crate::console::{Console, Page, Shared, html as page_html};
use crate::mcp::server::mcp_tool;

pub async fn page(State(console): Shared, operator: Operator, Path(name): Path<String>) -> Page {
    render(&console, &operator, &name, &HashMap::new(), None)
}

pub async fn call(
    State(console): Shared,
    operator: Operator,
    Path(name): Path<String>,
    posted: Posted,
) -> Page {
    operator.check(posted.get("csrf"))?;
    let values: HashMap<String, String> = posted.0.into_iter().collect();
    let schema = {
        let registry = console.catalogue().current();
        let (_, tool) = found(&registry, &name)?;
        Value::Object((*tool.input_schema).clone())
    };
    let answer = match form::arguments(&schema, &values) {
        Err(why) => Answer::Refused(why),
        Ok(arguments) => {
            let principal = operator.principal.clone();
            let called = console
                .inner
                .direct
                .call_tool(principal, operator.remote, &name, arguments.clone())
                .await;
            Answer::Called(arguments, called)
        }
    };
    render(&console, &operator, &name, &values, Some(answer))
}

enum Answer {
    /// The form's fields did not make arguments: why.
    Refused(String),
    /// The arguments sent, and the result or the JSON-RPC error.
    Called(Value, Result<Value, String>),
}

fn render(
    console: &Console,
    operator: &Operator,
    name: &str,
    values: &HashMap<String, String>,
    answer: Option<Answer>,
) -> Page {
    let registry = console.catalogue().current();
    let (plugin, tool) = found(&registry, name)?;
    let listed = serde_json::to_value(mcp_tool(tool)).unwrap_or_default();
    let schema = Value::Object((*tool.input_schema).clone());
    let body = html! {
        p { "In the plugin " a href=(format!("/console/plugins/{}", plugin.name)) { (plugin.name) } "." }
        h2 { "Description" }
        pre #description.prose { (tool.description) }
        details open {
            summary { "Input schema" }
            pre #input-schema { (json(&listed["inputSchema"])) }
        }
        details {
            summary { "Output schema" }
            pre #output-schema { (listed.get("outputSchema").map_or_else(|| "none".to_string(), json)) }
        }
        @if let Some(annotations) = listed.get("annotations") {
            details { summary { "Annotations" } pre #annotations { (json(annotations)) } }
        }
        h2 { "Call it as " (operator.principal.name) }
        form #call-form method="post" action=(format!("/console/tools/{name}")) {
            input type="hidden" name="csrf" value=(operator.csrf);
            (form::fields(&schema, values))
            button #call type="submit" { "Call " (name) }
        }
        @match &answer {
            None => {}
            Some(Answer::Refused(why)) => {
                h2 { "Not called" }
                p #refused.failed { (why) }
            }
            Some(Answer::Called(arguments, called)) => {
                h2 { "Sent" }
                pre #arguments { (json(arguments)) }
                @match called {
                    Ok(result) => {
                        h2 { "Result, as the model gets it" }
                        pre #result { (json(result)) }
                    }
                    Err(error) => {
                        h2 { "Error, as the client gets it" }
                        pre #result.failed { (error) }
                    }
                }
            }
        }
    };
    let title = format!("Tool {name}");
    Ok(page_html(frame(operator, "/console/plugins", &title, body)))
}

/// The tool `name` and its plugin, or the page saying it is not served.
fn found<'a>(
    registry: &'a crate::plugin::registry::Registry,
    name: &str,
) -> Result<
    (
        &'a std::sync::Arc<crate::plugin::Plugin>,
        &'a crate::plugin::Tool,
    ),
    Refusal,
> {
    registry
        .find(name)
        .ok_or_else(|| Refusal::not_found(&format!("The tool \"{name}\"")))
}
