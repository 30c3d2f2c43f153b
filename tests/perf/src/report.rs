//! The results: rows with their baseline and target, as a markdown table or JSON, and the machine
//! they were measured on.

use serde_json::{Value, json};

/// A goal a figure is compared with (reported, never enforced).
#[derive(Clone, Copy)]
pub enum Target {
    /// moat / baseline at most this.
    RatioAtMost(f64),
    /// moat / baseline at least this.
    RatioAtLeast(f64),
    /// moat's figure at most this.
    AtMost(f64),
    None,
}

/// Whether figures are compared with their targets: a debug build's (the quick mode's in CI)
/// show that each measurement runs, not how fast moat is.
pub const JUDGED: bool = !cfg!(debug_assertions);

/// One line of the results.
pub struct Row {
    pub id: &'static str,
    pub what: String,
    pub unit: &'static str,
    /// `None`: moat did not show what this measures (a log line it does not write yet).
    pub moat: Option<f64>,
    pub baseline: Option<(&'static str, f64)>,
    pub target: Target,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        Some(self.moat? / self.baseline?.1)
    }

    fn met(&self) -> Option<bool> {
        if !JUDGED {
            return None;
        }
        match self.target {
            Target::RatioAtMost(t) => self.ratio().map(|r| r <= t),
            Target::RatioAtLeast(t) => self.ratio().map(|r| r >= t),
            Target::AtMost(t) => self.moat.map(|m| m <= t),
            Target::None => None,
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::RatioAtMost(t) => format!("≤ {t}×"),
            Target::RatioAtLeast(t) => format!("≥ {t}×"),
            Target::AtMost(t) => format!("≤ {t} {}", self.unit),
            Target::None => String::new(),
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "id": self.id,
            "what": self.what,
            "unit": self.unit,
            "moat": self.moat,
            "baseline": self.baseline.map(|(label, value)| json!({"name": label, "value": value})),
            "ratio": self.ratio(),
            "target": self.target_text(),
            "met": self.met(),
        })
    }
}

/// The results as a markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| | measure | moat | baseline | ratio | target | met |\n|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let baseline = match row.baseline {
            Some((label, value)) => format!("{} {} ({label})", figure(value), row.unit),
            None => String::new(),
        };
        let ratio = row.ratio().map(|r| format!("{r:.2}×")).unwrap_or_default();
        let moat = match row.moat {
            Some(value) => format!("{} {}", figure(value), row.unit),
            None => "missing".into(),
        };
        let met = match row.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        out.push_str(&format!(
            "| {} | {} | {moat} | {baseline} | {ratio} | {} | {met} |\n",
            row.id,
            row.what,
            row.target_text()
        ));
    }
    out
}

/// A figure with as many decimals as its size deserves.
fn figure(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// What the figures were measured on.
pub fn machine() -> Value {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string());
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| (kb / (1 << 20) as f64 * 10.0).round() / 10.0);
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "cpu": cpu,
        "memory_gib": memory_gib,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "load_average": read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    })
}

pub fn machine_line(machine: &Value) -> String {
    format!(
        "machine: {} CPUs ({}), {} GiB, Linux {}, load average {}",
        machine["cpus"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["memory_gib"],
        machine["kernel"].as_str().unwrap_or("?"),
        machine["load_average"].as_str().unwrap_or("?"),
    )
}
