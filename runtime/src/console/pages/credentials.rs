//! `/console/credentials`: the upstream credentials callers consented to, by principal and
//! source (never the tokens), each revocable: the caller is asked to consent again on their
//! next call that needs it.

use axum::extract::State;
use axum::http::StatusCode;
use maud::html;

use crate::console::answer::{Refusal, see_other};
use crate::console::layout::frame;
use crate::console::session::{Operator, Posted};
use crate::console::{Page, Shared, html as page_html};

pub async fn page(State(console): Shared, operator: Operator) -> Page {
    let broker = console.catalogue().credentials();
    let held = match &broker {
        Some(broker) => Some(broker.consents().held_by_all().await),
        None => None,
    };
    let body = html! {
        @match &held {
            None => p #no-credentials { "This moat asks no caller's consent ([credentials.NAME] consent)." }
            Some(Err(why)) => p.failed { "The credential store could not be read: " (why) }
            Some(Ok(held)) => {
                @if held.is_empty() { p #no-credentials { "No caller has connected an account yet." } }
                table #credentials {
                    thead { tr { th { "Principal" } th { "Source" } th { "Refreshable" } th { "" } } }
                    tbody {
                        @for (principal, source, refreshable) in held {
                            tr data-principal=(principal) data-source=(source) {
                                td.principal { (principal) }
                                td.source { (source) }
                                td { @if *refreshable { "yes" } @else { "no" } }
                                td {
                                    form method="post" action="/console/credentials/revoke" {
                                        input type="hidden" name="csrf" value=(operator.csrf);
                                        input type="hidden" name="principal" value=(principal);
                                        input type="hidden" name="source" value=(source);
                                        button.revoke type="submit" { "Revoke" }
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
        "/console/credentials",
        "Credentials",
        body,
    )))
}

/// `POST /console/credentials/revoke`.
pub async fn revoke(State(console): Shared, operator: Operator, form: Posted) -> Page {
    operator.check(form.get("csrf"))?;
    let (principal, source) = (form.get("principal"), form.get("source"));
    let (Some(principal), Some(source)) = (principal, source) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Say whose credential to revoke, and from which source.",
        ));
    };
    let broker = console.catalogue().credentials().ok_or_else(|| {
        Refusal::new(StatusCode::NOT_FOUND, "This moat asks no caller's consent.")
    })?;
    broker.consents().forget(source, principal).await;
    tracing::info!(
        operator = operator.principal.name,
        principal,
        source,
        "an operator revoked a caller's consented credential"
    );
    if let Some(audit) = console.catalogue().audit() {
        let target = format!("{principal} at {source}");
        audit.operator_action(&operator.principal, "revoke", &target);
    }
    Ok(see_other("/console/credentials"))
}
