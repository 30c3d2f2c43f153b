//! Consent kept in this process: gone with it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::Entry;
use super::{KeepError, Keeping};

/// Steps waiting at most; past this the expired ones go, and if none has, the oldest.
const MAX_STEPS: usize = 10_000;
/// Principals' tokens kept at most; past this those that can no longer serve go.
const MAX_TOKENS: usize = 100_000;

type Pair = (String, String);

#[derive(Default)]
pub struct Memory {
    tokens: Mutex<HashMap<Pair, Entry>>,
    /// Each turn's owner and end.
    turns: Mutex<HashMap<Pair, (String, Instant)>>,
    steps: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
}

fn pair(source: &str, principal: &str) -> Pair {
    (source.to_string(), principal.to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Memory {
    fn step(&self, key: &str, take: bool) -> Option<Vec<u8>> {
        let mut steps = lock(&self.steps);
        let (step, until) = match take {
            true => steps.remove(key)?,
            false => steps.get(key).cloned()?,
        };
        (Instant::now() < until).then_some(step)
    }
}

#[async_trait]
impl Keeping for Memory {
    async fn tokens(&self, source: &str, principal: &str) -> Result<Option<Entry>, KeepError> {
        Ok(lock(&self.tokens).get(&pair(source, principal)).cloned())
    }

    async fn keep(&self, entry: &Entry) -> Result<(), KeepError> {
        let mut tokens = lock(&self.tokens);
        if tokens.len() >= MAX_TOKENS {
            let now = super::now();
            tokens.retain(|_, e| e.refresh.is_some() || e.refresh_at.is_none_or(|at| now < at));
        }
        tokens.insert(pair(&entry.source, &entry.principal), entry.clone());
        Ok(())
    }

    async fn forget(&self, source: &str, principal: &str) -> Result<bool, KeepError> {
        Ok(lock(&self.tokens)
            .remove(&pair(source, principal))
            .is_some())
    }

    async fn all(&self) -> Result<Vec<Entry>, KeepError> {
        Ok(lock(&self.tokens).values().cloned().collect())
    }

    async fn take_turn(
        &self,
        source: &str,
        principal: &str,
        owner: &str,
        lasts: Duration,
    ) -> Result<bool, KeepError> {
        let mut turns = lock(&self.turns);
        let now = Instant::now();
        turns.retain(|_, (_, until)| now < *until);
        let key = pair(source, principal);
        if turns.contains_key(&key) {
            return Ok(false);
        }
        turns.insert(key, (owner.to_string(), now + lasts));
        Ok(true)
    }

    async fn end_turn(&self, source: &str, principal: &str, owner: &str) -> Result<(), KeepError> {
        let mut turns = lock(&self.turns);
        let key = pair(source, principal);
        if turns.get(&key).is_some_and(|(held, _)| held == owner) {
            turns.remove(&key);
        }
        Ok(())
    }

    async fn put_step(&self, key: &str, step: &[u8], lasts: Duration) -> Result<(), KeepError> {
        let mut steps = lock(&self.steps);
        if steps.len() >= MAX_STEPS {
            let now = Instant::now();
            steps.retain(|_, (_, until)| now < *until);
            if steps.len() >= MAX_STEPS
                && let Some(oldest) = steps
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| k.clone())
            {
                steps.remove(&oldest);
            }
        }
        steps.insert(key.to_string(), (step.to_vec(), Instant::now() + lasts));
        Ok(())
    }

    async fn take_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        Ok(self.step(key, true))
    }

    async fn peek_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        Ok(self.step(key, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_keeps_every_promise() {
        super::super::promises::check(&Memory::default()).await;
    }
}
