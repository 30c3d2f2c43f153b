//! State that replicas of moat share, through Redis (or Valkey: the same protocol), when
//! `[cluster]` names one; without it moat is one process and nothing here runs.
//!
//! Each module is the Redis backend of one of `shared`'s interfaces, built together once by
//! [`Cluster::backends`]: [`quotas`] (a principal's rate and call slots, decided by one script
//! in Redis per request), [`sessions`] (legacy sessions any replica can restore, bound to the
//! principal that opened them), [`tasks`] (task records any replica can answer for),
//! [`consents`] (callers' consented tokens, their refresh turns and the steps of consent flows,
//! sealed) and [`events`] (this replica among the others, and what one tells the others). Every
//! key expires by itself, so a replica that dies leaves nothing behind that outlives its TTL; each
//! replica also keeps a key saying it is alive, so others can tell when the one running a task
//! died. Nothing outside this layer speaks to Redis.
//!
//! When Redis cannot be reached, moat goes on with what each replica knows (quotas per replica,
//! sessions only where they were opened: `shared`'s fallbacks), says so once in the log and in
//! `moat_cluster_up`, and probes Redis every second until it answers again; requests in between
//! never wait on it.

pub mod consents;
pub mod events;
pub mod quotas;
pub mod sessions;
pub mod tasks;
#[cfg(test)]
pub(crate) mod test_redis;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Notify, broadcast};

use self::consents::SharedKeepings;
use self::events::Event;
use self::quotas::SharedQuotas;
use self::sessions::SharedSessions;
use self::tasks::SharedTasks;
use crate::shared::Backends;
use crate::shared::seal::Seal;

/// How long one Redis command may take before moat goes on without it.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// How often an unreachable Redis is asked whether it is back, and a replica says it is alive.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a replica that stopped saying so is still taken for alive.
const ALIVE_FOR: Duration = Duration::from_secs(5);

/// `[cluster]`, checked.
#[derive(Clone)]
pub struct Settings {
    /// `redis://` or `rediss://`, with any password in it.
    pub redis: String,
    /// This replica's name in audit lines, logs and metrics.
    pub replica: String,
}

impl std::fmt::Debug for Settings {
    // The URL may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("redis", &redacted(&self.redis))
            .field("replica", &self.replica)
            .finish()
    }
}

impl PartialEq for Settings {
    fn eq(&self, other: &Self) -> bool {
        self.redis == other.redis && self.replica == other.replica
    }
}

/// `url` without its password, for messages.
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://…@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// The connection to the shared store, and whether it answers.
pub struct Cluster {
    replica: String,
    /// This run of the replica: its name and a random suffix, so that a replica started again
    /// under the same name is not taken for the one that died.
    instance: String,
    /// Where Redis is, without its password.
    address: String,
    connection: ConnectionManager,
    up: AtomicBool,
    /// How many times the store was seen to have lost this replica's keys (a restart of a
    /// Redis that keeps nothing on disk, or an outage longer than they live): what this
    /// replica keeps there is written again as it is used.
    forgotten: AtomicU64,
    /// Whether the store has held this replica's alive key once.
    known: AtomicBool,
    /// Whether another run was seen under this replica's name (said once).
    name_shared: AtomicBool,
    metrics: ClusterMetrics,
    /// What other replicas raise.
    events: broadcast::Sender<Event>,
    /// Woken when Redis goes away, so the subscribing connection is made again.
    reconnect: Arc<Notify>,
}

#[derive(Clone)]
struct ClusterMetrics {
    up: Gauge,
    round_trips: Histogram,
    restored_sessions: Counter,
    leases: Gauge,
}

