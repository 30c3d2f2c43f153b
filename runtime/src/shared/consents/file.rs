//! Consent kept in the sealed `credential_store` file, so that a restart asks no one again.
//! Every write reads the file again under its lock and changes only its own entry: a token
//! revoked by `moat credentials revoke` meanwhile stays revoked. Turns and steps live only as
//! long as the process (one moat serves one file).

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::Entry;
use super::store::Store;
use super::{KeepError, Keeping, Memory};

pub struct File {
    store: Store,
    /// The entries as last read or written, while the file has not changed since.
    read: Mutex<Option<Vec<Entry>>>,
    here: Memory,
}

impl File {
    /// The store's file, read now: one that does not open, or is open to others, is refused.
    pub fn open(store: Store) -> anyhow::Result<Self> {
        let entries = store.load()?;
        Ok(Self {
            store,
            read: Mutex::new(Some(entries)),
            here: Memory::default(),
        })
    }

    /// What `look` finds in the entries, read again only if the file changed since.
    fn entries<T>(&self, look: impl FnOnce(&[Entry]) -> T) -> Result<T, KeepError> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if read.is_none() || self.store.changed() {
            *read = Some(self.store.load().map_err(unreadable)?);
        }
        Ok(look(read.as_deref().unwrap_or_default()))
    }

    /// Changes the file's entries with `change`, read again under the file's lock.
    fn update<T>(&self, change: impl FnOnce(&mut Vec<Entry>) -> T) -> Result<T, KeepError> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let (outcome, entries) = self
            .store
            .update(change)
            .map_err(|e| KeepError::Unreachable(format!("{e:#}")))?;
        *read = Some(entries);
        Ok(outcome)
    }
}

fn unreadable(error: anyhow::Error) -> KeepError {
    KeepError::Unreadable(format!("{error:#}"))
}

#[async_trait]
impl Keeping for File {
    async fn tokens(&self, source: &str, principal: &str) -> Result<Option<Entry>, KeepError> {
        self.entries(|entries| {
            let mut mine = entries.iter();
            mine.find(|e| e.source == source && e.principal == principal)
                .cloned()
        })
    }

    async fn keep(&self, entry: &Entry) -> Result<(), KeepError> {
        self.update(|entries| {
            entries.retain(|e| !(e.source == entry.source && e.principal == entry.principal));
            entries.push(entry.clone());
        })
    }

    async fn forget(&self, source: &str, principal: &str) -> Result<bool, KeepError> {
        self.update(|entries| {
            let before = entries.len();
            entries.retain(|e| !(e.source == source && e.principal == principal));
            entries.len() != before
        })
    }

    async fn all(&self) -> Result<Vec<Entry>, KeepError> {
        self.entries(<[Entry]>::to_vec)
    }

    async fn take_turn(
        &self,
        source: &str,
        principal: &str,
        owner: &str,
        lasts: Duration,
    ) -> Result<bool, KeepError> {
        self.here.take_turn(source, principal, owner, lasts).await
    }

    async fn end_turn(&self, source: &str, principal: &str, owner: &str) -> Result<(), KeepError> {
        self.here.end_turn(source, principal, owner).await
    }

    async fn put_step(&self, key: &str, step: &[u8], lasts: Duration) -> Result<(), KeepError> {
        self.here.put_step(key, step, lasts).await
    }

    async fn take_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        self.here.take_step(key).await
    }

    async fn peek_step(&self, key: &str) -> Result<Option<Vec<u8>>, KeepError> {
        self.here.peek_step(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_keeps_every_promise_and_a_revoke_made_meanwhile_holds() {
        let dir = std::env::temp_dir().join(format!("moat-keeping-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("credentials.sealed");
        let secret = "0123456789abcdef0123456789abcdef";
        let file = File::open(Store::new(&path, secret).unwrap()).unwrap();
        super::super::promises::check(&file).await;
        // Another process (an operator's `moat credentials revoke`) drops bob while this one
        // holds him; this one then keeps carol: bob stays revoked.
        let entry = |principal: &str| Entry {
            source: "tracker".into(),
            principal: principal.into(),
            access: format!("a-{principal}"),
            refresh: None,
            refresh_at: None,
        };
        file.keep(&entry("bob")).await.unwrap();
        assert!(file.tokens("tracker", "bob").await.unwrap().is_some());
        let operator = File::open(Store::new(&path, secret).unwrap()).unwrap();
        assert!(operator.forget("tracker", "bob").await.unwrap());
        file.keep(&entry("carol")).await.unwrap();
        assert_eq!(file.tokens("tracker", "bob").await.unwrap(), None);
        assert_eq!(operator.tokens("tracker", "bob").await.unwrap(), None);
        assert!(operator.tokens("tracker", "carol").await.unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
