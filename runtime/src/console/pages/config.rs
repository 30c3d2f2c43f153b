//! `/console/config`: the moat.toml in force, every secret in it masked, and a reload.

use axum::extract::State;
use axum::http::StatusCode;
use maud::html;

use crate::console::answer::{Refusal, see_other};
use crate::console::layout::frame;
use crate::console::mask::masked;
use crate::console::session::{Operator, Posted};
use crate::console::{Page, Shared, html as page_html};

pub async fn page(State(console): Shared, operator: Operator) -> Page {
    let current = console.inner.reloads.current();
    let body = html! {
        @match &current.path {
            None => p { "moat serves plugins named on its command line, with no moat.toml." }
            Some(path) => {
                p { "As read from " code #config-path { (path.display()) } " at the last start or reload that succeeded; secrets are masked." }
                pre #config { (masked(&current.text)) }
            }
        }
        form #reload-form method="post" action="/console/reload" {
            input type="hidden" name="csrf" value=(operator.csrf);
            button #reload type="submit" { "Reload now" }
            " The overview shows how it went."
        }
    };
    Ok(page_html(frame(
        &operator,
        "/console/config",
        "Configuration",
        body,
    )))
}

/// `POST /console/reload`: asks the watch for a reload, as SIGHUP does.
pub async fn reload(State(console): Shared, operator: Operator, form: Posted) -> Page {
    operator.check(form.get("csrf"))?;
    if !console.inner.reloads.ask() {
        return Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Nothing reloads this moat now.",
        ));
    }
    tracing::info!(
        operator = operator.principal.name,
        "an operator asked for a reload"
    );
    if let Some(audit) = console.catalogue().audit() {
        audit.operator_action(&operator.principal, "reload", "moat.toml");
    }
    Ok(see_other("/console/"))
}
