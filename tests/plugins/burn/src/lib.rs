//! The `burn` plugin: CPU-bound work for the benchmarks, which run the same computation natively
//! (`moat-perf`'s `pattern` and `sha256_hex` must stay in step with these).

use sha2::{Digest, Sha256};

moat_guest::generate!("burn");

struct Burn;

impl Guest for Burn {
    fn sha256(mib: u32) -> String {
        let mut hasher = Sha256::new();
        let chunk = pattern();
        for _ in 0..mib {
            hasher.update(&chunk);
        }
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// One MiB of bytes 0, 1, … 250, 0, 1, … (251 is prime, so no power-of-two period).
fn pattern() -> Vec<u8> {
    (0..1u32 << 20).map(|i| (i % 251) as u8).collect()
}

export!(Burn);
