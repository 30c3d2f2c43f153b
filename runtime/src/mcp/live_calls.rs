//! The calls running now and those just ended, for whoever watches this moat (the operator's
//! console): each call's start and end as an event on a broadcast that drops what a slow
//! watcher cannot take, the calls a minute over the last hour, the principals seen with their
//! recent refusals and failures, and a way to cancel a running call. Under `[cluster]` each start
//! and end is told to the other replicas (`shared::replicas::Event::Call`), whose consoles show
//! it beside their own calls; a cancel reaches the replica that runs the call the same way.
//! Those events are told, not kept: a watcher may miss another replica's call.
//!
//! Kept only once something watches ([`crate::mcp::catalogue::Catalogue::watch_calls`]): a moat
//! without a console pays nothing per call.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::access::Principal;
use crate::mcp::audit::Outcome;
pub use crate::shared::replicas::{CallEnd, CallEvent};
use crate::shared::replicas::{Event, Replicas};

/// Events a watcher may fall behind by before it misses some.
const FEED_CAPACITY: usize = 1024;
/// The minutes of counts kept.
const MINUTES: usize = 60;
/// Ended calls kept for a page that opens now.
const RECENT: usize = 50;
/// Principals remembered; the one seen longest ago makes room.
const MAX_SEEN: usize = 1000;
/// Refusals and failures remembered per principal.
const PROBLEMS: usize = 10;

/// Calls and failures in one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Minute {
    /// Minutes since the Unix epoch.
    pub at: u64,
    pub calls: u32,
    pub errors: u32,
}

/// A principal as calls showed it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub principal: Principal,
    pub last: SystemTime,
    pub calls: u64,
    /// The latest refusals and failures, newest last.
    pub problems: VecDeque<CallEvent>,
}

struct Running {
    event: CallEvent,
    started: Instant,
    stop: CancellationToken,
}

#[derive(Default)]
struct State {
    running: HashMap<u64, Running>,
    /// Other replicas' calls running, as they told them.
    elsewhere: HashMap<(String, u64), CallEvent>,
    recent: VecDeque<CallEvent>,
    minutes: VecDeque<Minute>,
    seen: HashMap<String, Seen>,
}

/// The calls of this moat (and of its other replicas) as they start and end.
pub struct LiveCalls {
    next: AtomicU64,
    state: Mutex<State>,
    feed: broadcast::Sender<CallEvent>,
    /// This replica's run, as calls name it.
    replica: String,
    /// The other replicas, told of each call.
    replicas: Arc<dyn Replicas>,
}

impl Default for LiveCalls {
    fn default() -> Self {
        Self::new(Arc::new(crate::shared::replicas::Alone::default()))
    }
}

impl LiveCalls {
    /// Watching the calls of this replica among `replicas`.
    pub fn new(replicas: Arc<dyn Replicas>) -> Self {
        Self {
            next: AtomicU64::new(1),
            state: Mutex::default(),
            feed: broadcast::Sender::new(FEED_CAPACITY),
            replica: replicas.instance().to_string(),
            replicas,
        }
    }

    /// This replica's run, as its calls name it.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Records the start of a call of `tool` by `principal`, `stop` being what ends it early;
    /// the call's number.
    pub fn start(&self, principal: &Principal, tool: &str, stop: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let event = CallEvent {
            replica: self.replica.clone(),
            id,
            principal: principal.name.clone(),
            tool: tool.to_string(),
            started_ms: millis(SystemTime::now()),
            ended: None,
        };
        let mut state = self.state.lock().expect("live calls lock");
        let now = SystemTime::now();
        match state.seen.entry(principal.name.clone()) {
            Entry::Occupied(mut seen) => {
                let seen = seen.get_mut();
                // Kept as last seen (a new token may bring new groups), copied only then.
                if seen.principal != *principal {
                    seen.principal = principal.clone();
                }
                seen.last = now;
                seen.calls += 1;
            }
            Entry::Vacant(place) => {
                place.insert(Seen {
                    principal: principal.clone(),
                    last: now,
                    calls: 1,
                    problems: VecDeque::new(),
                });
            }
        }
        if state.seen.len() > MAX_SEEN {
            let oldest = state.seen.iter().min_by_key(|(_, s)| s.last);
            if let Some(name) = oldest.map(|(name, _)| name.clone()) {
                state.seen.remove(&name);
            }
        }
        state.running.insert(
            id,
            Running {
                event: event.clone(),
                started: Instant::now(),
                stop,
            },
        );
        drop(state);
        self.tell(event);
        id
    }

