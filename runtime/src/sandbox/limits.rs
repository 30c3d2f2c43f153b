//! How much one call may use, and the byte units its limits are given in.

use std::time::Duration;

use anyhow::{Context, Result};

/// How much one call may use.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Wall-clock time a call may take, instantiation included.
    pub deadline: Duration,
    /// The most linear memory the instance may grow to, all its memories together.
    pub max_memory_bytes: usize,
    /// The most the guest may write to stdout, and again to stderr.
    pub max_output_bytes: usize,
    /// The largest result a call may return, counted as the bytes of its strings and lists.
    pub max_result_bytes: usize,
    /// Calls of this plugin that may run at once.
    pub max_concurrent_calls: usize,
    /// Calls that may wait for a free slot; one more fails at once.
    pub max_queued_calls: usize,
    /// Fuel a call may burn (about one unit per Wasm instruction), or `None` for no count; only
    /// on an engine built with fuel metering.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            max_memory_bytes: 256 << 20,
            max_output_bytes: 64 << 10,
            max_result_bytes: 4 << 20,
            max_concurrent_calls: 16,
            max_queued_calls: 64,
            fuel: None,
        }
    }
}

/// The error the epoch callback raises at the deadline, to tell it from other traps.
#[derive(Debug)]
pub(crate) struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

/// A size given in KiB (`shift` 10) or MiB (20), in bytes; a size too large to count is an error
/// naming its key, never a silently wrapped number.
pub fn in_bytes(value: Option<usize>, shift: u32, key: &str) -> Result<Option<usize>> {
    value
        .map(|v| {
            v.checked_mul(1 << shift)
                .with_context(|| format!("{key} = {v} is too large"))
        })
        .transpose()
}