impl Cluster {
    /// Connects (lazily: moat starts whether Redis answers or not) and starts the probe that
    /// notices when an unreachable Redis is back.
    pub fn connect(settings: &Settings) -> Result<Arc<Self>> {
        let client = redis::Client::open(settings.redis.as_str()).with_context(|| {
            format!(
                "[cluster] redis = \"{}\" is not a Redis URL (redis://[:PASSWORD@]HOST:PORT/DB, \
                 or rediss:// for TLS)",
                redacted(&settings.redis)
            )
        })?;
        let address = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(PROBE_EVERY);
        let connection = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .context("setting up the Redis connection")?;
        let cluster = Arc::new(Self {
            replica: settings.replica.clone(),
            instance: format!("{}/{}", settings.replica, random_hex(4)),
            address,
            connection,
            // Until the first answer says otherwise: the first requests try Redis.
            up: AtomicBool::new(true),
            forgotten: AtomicU64::new(0),
            known: AtomicBool::new(false),
            name_shared: AtomicBool::new(false),
            metrics: ClusterMetrics {
                up: Gauge::default(),
                round_trips: Histogram::new(exponential_buckets(0.000_05, 4.0, 10)),
                restored_sessions: Counter::default(),
                leases: Gauge::default(),
            },
            events: broadcast::Sender::new(crate::shared::replicas::BACKLOG),
            reconnect: Arc::default(),
        });
        cluster.metrics.up.set(1);
        tokio::spawn(probe(Arc::downgrade(&cluster)));
        tokio::spawn(events::listen(Arc::downgrade(&cluster), client));
        tracing::info!(
            "replica {} shares its state through Redis at {}",
            cluster.replica,
            cluster.address
        );
        Ok(cluster)
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether the replica run `instance` is alive (has said so within the last five seconds);
    /// `None` when Redis cannot say.
    async fn is_alive(&self, instance: &str) -> Option<bool> {
        if instance == self.instance {
            return Some(true);
        }
        let key = alive_key(instance);
        self.run(|mut connection| async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<bool>(&mut connection)
                .await
        })
        .await
    }

    /// Every kind of shared state kept in Redis through this cluster: task records sealed with
    /// `task_seal`, legacy sessions kept for `session_idle` and restored only for the principal
    /// `caller` names (the one the request being handled acts for).
    pub fn backends(
        self: &Arc<Self>,
        task_seal: Seal,
        session_idle: Duration,
        caller: fn() -> String,
    ) -> Backends {
        let quotas =
            crate::shared::quotas::Fallback::new(Box::new(SharedQuotas::new(self.clone())));
        Backends {
            replicas: self.clone(),
            quotas: Arc::new(quotas),
            tasks: SharedTasks::new(self.clone(), task_seal),
            sessions: Arc::new(SharedSessions::new(self.clone(), session_idle, caller)),
            consents: Arc::new(SharedKeepings(self.clone())),
        }
    }

    /// Whether Redis answered the last time it was asked.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Runs `command` against Redis unless it is known to be unreachable; `None` when it is, or
    /// when this command fails (which marks it unreachable until the probe hears from it).
    pub async fn run<T, F, Fut>(&self, command: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.is_up() {
            return None;
        }
        let started = Instant::now();
        match tokio::time::timeout(RESPONSE_TIMEOUT, command(self.connection.clone())).await {
            Ok(Ok(value)) => {
                self.metrics
                    .round_trips
                    .observe(started.elapsed().as_secs_f64());
                Some(value)
            }
            Ok(Err(error)) if !is_unreachable(&error) => {
                // Redis answered: the command, not the connection, is at fault.
                tracing::error!("Redis at {} refused a command: {error}", self.address);
                None
            }
            Ok(Err(error)) => {
                self.went_down(&error.to_string());
                None
            }
            Err(_) => {
                self.went_down("no answer within 500 ms");
                None
            }
        }
    }

    fn went_down(&self, why: &str) {
        if self.up.swap(false, Ordering::Relaxed) {
            self.metrics.up.set(0);
            self.reconnect.notify_waiters();
            tracing::warn!(
                "Redis at {} is unreachable ({why}): until it answers again, quotas hold per \
                 replica, legacy sessions only on the replica that opened them, and new tasks \
                 are refused",
                self.address
            );
        }
    }

