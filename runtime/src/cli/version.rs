//! `moat --version`: moat's version, the wasmtime it runs plugins on and the MCP versions it speaks.

use rmcp::model::ProtocolVersion;

/// The wasmtime moat is built with, as the workspace pins it (a unit test keeps them equal).
const WASMTIME_VERSION: &str = "48.0.8";

/// What `moat --version` prints after `moat `; made once, and kept for the process's life as
/// clap wants it.
pub fn text() -> &'static str {
    let protocols: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    let text = format!(
        "{}\nwasmtime {WASMTIME_VERSION}\nMCP protocol versions: {}",
        env!("CARGO_PKG_VERSION"),
        protocols.join(", ")
    );
    Box::leak(text.into_boxed_str())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_wasmtime_version_is_the_pinned_one() {
        let workspace = include_str!("../../../Cargo.toml");
        let pin = format!("wasmtime = {{ version = \"={}\"", super::WASMTIME_VERSION);
        assert!(
            workspace.contains(&pin),
            "update WASMTIME_VERSION to the pin"
        );
    }
}
