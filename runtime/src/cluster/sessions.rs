//! Legacy sessions any replica can serve: what rmcp needs to restore one (the client's
//! `initialize`, replayed to a fresh handler without the client sending it again), the
//! principal that opened it, and what the client set since (its log level, the resources it
//! subscribed to), in one Redis hash per session that expires when the session has been idle
//! for as long as a session may be.
//!
//! A session is restored only for the principal that opened it: [`SharedSessions::load`] reads
//! the owner with the state and hands the state only to the request acting for that owner.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Cluster;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};

/// The sessions of every replica.
pub struct SharedSessions {
    cluster: Arc<Cluster>,
    /// How long a session lives without a request.
    idle: Duration,
    /// The name of the principal the request being handled acts for.
    caller: fn() -> String,
    /// When this replica last kept each session for another idle period.
    touched: Mutex<HashMap<String, Instant>>,
}

impl SharedSessions {
    pub fn new(cluster: Arc<Cluster>, idle: Duration, caller: fn() -> String) -> Self {
        Self {
            cluster,
            idle,
            caller,
            touched: Mutex::default(),
        }
    }

    /// The principal that opened session `id`: `None` when no replica knows it (or Redis
    /// cannot say).
    pub async fn owner(&self, id: &str) -> Option<String> {
        let key = session_key(id);
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("HGET")
                    .arg(key)
                    .arg("owner")
                    .query_async::<Option<String>>(&mut connection)
                    .await
            })
            .await
            .flatten()
    }

    /// Records that `principal` opened session `id`.
    pub async fn opened(&self, id: &str, principal: &str) {
        self.set(id, "owner", principal).await;
    }

    /// Records the log level session `id` asked for.
    pub async fn keep_log_level(&self, id: &str, level: &str) {
        self.set(id, "log_level", level).await;
    }

    /// Records the resources session `id` is subscribed to.
    pub async fn keep_subscriptions(&self, id: &str, uris: &[String]) {
        let uris = serde_json::to_string(uris).unwrap_or_else(|_| "[]".into());
        self.set(id, "subscriptions", &uris).await;
    }

    /// What session `id` set: its log level and its subscriptions, where it set them.
    pub async fn settings(&self, id: &str) -> (Option<String>, Vec<String>) {
        let Some((level, uris)) = self.fields(id, ["log_level", "subscriptions"]).await else {
            return (None, Vec::new());
        };
        let uris = uris
            .and_then(|uris| serde_json::from_str(&uris).ok())
            .unwrap_or_default();
        (level, uris)
    }

    /// Two fields of session `id`'s hash; `None` when Redis cannot say.
    async fn fields(&self, id: &str, names: [&str; 2]) -> Option<(Option<String>, Option<String>)> {
        let key = session_key(id);
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg(&names[..])
                    .query_async::<(Option<String>, Option<String>)>(&mut connection)
                    .await
            })
            .await
    }

    /// Sets one `field` of session `id`'s hash, keeping the session another idle period.
    async fn set(&self, id: &str, field: &str, value: &str) {
        let (key, idle) = (session_key(id), self.idle_ms());
        self.cluster
            .run(|mut connection| async move {
                redis::pipe()
                    .atomic()
                    .hset(&key, field, value)
                    .ignore()
                    .pexpire(&key, idle)
                    .ignore()
                    .query_async::<()>(&mut connection)
                    .await
            })
            .await;
    }

    /// Keeps session `id` for another idle period: it has just been used. Once per tenth of
    /// that period is enough (a session then lives at least nine tenths of it after its last
    /// use), and spares each request of a busy session its round trip.
    pub async fn touch(&self, id: &str) {
        {
            let mut touched = self.touched.lock().expect("touched lock");
            let now = Instant::now();
            if touched
                .get(id)
                .is_some_and(|last| now.duration_since(*last) < self.idle / 10)
            {
                return;
            }
            touched.retain(|_, last| now.duration_since(*last) < self.idle);
            touched.insert(id.to_string(), now);
        }
        let (key, idle) = (session_key(id), self.idle_ms());
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("PEXPIRE")
                    .arg(key)
                    .arg(idle)
                    .query_async::<u8>(&mut connection)
                    .await
            })
            .await;
    }

    /// Counts a session restored here.
    pub fn restored(&self) {
        self.cluster.restored_session();
    }

    fn idle_ms(&self) -> i64 {
        i64::try_from(self.idle.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Unavailable shared state is no error to rmcp: a session that cannot be restored is one that
/// does not exist (404), and one that cannot be stored lives on the replica that opened it.
#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some((Some(state), Some(owner))) = self.fields(id, ["state", "owner"]).await else {
            return Ok(None);
        };
        if owner != (self.caller)() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_str(&state)?))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.set(id, "state", &serde_json::to_string(state)?).await;
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        let key = session_key(id);
        self.cluster
            .run(|mut connection| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<u8>(&mut connection)
                    .await
            })
            .await;
        Ok(())
    }
}

fn session_key(id: &str) -> String {
    super::key("moat:session", id)
}
