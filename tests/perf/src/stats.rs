//! Percentiles of measured durations.

use std::time::Duration;

/// The summary of one series of timings.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub p50: Duration,
    pub p99: Duration,
    pub count: usize,
}

impl Stats {
    /// Summarises `times`; `None` if there are none.
    pub fn of(mut times: Vec<Duration>) -> Option<Self> {
        if times.is_empty() {
            return None;
        }
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        Some(Self {
            p50: at(0.50),
            p99: at(0.99),
            count: times.len(),
        })
    }
}

/// The median of a few numbers (start-up times, throughput rounds).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