    /// Tells the watchers here and the other replicas of `event`.
    fn tell(&self, event: CallEvent) {
        self.replicas.clone().tell(Event::Call {
            call: event.clone(),
        });
        // No watcher: nothing to tell.
        let _ = self.feed.send(event);
    }

    /// Records how call `id` ended.
    pub fn end(&self, id: u64, outcome: Outcome, error: Option<&str>) {
        let mut state = self.state.lock().expect("live calls lock");
        let Some(running) = state.running.remove(&id) else {
            return;
        };
        let mut event = running.event;
        let end = CallEnd {
            duration_ms: running.started.elapsed().as_secs_f64() * 1000.0,
            outcome: outcome.as_str().to_string(),
            error: error.map(str::to_string),
        };
        if end.failed()
            && let Some(seen) = state.seen.get_mut(&event.principal)
        {
            let mut problem = event.clone();
            problem.ended = Some(end.clone());
            seen.problems.push_back(problem);
            if seen.problems.len() > PROBLEMS {
                seen.problems.pop_front();
            }
        }
        event.ended = Some(end);
        state.ended(&event);
        drop(state);
        self.tell(event);
    }

    /// Records a call another replica told of.
    pub fn heard(&self, event: CallEvent) {
        let mut state = self.state.lock().expect("live calls lock");
        let key = (event.replica.clone(), event.id);
        match &event.ended {
            None => {
                // A replica that stopped never tells the end of its calls: keep a bounded few.
                if state.elsewhere.len() >= MAX_SEEN {
                    let oldest = state.elsewhere.values().min_by_key(|e| e.started_ms);
                    if let Some(key) = oldest.map(|e| (e.replica.clone(), e.id)) {
                        state.elsewhere.remove(&key);
                    }
                }
                state.elsewhere.insert(key, event.clone());
            }
            Some(_) => {
                state.elsewhere.remove(&key);
                state.ended(&event);
            }
        }
        drop(state);
        let _ = self.feed.send(event);
    }

    /// Stops call `id` of `replica`: here, or by telling the replica that runs it. Whether it
    /// runs (as far as this replica knows).
    pub fn cancel(&self, replica: &str, id: u64) -> bool {
        if replica == self.replica {
            return self.cancel_here(id);
        }
        let known = {
            let state = self.state.lock().expect("live calls lock");
            state.elsewhere.contains_key(&(replica.to_string(), id))
        };
        if known {
            self.replicas.clone().tell(Event::CancelCall {
                replica: replica.to_string(),
                id,
            });
        }
        known
    }

    /// Stops this replica's call `id`, if it runs; whether it did.
    pub fn cancel_here(&self, id: u64) -> bool {
        let state = self.state.lock().expect("live calls lock");
        match state.running.get(&id) {
            Some(running) => {
                running.stop.cancel();
                true
            }
            None => false,
        }
    }

    /// The calls running now, the oldest first, then the latest ended ones, newest last.
    pub fn now(&self) -> (Vec<CallEvent>, Vec<CallEvent>) {
        let state = self.state.lock().expect("live calls lock");
        let here = state.running.values().map(|r| r.event.clone());
        let mut running: Vec<CallEvent> = here.chain(state.elsewhere.values().cloned()).collect();
        running.sort_by_key(|event| event.started_ms);
        (running, state.recent.iter().cloned().collect())
    }

    /// Each of the last hour's minutes, the oldest first, the current one last.
    pub fn minutes(&self) -> Vec<Minute> {
        let state = self.state.lock().expect("live calls lock");
        let now = minute_now();
        (now + 1 - MINUTES as u64..=now)
            .map(|at| {
                let counted = state.minutes.iter().find(|m| m.at == at);
                counted.copied().unwrap_or(Minute {
                    at,
                    ..Minute::default()
                })
            })
            .collect()
    }

    /// The principals seen, the latest first.
    pub fn seen(&self) -> Vec<Seen> {
        let state = self.state.lock().expect("live calls lock");
        let mut seen: Vec<Seen> = state.seen.values().cloned().collect();
        seen.sort_by_key(|s| std::cmp::Reverse(s.last));
        seen
    }

    /// The events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CallEvent> {
        self.feed.subscribe()
    }
}

impl State {
    /// Counts an ended call, and keeps it among the recent ones.
    fn ended(&mut self, event: &CallEvent) {
        let failed = event.ended.as_ref().is_some_and(CallEnd::failed);
        count(&mut self.minutes, minute_now(), failed);
        self.recent.push_back(event.clone());
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }
}

