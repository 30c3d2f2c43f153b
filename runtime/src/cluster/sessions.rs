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

use async_trait::async_trait;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};

use super::Cluster;
use crate::shared::sessions::SessionRecords;

/// The sessions of every replica.
pub struct SharedSessions {
    cluster: Arc<Cluster>,
    /// How long a session lives without a request.
    idle: Duration,
    /// The name of the principal the request being handled acts for.
    caller: fn() -> String,
    /// The sessions this replica serves, as it last wrote them: what it writes again when the
    /// store lost them (a restart of a Redis that keeps nothing on disk).
    here: Mutex<HashMap<String, Here>>,
}

/// A session this replica serves.
#[derive(Default)]
struct Here {
    /// Its hash's fields as this replica last wrote or read them.
    fields: HashMap<&'static str, String>,
    /// When this replica last kept it for another idle period, and the store's
    /// [`Cluster::forgotten`] count then.
    touched: Option<(Instant, u64)>,
    used: Option<Instant>,
}

impl SharedSessions {
    pub fn new(cluster: Arc<Cluster>, idle: Duration, caller: fn() -> String) -> Self {
        Self {
            cluster,
            idle,
            caller,
            here: Mutex::default(),
        }
    }

    /// Notes `fields` of session `id` as this replica holds them.
    fn hold(&self, id: &str, fields: &[(&'static str, &str)]) {
        let mut here = self.here.lock().expect("sessions lock");
        let now = Instant::now();
        here.retain(|_, kept| {
            kept.used
                .is_some_and(|used| now.duration_since(used) < self.idle)
        });
        let kept = here.entry(id.to_string()).or_default();
        for (name, value) in fields {
            kept.fields.insert(name, value.to_string());
        }
        kept.used = Some(now);
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
    async fn set(&self, id: &str, field: &'static str, value: &str) {
        self.hold(id, &[(field, value)]);
        self.write(id, &[(field, value)]).await;
    }

    /// Writes `fields` of session `id`'s hash, keeping the session another idle period.
    async fn write(&self, id: &str, fields: &[(&str, &str)]) {
        let (key, idle) = (session_key(id), self.idle_ms());
        self.cluster
            .run(|mut connection| async move {
                redis::pipe()
                    .atomic()
                    .hset_multiple(&key, fields)
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
    /// use), and spares each request of a busy session its round trip; but the first use after
    /// the store lost this replica's keys looks again, and a session whose record is gone is
    /// written again whole from what this replica holds.
    async fn keep_alive(&self, id: &str) {
        let forgotten = self.cluster.forgotten();
        let fields: Vec<(&'static str, String)> = {
            let mut here = self.here.lock().expect("sessions lock");
            let now = Instant::now();
            let kept = here.entry(id.to_string()).or_default();
            kept.used = Some(now);
            if kept.touched.is_some_and(|(last, count)| {
                count == forgotten && now.duration_since(last) < self.idle / 10
            }) {
                return;
            }
            kept.touched = Some((now, forgotten));
            kept.fields.iter().map(|(k, v)| (*k, v.clone())).collect()
        };
        let (key, idle) = (session_key(id), self.idle_ms());
        let kept: Option<u8> = self
            .cluster
            .run(|mut connection| {
                let key = key.clone();
                async move {
                    redis::cmd("PEXPIRE")
                        .arg(key)
                        .arg(idle)
                        .query_async::<u8>(&mut connection)
                        .await
                }
            })
            .await;
        if kept != Some(0) || !fields.iter().any(|(name, _)| *name == "owner") {
            return;
        }
        tracing::info!(
            "the shared store lost session {}: written again from this replica",
            crate::shared::sessions::digest(id)
        );
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.write(id, &fields).await;
    }

    fn idle_ms(&self) -> i64 {
        i64::try_from(self.idle.as_millis()).unwrap_or(i64::MAX)
    }
}

#[async_trait]
impl SessionRecords for SharedSessions {
    /// `None` when no replica knows it (or Redis cannot say).
    async fn owner(&self, id: &str) -> Option<String> {
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
    async fn opened(&self, id: &str, principal: &str) {
        self.set(id, "owner", principal).await;
    }

    /// Records the log level session `id` asked for.
    async fn keep_log_level(&self, id: &str, level: &str) {
        self.set(id, "log_level", level).await;
    }

    /// Records the resources session `id` is subscribed to.
    async fn keep_subscriptions(&self, id: &str, uris: &[String]) {
        let uris = serde_json::to_string(uris).unwrap_or_else(|_| "[]".into());
        self.set(id, "subscriptions", &uris).await;
    }

    /// What session `id` set: its log level and its subscriptions, where it set them.
    async fn settings(&self, id: &str) -> (Option<String>, Vec<String>) {
        let Some((level, uris)) = self.fields(id, ["log_level", "subscriptions"]).await else {
            return (None, Vec::new());
        };
        let uris = uris
            .and_then(|uris| serde_json::from_str(&uris).ok())
            .unwrap_or_default();
        (level, uris)
    }

    fn touch(self: Arc<Self>, id: &str) {
        let id = id.to_string();
        // The request goes on without waiting for Redis.
        tokio::spawn(async move { self.keep_alive(&id).await });
    }

    fn restored(&self) {
        self.cluster.restored_session();
    }

    fn restorer(self: Arc<Self>) -> Option<Arc<dyn SessionStore>> {
        Some(self)
    }
}

/// Unavailable shared state is no error to rmcp: a session that cannot be restored is one that
/// does not exist (404), and one that cannot be stored lives on the replica that opened it.
#[async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some((Some(state), Some(owner))) = self.fields(id, ["state", "owner"]).await else {
            return Ok(None);
        };
        if owner != (self.caller)() {
            return Ok(None);
        }
        let restored = serde_json::from_str(&state)?;
        self.hold(id, &[("owner", &owner), ("state", &state)]);
        Ok(Some(restored))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.set(id, "state", &serde_json::to_string(state)?).await;
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        self.here.lock().expect("sessions lock").remove(id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_redis::redis_server;

    /// The principal the request being handled acts for, as the test sets it.
    static CALLER: Mutex<String> = Mutex::new(String::new());

    fn caller() -> String {
        CALLER.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_session_is_restored_only_for_the_principal_that_opened_it() {
        let Some(server) = redis_server() else {
            return;
        };
        let idle = Duration::from_secs(60);
        let sessions = Arc::new(SharedSessions::new(server.cluster(), idle, caller));
        let initialize = serde_json::json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}
        });
        let state = SessionState::new(serde_json::from_value(initialize).unwrap());
        sessions.opened("s1", "ada").await;
        sessions.store("s1", &state).await.unwrap();
        sessions.keep_log_level("s1", "debug").await;
        sessions
            .keep_subscriptions("s1", &["notes://plan".into()])
            .await;

        assert_eq!(sessions.owner("s1").await.as_deref(), Some("ada"));
        assert_eq!(sessions.owner("s2").await, None);
        *CALLER.lock().unwrap() = "vic".into();
        assert!(
            sessions.load("s1").await.unwrap().is_none(),
            "vic gets no session of ada's"
        );
        *CALLER.lock().unwrap() = "ada".into();
        let restored = sessions
            .load("s1")
            .await
            .unwrap()
            .expect("ada's own session");
        assert_eq!(restored.initialize_params.client_info.name, "test");
        let settings = sessions.settings("s1").await;
        assert_eq!(
            settings,
            (Some("debug".into()), vec!["notes://plan".to_string()])
        );

        sessions.delete("s1").await.unwrap();
        assert_eq!(sessions.owner("s1").await, None);
        assert!(sessions.load("s1").await.unwrap().is_none());
        assert!(sessions.clone().restorer().is_some());
    }
}
