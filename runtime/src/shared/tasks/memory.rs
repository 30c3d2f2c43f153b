//! Task records in this process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Bounds, Stored, TaskRecords};
use crate::shared::StoreError;

#[derive(Default)]
pub struct Memory {
    records: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    principal: String,
    until: Instant,
    stored: Stored,
}

impl Memory {
    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        records.retain(|_, kept| now < kept.until);
        records
    }
}

#[async_trait]
impl TaskRecords for Memory {
    async fn create(
        &self,
        id: &str,
        principal: &str,
        record: &str,
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<bool, StoreError> {
        let mut records = self.records();
        let theirs = records
            .values()
            .filter(|k| k.principal == principal)
            .count();
        if theirs >= bounds.per_principal || records.len() >= bounds.in_all {
            return Ok(false);
        }
        let stored = Stored {
            record: record.to_string(),
            version: 1,
        };
        let kept = Kept {
            principal: principal.to_string(),
            until: Instant::now() + ttl,
            stored,
        };
        records.insert(id.to_string(), kept);
        Ok(true)
    }

    async fn load(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        Ok(self.records().get(id).map(|kept| kept.stored.clone()))
    }

    async fn replace(&self, id: &str, version: u64, record: &str) -> Result<bool, StoreError> {
        let mut records = self.records();
        Ok(match records.get_mut(id) {
            Some(kept) if kept.stored.version == version => {
                kept.stored = Stored {
                    record: record.to_string(),
                    version: version + 1,
                };
                true
            }
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory_keeps_every_promise() {
        super::super::promises::check(&super::Memory::default()).await;
    }
}
