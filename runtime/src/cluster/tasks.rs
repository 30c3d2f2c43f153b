//! Task records any replica can answer for: each a Redis hash (`record`, the task as JSON, and
//! `version`, bumped by every change) that expires when the task does, and per principal (and in
//! all) a sorted set of the tasks kept (by their keys: task ids reach Redis hashed), which bounds
//! how many there are.
//!
//! A change is a compare-and-set on `version`: two replicas changing one task at once (an answer
//! here, a cancel there) never lose each other's change; the one that loses reads again.
//!
//! A record reaches Redis sealed (a key derived from `[http] request_state_key`) for the one task
//! it is kept under: whoever reads Redis reads no arguments, results or questions (a pending
//! consent link among them), and whoever may write it cannot change what a task runs, nor move
//! one task's record under another: a record that does not open is no task of moat's.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::Cluster;
use crate::shared::StoreError;
use crate::shared::seal::Seal;
use crate::shared::tasks::{Bounds, Stored, TaskRecords};

/// Keeps a task if its principal, and all principals, are under their bounds: KEYS the task, the
/// principal's tasks, all tasks; ARGV now (ms), the TTL (ms), the bound per principal, the bound
/// in all, its record. 1 if kept, 0 if a bound is reached.
const CREATE: &str = r"
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) or redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('ZADD', KEYS[3], now, KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('HSET', KEYS[1], 'record', ARGV[5], 'version', 1)
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
";

/// Replaces a task's record if no one changed it since `version` was read: KEYS the task; ARGV
/// the version read, the new record. 1 if replaced, 0 if it changed (or expired) meanwhile.
const REPLACE: &str = r"
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'version', tonumber(ARGV[1]) + 1)
return 1
";

/// Task records as JSON text, kept in Redis sealed.
pub struct SharedTasks {
    cluster: Arc<Cluster>,
    seal: Seal,
    create: Script,
    replace: Script,
}

fn unreachable() -> StoreError {
    StoreError::Unreachable("Redis does not answer".into())
}

impl SharedTasks {
    pub fn new(cluster: Arc<Cluster>, seal: Seal) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            seal,
            create: Script::new(CREATE),
            replace: Script::new(REPLACE),
        })
    }

    /// `record` sealed for task `id`.
    fn sealed(&self, id: &str, record: &str) -> Result<Vec<u8>, StoreError> {
        self.seal
            .seal(record.as_bytes(), task_key(id).as_bytes())
            .map_err(|error| StoreError::Sealing(format!("a task record: {error:#}")))
    }

    /// The record sealed for task `id`, if it opens: one written without this key, changed, or
    /// moved from another task's key is no task of moat's.
    fn opened(&self, id: &str, sealed: Vec<u8>) -> Option<String> {
        let opened = self.seal.open(sealed, task_key(id).as_bytes()).ok();
        let record = opened.and_then(|plain| String::from_utf8(plain).ok());
        if record.is_none() {
            tracing::warn!(
                "a task record in Redis does not open with this replica's request_state_key (another \
                 key, a changed record, or one moved from another task): ignored"
            );
        }
        record
    }
}

#[async_trait]
impl TaskRecords for SharedTasks {
    async fn create(
        &self,
        id: &str,
        principal: &str,
        record: &str,
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<bool, StoreError> {
        let record = self.sealed(id, record)?;
        let now = jiff::Timestamp::now().as_millisecond();
        let mut invocation = self.create.prepare_invoke();
        invocation
            .key(task_key(id))
            .key(super::key("moat:tasks-of", principal))
            .key("moat:tasks")
            .arg(now)
            .arg(ttl.as_millis() as u64)
            .arg(bounds.per_principal)
            .arg(bounds.in_all)
            .arg(record);
        self.cluster
            .run(|mut connection| async move {
                invocation.invoke_async::<bool>(&mut connection).await
            })
            .await
            .ok_or_else(unreachable)
    }

    async fn load(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let key = task_key(id);
        let found = self
            .cluster
            .run(|mut connection| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg("record")
                    .arg("version")
                    .query_async::<(Option<Vec<u8>>, Option<u64>)>(&mut connection)
                    .await
            })
            .await
            .ok_or_else(unreachable)?;
        Ok(match found {
            (Some(sealed), Some(version)) => self
                .opened(id, sealed)
                .map(|record| Stored { record, version }),
            _ => None,
        })
    }

    async fn replace(&self, id: &str, version: u64, record: &str) -> Result<bool, StoreError> {
        let record = self.sealed(id, record)?;
        let mut invocation = self.replace.prepare_invoke();
        invocation.key(task_key(id)).arg(version).arg(record);
        self.cluster
            .run(|mut connection| async move {
                invocation.invoke_async::<bool>(&mut connection).await
            })
            .await
            .ok_or_else(unreachable)
    }
}

fn task_key(id: &str) -> String {
    super::key("moat:task", id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_redis::redis_server;

    #[tokio::test]
    async fn redis_keeps_every_promise() {
        let Some(server) = redis_server() else {
            return;
        };
        let seal = Seal::for_purpose("moat task records", &[7; 32]).unwrap();
        crate::shared::tasks::promises::check(&*SharedTasks::new(server.cluster(), seal)).await;
    }

    #[tokio::test]
    async fn a_record_is_sealed_for_its_task_and_an_edited_or_moved_one_is_no_task() {
        let Some(server) = redis_server() else {
            return;
        };
        let cluster = server.cluster();
        let seal = || Seal::for_purpose("moat task records", &[7; 32]).unwrap();
        let tasks = SharedTasks::new(cluster.clone(), seal());
        let record = r#"{"tool": "notes_read", "arguments": {"path": "plan-secret.md"}}"#;
        let bounds = Bounds {
            per_principal: 10,
            in_all: 10,
        };
        let ttl = Duration::from_secs(60);
        assert!(
            tasks
                .create("t1", "alice", record, ttl, bounds)
                .await
                .unwrap()
        );
        assert!(
            tasks
                .create("t2", "alice", record, ttl, bounds)
                .await
                .unwrap()
        );
        let stored = tasks.load("t1").await.unwrap().unwrap();
        assert_eq!((stored.record.as_str(), stored.version), (record, 1));
        assert!(tasks.replace("t1", 1, record).await.unwrap());

        let client = redis::Client::open(server.1.as_str()).unwrap();
        let mut redis = client.get_multiplexed_async_connection().await.unwrap();
        let raw: Vec<u8> = redis::cmd("HGET")
            .arg(task_key("t1"))
            .arg("record")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("plan-secret"));
        // Rewritten in clear to run another tool, or t1's record moved under t2: no task.
        let edited = r#"{"tool": "notes_delete", "arguments": {"path": "plan.md"}}"#;
        for (key, value) in [
            (task_key("t1"), edited.as_bytes().to_vec()),
            (task_key("t2"), raw),
        ] {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("record")
                .arg(value)
                .query_async(&mut redis)
                .await
                .unwrap();
        }
        assert!(tasks.load("t1").await.unwrap().is_none());
        assert!(tasks.load("t2").await.unwrap().is_none());
        // Another key opens nothing either.
        let other = SharedTasks::new(
            cluster,
            Seal::for_purpose("moat task records", &[8; 32]).unwrap(),
        );
        assert!(
            other
                .create("t3", "bob", record, ttl, bounds)
                .await
                .unwrap()
        );
        assert!(tasks.load("t3").await.unwrap().is_none());
    }
}
