//! `/console/live`: the calls running now and those just ended, kept up to date by
//! `console.js` from `/console/live/events` (server-sent events). A running call can be
//! cancelled. A watcher that falls behind misses events (the broadcast drops them, never the
//! calls): the page says so and reloads.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::StreamExt as _;
use maud::{Markup, html};
use tokio::sync::broadcast::error::RecvError;

use crate::console::answer::{Refusal, see_other};
use crate::console::layout::frame;
use crate::console::session::{Operator, Posted};
use crate::console::{Page, Shared, html as page_html};
use crate::mcp::live_calls::CallEvent;

pub async fn page(State(console): Shared, operator: Operator) -> Page {
    let (running, recent) = console.inner.calls.now();
    let body = html! {
        p { "Calls as they start and end, on every replica that tells this one." span #live-state role="status" {} }
        table #live-calls data-csrf=(operator.csrf) {
            thead { tr { th { "Replica" } th { "#" } th { "Principal" } th { "Tool" } th { "Started" } th { "Duration" } th { "Outcome" } th { "" } } }
            tbody {
                @for call in running.iter().rev().chain(recent.iter().rev()) { (row(call, &operator.csrf)) }
            }
        }
    };
    Ok(page_html(frame(
        &operator,
        "/console/live",
        "Live calls",
        body,
    )))
}

/// One call's row; `console.js` makes the same from an event.
fn row(call: &CallEvent, csrf: &str) -> Markup {
    let started = jiff::Timestamp::from_millisecond(call.started_ms as i64)
        .map(|t| t.strftime("%H:%M:%S").to_string())
        .unwrap_or_default();
    html! {
        tr data-call=(call.id) data-replica=(call.replica) data-started=(call.started_ms) {
            td.replica { (call.replica) }
            td { (call.id) }
            td.principal { (call.principal) }
            td.tool { (call.tool) }
            td.started { (started) }
            @match &call.ended {
                Some(end) => {
                    td.duration { (format!("{:.1} ms", end.duration_ms)) }
                    td.outcome data-outcome=(end.outcome) { (end.outcome) @if let Some(error) = &end.error { ": " (error) } }
                    td {}
                }
                None => {
                    td.duration { "running" }
                    td.outcome {}
                    td {
                        form method="post" action="/console/live/cancel" {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="replica" value=(call.replica);
                            input type="hidden" name="id" value=(call.id);
                            button.cancel type="submit" { "Cancel" }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /console/live/events`: each call's start and end, as JSON events.
///
/// The stream starts with the calls running now: a call that started between the page and its
/// stream (or while the stream reconnected) is shown all the same. Listening begins first, so
/// no start or end falls between the two; a call told twice is the same row.
pub async fn events(State(console): Shared, _operator: Operator) -> impl IntoResponse {
    let receiver = console.inner.calls.subscribe();
    let (running, _) = console.inner.calls.now();
    let running = futures_util::stream::iter(running.into_iter().map(|call| Ok(told(&call))));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = match receiver.recv().await {
            Ok(call) => told(&call),
            Err(RecvError::Lagged(missed)) => {
                Event::default().event("missed").data(missed.to_string())
            }
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<_, Infallible>(event), receiver))
    });
    Sse::new(running.chain(stream)).keep_alive(KeepAlive::default())
}

fn told(call: &CallEvent) -> Event {
    let data = serde_json::to_string(call).unwrap_or_default();
    Event::default().event("call").data(data)
}

/// `POST /console/live/cancel`: stops a call, here or on the replica that runs it.
pub async fn cancel(State(console): Shared, operator: Operator, form: Posted) -> Page {
    operator.check(form.get("csrf"))?;
    let replica = form.get("replica").unwrap_or(console.inner.calls.replica());
    let Some(id) = form.get("id").and_then(|id| id.parse::<u64>().ok()) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Say which call to cancel.",
        ));
    };
    if !console.inner.calls.cancel(replica, id) {
        return Err(Refusal::new(
            StatusCode::CONFLICT,
            &format!("Call {id} of {replica} is not running (any more)."),
        ));
    }
    let call = format!("call {id} of {replica}");
    tracing::info!(
        operator = operator.principal.name,
        call,
        "an operator cancelled a call"
    );
    if let Some(audit) = console.catalogue().audit() {
        audit.operator_action(&operator.principal, "cancel", &call);
    }
    Ok(see_other("/console/live"))
}
