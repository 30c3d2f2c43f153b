//! The native baseline of the CPU-heavy call: the same computation as the `burn` plugin's
//! `sha256`, compiled natively. (wasmtime's floor is `moat_tests::floor`.)

use sha2::{Digest, Sha256};

/// What the `burn` plugin's `sha256` computes, natively: the sha256 of `mib` MiB of the pattern.
pub fn sha256(mib: u32) -> String {
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut hasher = Sha256::new();
    for _ in 0..mib {
        hasher.update(&chunk);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