/// Counts a call in the minute `at`, dropping minutes older than the hour.
fn count(minutes: &mut VecDeque<Minute>, at: u64, failed: bool) {
    if minutes.back().is_none_or(|last| last.at != at) {
        minutes.push_back(Minute {
            at,
            ..Minute::default()
        });
    }
    while minutes.front().is_some_and(|m| m.at + MINUTES as u64 <= at) {
        minutes.pop_front();
    }
    let minute = minutes.back_mut().expect("pushed above");
    minute.calls += 1;
    minute.errors += u32::from(failed);
}

fn minute_now() -> u64 {
    millis(SystemTime::now()) / 60_000
}

fn millis(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    since.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_told_as_it_starts_and_ends_and_counted_once() {
        let calls = LiveCalls::default();
        let mut feed = calls.subscribe();
        let alice = Principal::stdio("alice");
        let stop = CancellationToken::new();
        let id = calls.start(&alice, "echo_echo", stop.clone());
        let (running, recent) = calls.now();
        assert_eq!((running.len(), recent.len()), (1, 0));
        assert!(calls.cancel("local", id) && stop.is_cancelled());
        calls.end(id, Outcome::Cancelled, Some("cancelled by an operator"));
        calls.end(id, Outcome::Ok, None); // a second end changes nothing
        assert!(!calls.cancel("local", id), "an ended call is not running");
        let started = feed.try_recv().unwrap();
        let ended = feed.try_recv().unwrap();
        assert!(started.ended.is_none());
        assert_eq!(ended.ended.as_ref().unwrap().outcome, "cancelled");
        assert!(feed.try_recv().is_err());
        let minutes = calls.minutes();
        assert_eq!(minutes.len(), MINUTES);
        let last = minutes.last().unwrap();
        assert_eq!((last.calls, last.errors), (1, 1));
        let seen = calls.seen();
        assert_eq!(seen[0].principal.name, "alice");
        assert_eq!(seen[0].problems.len(), 1);
    }

    #[test]
    fn calls_from_many_threads_at_once_are_each_counted_once() {
        let calls = std::sync::Arc::new(LiveCalls::default());
        let mut feed = calls.subscribe();
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let calls = calls.clone();
                std::thread::spawn(move || {
                    let principal = Principal::stdio(&format!("p{n}"));
                    for _ in 0..100 {
                        let id = calls.start(&principal, "t", CancellationToken::new());
                        calls.end(id, Outcome::Ok, None);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let (running, recent) = calls.now();
        assert!(running.is_empty());
        assert_eq!(recent.len(), RECENT);
        let counted: u32 = calls.minutes().iter().map(|m| m.calls).sum();
        assert_eq!(counted, 800);
        assert_eq!(calls.seen().iter().map(|s| s.calls).sum::<u64>(), 800);
        // 1600 events, more than the feed holds: a watcher that fell behind is told so.
        assert!(matches!(
            feed.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(missed)) if missed == 1600 - FEED_CAPACITY as u64
        ));
    }

    #[test]
    fn another_replicas_calls_are_shown_and_counted_beside_these() {
        let calls = LiveCalls::default();
        let mut feed = calls.subscribe();
        let mut call = CallEvent {
            replica: "r2".into(),
            id: 7,
            principal: "bob".into(),
            tool: "echo_echo".into(),
            started_ms: 1,
            ended: None,
        };
        calls.heard(call.clone());
        assert_eq!(calls.now().0, [call.clone()]);
        assert!(
            calls.cancel("r2", 7),
            "a call running elsewhere is cancelled there"
        );
        assert!(!calls.cancel("r3", 7), "no such call");
        call.ended = Some(CallEnd {
            duration_ms: 3.0,
            outcome: "denied".into(),
            error: None,
        });
        calls.heard(call.clone());
        let (running, recent) = calls.now();
        assert!(running.is_empty());
        assert_eq!(recent, [call]);
        assert_eq!(calls.minutes().last().unwrap().errors, 1);
        assert_eq!(
            (feed.try_recv().is_ok(), feed.try_recv().is_ok()),
            (true, true)
        );
        assert!(calls.seen().is_empty(), "callers are this replica's");
    }

    #[test]
    fn minutes_older_than_the_hour_go() {
        let mut minutes = VecDeque::new();
        count(&mut minutes, 100, false);
        count(&mut minutes, 100, true);
        count(&mut minutes, 159, false);
        assert_eq!(minutes.len(), 2);
        count(&mut minutes, 160, false);
        assert_eq!(
            minutes.front().unwrap().at,
            159,
            "minute 100 is an hour old"
        );
        assert_eq!(minutes.back().unwrap().calls, 1);
    }
}
