//! What guests make moat write to its own log (stderr, which hosts keep as files): their `log`
//! messages, what they wrote to stdout and stderr, the accesses moat denied them. Each plugin
//! has a budget of bytes that refills at a steady rate, shared by all its calls: a guest that
//! logs in a loop loses its own lines, not the operator's disk, and the log says how much went.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The bytes a plugin may have moat log per second, on average.
pub const RATE_BYTES_PER_SEC: u64 = 64 << 10;

/// The bytes a plugin may have moat log at once, after a quiet while.
pub const BURST_BYTES: u64 = 256 << 10;

/// How serious a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Debug,
    Info,
    Warning,
    Error,
}

/// One plugin's log budget.
#[derive(Debug)]
pub struct GuestLog {
    plugin: Arc<str>,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes that may be logged now.
    tokens: u64,
    refilled: Instant,
    dropped_lines: u64,
    dropped_bytes: u64,
    /// Bytes admitted since the plugin was loaded.
    logged_bytes: u64,
}

impl GuestLog {
    pub fn new(plugin: Arc<str>) -> Self {
        Self {
            plugin,
            bucket: Mutex::new(Bucket {
                tokens: BURST_BYTES,
                refilled: Instant::now(),
                dropped_lines: 0,
                dropped_bytes: 0,
                logged_bytes: 0,
            }),
        }
    }

    /// Whether a line of `bytes` fits the budget now; one that does not is counted as dropped.
    pub fn admit(&self, bytes: usize) -> bool {
        let bytes = bytes as u64;
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let earned =
            now.duration_since(bucket.refilled).as_micros() as u64 * RATE_BYTES_PER_SEC / 1_000_000;
        if earned > 0 {
            bucket.tokens = (bucket.tokens + earned).min(BURST_BYTES);
            bucket.refilled = now;
        }
        if bucket.tokens >= bytes {
            bucket.tokens -= bytes;
            bucket.logged_bytes += bytes;
            Self::report(&self.plugin, &mut bucket);
            true
        } else {
            bucket.dropped_lines += 1;
            bucket.dropped_bytes += bytes;
            false
        }
    }

    /// Logs `message` if it fits the budget.
    pub fn write(&self, severity: Severity, message: &str) {
        if !self.admit(message.len()) {
            return;
        }
        let plugin = &*self.plugin;
        match severity {
            Severity::Debug => tracing::debug!(plugin, "{message}"),
            Severity::Info => tracing::info!(plugin, "{message}"),
            Severity::Warning => tracing::warn!(plugin, "{message}"),
            Severity::Error => tracing::error!(plugin, "{message}"),
        }
    }

    /// Says how much was dropped since the last report, if anything: at the end of each call,
    /// so that a plugin that floods and then stops still has its drops told.
    pub fn report_dropped(&self) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        Self::report(&self.plugin, &mut bucket);
    }

    /// The bytes of the lines admitted since the plugin was loaded.
    pub fn logged_bytes(&self) -> u64 {
        self.bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .logged_bytes
    }

    /// Lines and bytes dropped and not yet reported.
    pub fn dropped(&self) -> (u64, u64) {
        let bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        (bucket.dropped_lines, bucket.dropped_bytes)
    }

    fn report(plugin: &str, bucket: &mut Bucket) {
        if bucket.dropped_lines > 0 {
            tracing::warn!(
                plugin,
                "{} log lines ({} bytes) of this plugin were dropped: it logged more than {} \
                 KiB/s (bursts of {} KiB)",
                bucket.dropped_lines,
                bucket.dropped_bytes,
                RATE_BYTES_PER_SEC >> 10,
                BURST_BYTES >> 10
            );
            bucket.dropped_lines = 0;
            bucket.dropped_bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_budget_and_counted() {
        let log = GuestLog::new("p".into());
        let line = 16 << 10;
        let started = Instant::now();
        let admitted = (0..1000).filter(|_| log.admit(line)).count() as u64;
        let elapsed = started.elapsed().as_secs_f64();
        // The burst, plus whatever the rate earned while the loop ran.
        let most = (BURST_BYTES + (elapsed * RATE_BYTES_PER_SEC as f64) as u64) / line as u64 + 1;
        assert!(admitted >= BURST_BYTES / line as u64, "{admitted}");
        assert!(admitted <= most, "{admitted} > {most}");
        let (lines, bytes) = log.dropped();
        assert_eq!(lines, 1000 - admitted);
        assert_eq!(bytes, lines * line as u64);
        log.report_dropped();
        assert_eq!(log.dropped(), (0, 0));
    }

    #[test]
    fn the_budget_refills_at_its_rate() {
        let log = GuestLog::new("p".into());
        assert!(log.admit(BURST_BYTES as usize));
        assert!(!log.admit(1024));
        std::thread::sleep(std::time::Duration::from_millis(100));
        // 100 ms earn 6.4 KiB.
        assert!(log.admit(4 << 10));
        assert!(!log.admit(8 << 10));
    }
}
