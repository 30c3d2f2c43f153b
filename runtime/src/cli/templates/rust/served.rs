//! Calls the built component through moat, as an MCP client would: `moat build`, then
//! `cargo test`.

use std::process::Command;

#[test]
fn greet_answers() {
    let out = Command::new("moat")
        .args(["call", "build/{{name}}.wasm", "greet", r#"{"name": "moat"}"#])
        .output()
        .expect("running moat: is it on PATH?");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["content"][0]["text"], "Hello, moat!");
}
