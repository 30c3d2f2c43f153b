//! A process's memory, as Linux reports it in `/proc/PID/status`.

use anyhow::{Context, Result};

/// Resident memory now and at its peak, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss: u64,
    pub hwm: u64,
}

pub fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading the status of process {pid}"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("reading {line:?}"))?;
        Ok(kb * 1024)
    };
    Ok(Memory {
        rss: field("VmRSS:")?,
        hwm: field("VmHWM:")?,
    })
}

/// Resets the process's peak (`VmHWM`) to its current resident size, so that a later peak is the
/// peak of what happened in between. False where the kernel does not allow it.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
