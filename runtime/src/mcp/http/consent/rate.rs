//! How often one address may ask the consent pages: each request may cost the shared store a
//! look-up, and none needs a credential, so an address that hammers them is turned away before
//! it costs anything. A person connecting an account makes a handful of requests.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests one address may make in a window.
pub const PER_WINDOW: u32 = 60;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most; past this the windows that ended go, and if none has, all.
const MAX_ADDRESSES: usize = 100_000;

/// Each address's window: when it began, and the requests made in it.
#[derive(Default)]
pub struct PerAddress {
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl PerAddress {
    /// Whether `address` may make one more request at `now`; if not, how long until it may.
    pub fn admit(&self, address: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() >= MAX_ADDRESSES && !windows.contains_key(&address) {
            windows.retain(|_, (began, _)| now.duration_since(*began) < WINDOW);
            if windows.len() >= MAX_ADDRESSES {
                windows.clear();
            }
        }
        let (began, count) = windows.entry(address).or_insert((now, 0));
        if now.duration_since(*began) >= WINDOW {
            (*began, *count) = (now, 0);
        }
        if *count >= PER_WINDOW {
            return Err(WINDOW.saturating_sub(now.duration_since(*began)));
        }
        *count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_window_s_requests_and_no_more_until_it_ends() {
        let limit = PerAddress::default();
        let (one, two): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let start = Instant::now();
        for _ in 0..PER_WINDOW {
            assert_eq!(limit.admit(one, start), Ok(()));
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(limit.admit(one, later), Err(Duration::from_secs(40)));
        // Another address has its own window.
        assert_eq!(limit.admit(two, later), Ok(()));
        // A new window, a new count.
        assert_eq!(limit.admit(one, start + WINDOW), Ok(()));
    }
}
