//! The process's file descriptors, shared out so that guests together can never take them all.
//!
//! Every file a guest opens and every socket it creates is a descriptor of the moat process; if
//! guests could use them all, every other call, and moat itself (clients, the cache, the audit
//! log), would fail with EMFILE. At start moat raises its soft `RLIMIT_NOFILE` to the hard limit,
//! keeps [`RESERVED`] descriptors for itself, and splits the rest evenly across the pool's
//! instance slots: each instance may hold that many resource handles (every descriptor a guest
//! holds is one; streams and other resources count too, so the split is conservative).

use std::sync::OnceLock;

use crate::sandbox::engine::MAX_LIVE_INSTANCES;

/// Descriptors kept for moat's own work, outside every guest's share.
pub const RESERVED: u64 = 512;

/// The most handles one instance may hold, however many descriptors the process has.
pub const MAX_HANDLES_PER_CALL: usize = 256;

/// The fewest handles an instance gets even on a tiny limit (a WASI guest holds a few just to
/// run); below this share moat warns that the limit is too low to guarantee the split.
pub const MIN_HANDLES_PER_CALL: usize = 16;

/// The handles each instance may hold: computed once, after raising the soft limit.
pub fn handles_per_call() -> usize {
    static SHARE: OnceLock<usize> = OnceLock::new();
    *SHARE.get_or_init(|| {
        let limit = raise_soft_limit();
        let share = share_of(limit);
        if share == MIN_HANDLES_PER_CALL && limit < needed(MIN_HANDLES_PER_CALL) {
            tracing::warn!(
                "moat may open {limit} file descriptors, too few to give each of its {} \
                 instance slots {MIN_HANDLES_PER_CALL} (raise the hard limit, `ulimit -Hn`, to \
                 at least {}): guests together could use them all",
                MAX_LIVE_INSTANCES,
                needed(MIN_HANDLES_PER_CALL)
            );
        }
        share
    })
}

/// Each instance's share of `limit` descriptors.
fn share_of(limit: u64) -> usize {
    let share = limit.saturating_sub(RESERVED) / u64::from(MAX_LIVE_INSTANCES);
    (share as usize).clamp(MIN_HANDLES_PER_CALL, MAX_HANDLES_PER_CALL)
}

/// The descriptors needed to give every instance slot `share` handles.
fn needed(share: usize) -> u64 {
    RESERVED + share as u64 * u64::from(MAX_LIVE_INSTANCES)
}

/// Raises the soft limit on open descriptors to the hard one; returns the limit in force.
pub fn raise_soft_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_and_the_reserve_fit_the_limit() {
        for limit in [8192, 20_000, 65_536, 1 << 20] {
            let share = share_of(limit);
            assert!(needed(share) <= limit, "{limit}: {share}");
        }
        assert_eq!(share_of(1 << 20), MAX_HANDLES_PER_CALL);
        assert_eq!(share_of(1024), MIN_HANDLES_PER_CALL);
        assert_eq!(share_of(4096), MIN_HANDLES_PER_CALL);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let raised = raise_soft_limit();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, limit.rlim_max);
        assert_eq!(raised, limit.rlim_cur);
    }
}