    fn came_back(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            self.metrics.up.set(1);
            tracing::info!(
                "Redis at {} answers again: quotas and sessions are shared again",
                self.address
            );
        }
    }

    /// How many times the store was seen to have lost this replica's keys.
    pub fn forgotten(&self) -> u64 {
        self.forgotten.load(Ordering::Relaxed)
    }

    /// The store answered the probe: `before` is the alive key it held until then.
    fn alive_again(&self, before: Option<String>) {
        self.came_back();
        let known = self.known.swap(true, Ordering::Relaxed);
        if known && before.is_none() {
            self.forgotten.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "Redis at {} no longer holds this replica's keys (restarted without persistence, \
                 or unreachable longer than they live): legacy sessions served here are written \
                 again as they are next used",
                self.address
            );
        }
    }

    /// Says once that another run holds this replica's name: `named` is the run the store
    /// last had under it.
    fn named(&self, named: Option<String>) {
        let Some(other) = named.filter(|other| *other != self.instance) else {
            return;
        };
        if !self.name_shared.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "another replica serving through Redis at {} is also named \"{}\" ({other}): \
                 give each its own name ([cluster] replica, or MOAT_REPLICA), which audit lines, \
                 logs, metrics and call leases go by",
                self.address,
                self.replica
            );
        }
    }

    /// Counts a session restored from the shared store.
    pub(crate) fn restored_session(&self) {
        self.metrics.restored_sessions.inc();
    }

    fn leases(&self) -> &Gauge {
        &self.metrics.leases
    }

    /// Adds the `moat_cluster_*` series to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let metrics = self.metrics.clone();
        registry.register(
            "cluster_up",
            "Whether the Redis replicas share state through answers (1) or not (0)",
            metrics.up,
        );
        registry.register(
            "cluster_redis_seconds",
            "Round trips to Redis, in seconds",
            metrics.round_trips,
        );
        registry.register(
            "cluster_restored_sessions",
            "Legacy sessions another replica opened, restored here",
            metrics.restored_sessions,
        );
        registry.register(
            "cluster_leases",
            "Call slots this replica holds in Redis now",
            metrics.leases,
        );
    }
}

/// Whether `error` says Redis could not be reached, rather than that it refused a command.
fn is_unreachable(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

/// Says every second that this replica is alive, which also tells whether Redis answers, while
/// the cluster lives.
async fn probe(cluster: std::sync::Weak<Cluster>) {
    let mut every = tokio::time::interval(PROBE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let mut connection = cluster.connection.clone();
        // GET: each key as it was. This run's alive key tells whether the store still holds
        // this replica's keys; the name's, whether another run serves under the same name.
        let mut pipe = redis::pipe();
        let px = ALIVE_FOR.as_millis() as u64;
        pipe.cmd("SET")
            .arg(alive_key(&cluster.instance))
            .arg(1)
            .arg("PX")
            .arg(px)
            .arg("GET");
        pipe.cmd("SET")
            .arg(key("moat:replica", &cluster.replica))
            .arg(&cluster.instance)
            .arg("PX")
            .arg(px)
            .arg("GET");
        let ping = tokio::time::timeout(
            RESPONSE_TIMEOUT,
            pipe.query_async::<(Option<String>, Option<String>)>(&mut connection),
        )
        .await;
        match ping {
            Ok(Ok((before, named))) => {
                cluster.alive_again(before);
                cluster.named(named);
            }
            Ok(Err(error)) => cluster.went_down(&error.to_string()),
            Err(_) => cluster.went_down("no answer within 500 ms"),
        }
    }
}

/// The key of `name`'s state of one kind (`moat:quota:rate`): the name hashed, so that any name
/// makes a short key of one shape, and Redis (its `KEYS`, `MONITOR`, a dump) holds no session id
/// a client could present.
pub(crate) fn key(kind: &str, name: &str) -> String {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(name.as_bytes());
    let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kind}:{hex}")
}

fn alive_key(instance: &str) -> String {
    key("moat:alive", instance)
}

/// `bytes` random bytes in hex.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the system's randomness");
    buffer.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host name, for a replica that is not given one.
pub fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match (result, std::str::from_utf8(&buffer[..end])) {
        (0, Ok(name)) if !name.is_empty() => name.to_string(),
        _ => format!("pid-{}", std::process::id()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redacted("redis://:hunter2@cache:6379/0"),
            "redis://…@cache:6379/0"
        );
        assert_eq!(
            redacted("rediss://user:p@ss@cache:6380"),
            "rediss://…@cache:6380"
        );
        assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
    }
}
