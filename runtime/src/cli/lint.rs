//! `moat lint`: what in a plugin makes a model choose or call its tools wrong (see
//! `moat::plugin::lint`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use moat::plugin::lint::{Finding, lint};
use moat::supply::policy::Policy;

use super::load::{configured_source, load_one, load_source};
use super::print_out;

/// Lints each plugin; with `strict`, any finding makes the exit code 1.
pub async fn run(
    plugins: &[String],
    config: Option<&Path>,
    strict: bool,
    as_json: bool,
    policy: &Policy,
) -> Result<ExitCode> {
    let mut reports = Vec::new();
    let mut total = 0;
    for text in plugins {
        let (plugin, _) = match config {
            Some(config) => load_source(configured_source(config, text)?, policy).await?,
            None => load_one(text, policy).await?,
        };
        let findings = lint(&plugin);
        total += findings.len();
        reports.push((plugin.name.to_string(), findings));
    }
    if as_json {
        let reports: Vec<_> = reports
            .iter()
            .map(|(plugin, findings)| {
                let findings: Vec<_> = findings
                    .iter()
                    .map(|f| json!({"subject": f.subject, "message": f.message}))
                    .collect();
                json!({"plugin": plugin, "findings": findings})
            })
            .collect();
        print_out(&serde_json::to_string_pretty(&reports)?);
    } else {
        let mut out = String::new();
        for (plugin, findings) in &reports {
            out.push_str(&render(plugin, findings));
        }
        print_out(out.trim_end());
    }
    Ok(if strict && total > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// One plugin's findings as text, a line each.
pub fn render(plugin: &str, findings: &[Finding]) -> String {
    let mut out = match findings.len() {
        0 => format!("{plugin}: no findings\n"),
        1 => format!("{plugin}: 1 finding\n"),
        n => format!("{plugin}: {n} findings\n"),
    };
    for finding in findings {
        out.push_str(&format!("  {}: {}\n", finding.subject, finding.message));
    }
    out
}
