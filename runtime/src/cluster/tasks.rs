//! Task records any replica can answer for: each a Redis hash (`record`, the task as JSON, and
//! `version`, bumped by every change) that expires when the task does, and per principal (and in
//! all) a sorted set of the tasks kept (by their keys: task ids reach Redis hashed), which bounds
//! how many there are.
//!
//! A change is a compare-and-set on `version`: two replicas changing one task at once (an answer
//! here, a cancel there) never lose each other's change; the one that loses reads again.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::Cluster;

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

/// Task records as JSON text, kept in Redis.
pub struct SharedTasks {
    cluster: Arc<Cluster>,
    create: Script,
    replace: Script,
}

/// Redis could not be asked; the caller may try again shortly.
#[derive(Debug)]
pub struct Unreachable;

/// A task's record as last written, and the version to change it from.
pub struct Stored {
    pub record: String,
    pub version: u64,
}

impl SharedTasks {
    pub fn new(cluster: Arc<Cluster>) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            create: Script::new(CREATE),
            replace: Script::new(REPLACE),
        })
    }

    /// The cluster the records are kept in.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Keeps task `id` of `principal` for `ttl`, unless `principal` has `per_principal` tasks
    /// already or all principals `in_all`: `Ok(false)` then.
    pub async fn create(
        &self,
        id: &str,
        principal: &str,
        record: &str,
        ttl: Duration,
        (per_principal, in_all): (usize, usize),
    ) -> Result<bool, Unreachable> {
        let now = jiff::Timestamp::now().as_millisecond();
        let mut invocation = self.create.prepare_invoke();
        invocation
            .key(task_key(id))
            .key(super::key("moat:tasks-of", principal))
            .key("moat:tasks")
            .arg(now)
            .arg(ttl.as_millis() as u64)
            .arg(per_principal)
            .arg(in_all)
            .arg(record);
        self.cluster
            .run(|mut connection| async move {
                invocation.invoke_async::<bool>(&mut connection).await
            })
            .await
            .ok_or(Unreachable)
    }

    /// Task `id`'s record, if it is kept.
    pub async fn load(&self, id: &str) -> Result<Option<Stored>, Unreachable> {
        let key = task_key(id);
        let found = self
            .cluster
            .run(|mut connection| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg("record")
                    .arg("version")
                    .query_async::<(Option<String>, Option<u64>)>(&mut connection)
                    .await
            })
            .await
            .ok_or(Unreachable)?;
        Ok(match found {
            (Some(record), Some(version)) => Some(Stored { record, version }),
            _ => None,
        })
    }

    /// Replaces task `id`'s record read at `version`: `Ok(false)` if it changed meanwhile.
    pub async fn replace(&self, id: &str, version: u64, record: &str) -> Result<bool, Unreachable> {
        let mut invocation = self.replace.prepare_invoke();
        invocation.key(task_key(id)).arg(version).arg(record);
        self.cluster
            .run(|mut connection| async move {
                invocation.invoke_async::<bool>(&mut connection).await
            })
            .await
            .ok_or(Unreachable)
    }
}

fn task_key(id: &str) -> String {
    super::key("moat:task", id)
}
