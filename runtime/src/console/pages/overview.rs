//! `/console/`: what this moat is and does, at a glance.

use std::time::SystemTime;

use axum::extract::State;
use maud::{Markup, html};

use crate::console::layout::{frame, when};
use crate::console::session::Operator;
use crate::console::{Page, Shared, html as page_html};
use crate::mcp::live_calls::Minute;

pub async fn page(State(console): Shared, operator: Operator) -> Page {
    let registry = console.catalogue().current();
    let reloads = &console.inner.reloads;
    let uptime = reloads
        .started()
        .and_then(|started| SystemTime::now().duration_since(started).ok())
        .unwrap_or_default();
    let replica = console
        .catalogue()
        .backends()
        .replicas
        .instance()
        .to_string();
    let (running, _) = console.inner.calls.now();
    let minutes = console.inner.calls.minutes();
    let (calls, errors) = minutes
        .iter()
        .fold((0, 0), |(c, e), m| (c + m.calls, e + m.errors));
    let body = html! {
        dl.facts {
            dt { "Version" } dd #version { (env!("CARGO_PKG_VERSION")) }
            dt { "Up for" } dd #uptime { (duration(uptime.as_secs())) }
            dt { "Replica" } dd #replica { (replica) }
            dt { "Shared store" } dd #store {
                @match &console.inner.cluster {
                    None => "none: this moat shares no state ([cluster])",
                    Some(cluster) if cluster.is_up() => { "Redis answers (replica " (cluster.replica()) ")" }
                    Some(_) => span.failed { "Redis does not answer: each replica serves on its own copy until it does" },
                }
            }
            dt { "Plugins" } dd #plugin-count { (registry.plugins().len()) }
            dt { "Tools" } dd #tool-count { (registry.tools().count()) }
            dt { "Calls running" } dd #running-count { (running.len()) }
        }
        section aria-labelledby="chart-title" {
            h2 #chart-title { "Calls in the last hour" }
            p { (calls) " calls, " (errors) " of them failed or refused." }
            (chart(&minutes))
        }
        section #last-reload aria-labelledby="reload-title" {
            h2 #reload-title { "Last reload" }
            @match reloads.last() {
                None => p { "None since moat started." }
                Some(last) => {
                    p {
                        (when(last.at)) " (" (last.reason) "): "
                        @if last.error.is_some() { b.failed { "failed" } ", still serving what was loaded before." }
                        @else { b.ok { "succeeded" } }
                    }
                    @if let Some(error) = &last.error { pre.reload-error { (error) } }
                }
            }
        }
    };
    Ok(page_html(frame(&operator, "/console/", "Overview", body)))
}

/// `seconds` as days, hours, minutes and seconds.
fn duration(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h) {
        (0, 0) => format!("{m} min {s} s"),
        (0, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

/// Calls (and failures) per minute as bars, drawn here: no script, no chart library.
fn chart(minutes: &[Minute]) -> Markup {
    const WIDTH: usize = 600;
    const HEIGHT: u32 = 120;
    let most = minutes.iter().map(|m| m.calls).max().unwrap_or(0).max(1);
    let bar = WIDTH / minutes.len().max(1);
    let height = |n: u32| (u64::from(n) * u64::from(HEIGHT) / u64::from(most)) as u32;
    html! {
        svg #calls-chart role="img" viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 16))
            aria-label=(format!("Calls per minute over the last hour; the most in a minute: {most}")) {
            @for (i, minute) in minutes.iter().enumerate() {
                @let x = i * bar;
                @if minute.calls > 0 {
                    rect.calls x=(x) y=(HEIGHT - height(minute.calls)) width=(bar - 1) height=(height(minute.calls)) {
                        title { (minute.calls) " calls, " (minute.errors) " failed" }
                    }
                }
                @if minute.errors > 0 {
                    rect.errors x=(x) y=(HEIGHT - height(minute.errors)) width=(bar - 1) height=(height(minute.errors)) {}
                }
            }
            line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
            text x="0" y=(HEIGHT + 14) { "60 min ago" }
            text x=(WIDTH) y=(HEIGHT + 14) text-anchor="end" { "now" }
            text x="2" y="10" { (most) "/min" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_a_bar_for_each_busy_minute() {
        let mut minutes = vec![Minute::default(); 60];
        minutes[10] = Minute {
            at: 10,
            calls: 4,
            errors: 1,
        };
        minutes[59] = Minute {
            at: 59,
            calls: 2,
            errors: 0,
        };
        let svg = chart(&minutes).into_string();
        assert_eq!(svg.matches("class=\"calls\"").count(), 2);
        assert_eq!(svg.matches("class=\"errors\"").count(), 1);
        assert!(
            svg.contains("height=\"120\""),
            "the busiest minute is full height: {svg}"
        );
        assert_eq!(duration(3725), "1 h 2 min");
    }
}
