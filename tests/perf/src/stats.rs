//! Percentiles of measured durations.

use std::time::Duration;

use anyhow::Result;

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

/// Times two contenders call by call: `calls` rounds of one call each, after a tenth as many
/// untimed warm-up rounds, who goes first alternating so that neither always follows the other's
/// wake-up. `call(which)` makes contender `which`'s call (0 or 1) and returns the time it took.
pub fn interleaved(
    calls: usize,
    mut call: impl FnMut(usize) -> Result<Duration>,
) -> Result<[Stats; 2]> {
    let mut times = [Vec::with_capacity(calls), Vec::with_capacity(calls)];
    for i in 0..(calls / 10 + calls) {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let time = call(which)?;
            if i >= calls / 10 {
                times[which].push(time);
            }
        }
    }
    Ok(times.map(|t| Stats::of(t).expect("calls were made")))
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
