//! The `chatty` test plugin: every way a guest can talk to the host, or misbehave.

use std::io::Write;
use std::time::Duration;

moat_guest::generate!("chatty");

use moat::plugin::log::{Level, log};
use moat::plugin::progress::report;
use moat::plugin::tasks::detach;

struct Chatty;

impl Guest for Chatty {
    fn log_levels(message: String) -> u32 {
        let levels = [
            Level::Debug,
            Level::Info,
            Level::Notice,
            Level::Warning,
            Level::Error,
        ];
        for level in levels {
            log(level, &message);
        }
        levels.len() as u32
    }

    fn count(steps: u32, pause: u32) -> u32 {
        for step in 1..=steps {
            report(
                f64::from(step),
                Some(f64::from(steps)),
                Some(&format!("step {step} of {steps}")),
            );
            if pause > 0 {
                std::thread::sleep(Duration::from_millis(u64::from(pause)));
            }
        }
        steps
    }

    fn crash(message: String) -> String {
        panic!("{message}");
    }

    fn spin() -> u64 {
        let mut turns = 0u64;
        loop {
            turns = std::hint::black_box(turns.wrapping_add(1));
        }
    }

    fn nap(ms: u32) -> u32 {
        std::thread::sleep(Duration::from_millis(u64::from(ms)));
        ms
    }

    fn nap_as_task(ms: u32) -> u32 {
        detach();
        Self::nap(ms)
    }

    fn nap_once_as_task(ms: u32) -> u32 {
        detach();
        Self::nap(ms)
    }

    fn shout(out: String, err: String) -> String {
        let mut stdout = std::io::stdout();
        stdout.write_all(out.as_bytes()).expect("writing stdout");
        stdout.flush().expect("flushing stdout");
        let mut stderr = std::io::stderr();
        stderr.write_all(err.as_bytes()).expect("writing stderr");
        stderr.flush().expect("flushing stderr");
        "done".into()
    }
}

export!(Chatty);
