use moat_tests::{call, load, plugins, text};
use serde_json::json;

/// The digests come from Python's hashlib over the same pattern (byte `i` is `i % 251`), so the
/// benchmarks that compare moat, bare wasmtime and native code compare the right computation.
#[tokio::test]
async fn sha256_hashes_the_pattern() {
    let burn = load("burn", plugins::BURN);
    for (mib, digest) in [
        (
            0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        (
            1,
            "631b84027d6b9e52b539c4e8373622d23032dfadc64d60af87339c9037e4f769",
        ),
        (
            3,
            "a3869819c63ae3eb69a0019c3985faeb9d295b82bcdf5e0953b5b5d307ff3ae1",
        ),
    ] {
        let result = call(&burn, "burn_sha256", json!({"mib": mib})).await;
        assert_eq!(text(&result), digest, "{mib} MiB");
    }
}
