//! `moat doctor`: what this machine has for moat, one line per check, each `ok`, `note` or
//! `problem`. Exit code 1 when some check found a problem.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use clap::ValueEnum;

use moat::supply::policy::Policy;

use super::cache;
use super::host_files::{config_file, points_at};
use super::hosts::Host;
use super::print_out;

/// The target plugins are built for; only authors need it.
const TARGET: &str = "wasm32-wasip2";

pub async fn doctor() -> Result<ExitCode> {
    let mut report = Report::default();
    wasm_target(&mut report);
    cache_dir(&mut report);
    policy(&mut report);
    let moat = std::env::current_exe()?;
    let moat = moat.canonicalize().unwrap_or(moat);
    for host in Host::value_variants() {
        host_config(&mut report, *host, &moat);
    }
    print_out(&report.lines.join("\n"));
    Ok(if report.problems > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(Default)]
struct Report {
    lines: Vec<String>,
    problems: usize,
}

impl Report {
    fn ok(&mut self, line: String) {
        self.lines.push(format!("ok       {line}"));
    }
    fn note(&mut self, line: String) {
        self.lines.push(format!("note     {line}"));
    }
    fn problem(&mut self, line: String) {
        self.problems += 1;
        self.lines.push(format!("problem  {line}"));
    }
}

fn wasm_target(report: &mut Report) {
    let installed = std::process::Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match installed {
        Ok(out)
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == TARGET) =>
        {
            report.ok(format!(
                "the {TARGET} target is installed (to build plugins)"
            ))
        }
        Ok(_) => report.note(format!(
            "the {TARGET} target is not installed; plugin authors need it: `rustup target add \
             {TARGET}`"
        )),
        Err(_) => report.note(format!(
            "no rustup, so no {TARGET} target; only plugin authors need it"
        )),
    }
}

fn cache_dir(report: &mut Report) {
    let Ok(dir) = cache::dir() else {
        report.problem("no cache folder: set MOAT_CACHE_DIR (or HOME)".into());
        return;
    };
    let size = cache::human(cache::total_size(&dir));
    match writable(&dir) {
        Ok(()) => report.ok(format!(
            "the cache {} is writable, holding {size}",
            dir.display()
        )),
        Err(error) => report.problem(format!(
            "the cache {} is not writable ({error}); plugins are compiled anew at every start",
            dir.display()
        )),
    }
}

/// Whether a file can be made in `dir` (made if need be, as moat would).
fn writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

fn policy(report: &mut Report) {
    match Policy::resolve(None) {
        Ok(policy) => match &policy.source {
            Some(path) => report.ok(format!("the policy {} is in force", path.display())),
            None => report.ok("no policy is in force (none at /etc/moat/policy.toml)".into()),
        },
        Err(error) => report.problem(format!("the system policy does not load: {error:#}")),
    }
}

fn host_config(report: &mut Report, host: Host, moat: &Path) {
    let name = host
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let Some(path) = config_file(host) else {
        report.note(format!("{name}: no home folder to look in"));
        return;
    };
    if !path.exists() {
        report.note(format!(
            "{name}: no {} (`moat config {name} --write` makes it)",
            path.display()
        ));
        return;
    }
    match points_at(host, &path, moat) {
        Some(true) => report.ok(format!("{name}: {} starts this moat", path.display())),
        Some(false) => report.note(format!(
            "{name}: {} does not start this moat ({}); `moat config {name} … --write` adds it",
            path.display(),
            moat.display()
        )),
        None => report.problem(format!(
            "{name}: {} is not JSON with a servers table moat can read",
            path.display()
        )),
    }
}
