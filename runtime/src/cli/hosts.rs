//! What each MCP host needs in its configuration to start this moat, with the same arguments.
//!
//! Paths are made absolute: hosts start servers from folders of their own choosing.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};

/// The MCP hosts moat writes configuration for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Host {
    /// `claude_desktop_config.json`
    ClaudeDesktop,
    /// a `claude mcp add` command
    ClaudeCode,
    /// `.cursor/mcp.json`
    Cursor,
    /// `.vscode/mcp.json`
    Vscode,
}

/// How the host reaches moat.
pub enum Launch {
    /// The host starts `command args…` and speaks MCP on its stdio.
    Stdio { command: PathBuf, args: Vec<String> },
    /// The host connects to a moat already serving this URL, sending these headers (the
    /// local token's `Authorization`).
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl Launch {
    /// `moat serve` with `plugins` and `config`, their paths made absolute against `cwd`.
    pub fn stdio(command: PathBuf, plugins: &[PathBuf], config: Option<&Path>, cwd: &Path) -> Self {
        let mut args = vec!["serve".to_string()];
        args.extend(plugins.iter().map(|p| absolute(p, cwd)));
        if let Some(config) = config {
            args.push("--config".into());
            args.push(absolute(config, cwd));
        }
        Launch::Stdio { command, args }
    }
}

/// The snippet for `host`: JSON for the hosts configured by file, a shell command for Claude Code.
pub fn snippet(host: Host, name: &str, launch: &Launch) -> Result<String> {
    let json = |value: Value| Ok(serde_json::to_string_pretty(&value)?);
    match (host, launch) {
        (Host::ClaudeCode, _) => claude_code_command(name, launch),
        _ => {
            let (key, server) = entry(host, launch);
            json(json!({ key: { name: server } }))
        }
    }
}

/// The table of servers in `host`'s config file, and this moat's entry in it.
pub fn entry(host: Host, launch: &Launch) -> (&'static str, Value) {
    match (host, launch) {
        (
            Host::ClaudeDesktop | Host::Cursor | Host::ClaudeCode,
            Launch::Stdio { command, args },
        ) => ("mcpServers", json!({"command": command, "args": args})),
        (Host::Cursor, Launch::Http { url, headers }) => {
            let mut server = json!({"url": url});
            if !headers.is_empty() {
                server["headers"] = header_map(headers);
            }
            ("mcpServers", server)
        }
        // Claude Code's project file, `.mcp.json`.
        (Host::ClaudeCode, Launch::Http { url, headers }) => {
            let mut server = json!({"type": "http", "url": url});
            if !headers.is_empty() {
                server["headers"] = header_map(headers);
            }
            ("mcpServers", server)
        }
        // Claude Desktop's file starts stdio servers only: mcp-remote bridges to HTTP, the
        // header's value in its environment rather than on a command line `ps` shows.
        (Host::ClaudeDesktop, Launch::Http { url, headers }) => {
            let mut args = vec!["-y".to_string(), "mcp-remote".into(), url.clone()];
            let mut env = serde_json::Map::new();
            for (i, (header, value)) in headers.iter().enumerate() {
                let var = format!("MOAT_HEADER_{i}");
                args.push("--header".into());
                args.push(format!("{header}:${{{var}}}"));
                env.insert(var, json!(value));
            }
            let mut server = json!({"command": "npx", "args": args});
            if !env.is_empty() {
                server["env"] = Value::Object(env);
            }
            ("mcpServers", server)
        }
        (Host::Vscode, Launch::Stdio { command, args }) => (
            "servers",
            json!({"type": "stdio", "command": command, "args": args}),
        ),
        (Host::Vscode, Launch::Http { url, headers }) => {
            let mut server = json!({"type": "http", "url": url});
            if !headers.is_empty() {
                server["headers"] = header_map(headers);
            }
            ("servers", server)
        }
    }
}

/// The `claude mcp add` command that gives Claude Code this moat.
fn claude_code_command(name: &str, launch: &Launch) -> Result<String> {
    match launch {
        Launch::Stdio { command, args } => {
            let words: Vec<String> = std::iter::once(command.display().to_string())
                .chain(args.iter().cloned())
                .map(|w| shell_quote(&w))
                .collect();
            Ok(format!(
                "claude mcp add {} -- {}",
                shell_quote(name),
                words.join(" ")
            ))
        }
        Launch::Http { url, headers } => {
            let mut command = format!(
                "claude mcp add --transport http {} {}",
                shell_quote(name),
                shell_quote(url)
            );
            for (header, value) in headers {
                command.push_str(" --header ");
                command.push_str(&shell_quote(&format!("{header}: {value}")));
            }
            Ok(command)
        }
    }
}

fn header_map(headers: &[(String, String)]) -> Value {
    Value::Object(
        headers
            .iter()
            .map(|(name, value)| (name.clone(), json!(value)))
            .collect(),
    )
}

/// The headers a host sends a moat serving HTTP with `config`: the local token's, unless the
/// config names other credentials (API keys, OAuth), which the host brings itself.
pub fn http_headers(
    config: Option<&Path>,
    token_file: Option<PathBuf>,
) -> Result<Vec<(String, String)>> {
    let service = match config {
        Some(config) => moat::serve::config::read_service(config, None)?,
        None => Default::default(),
    };
    if !service.api_keys.is_empty() || service.oauth.is_some() {
        return Ok(Vec::new());
    }
    let path = moat::access::credentials::token_file(token_file, service.token_file)?;
    let token = moat::access::credentials::local_token(&path)?;
    Ok(vec![("Authorization".into(), format!("Bearer {token}"))])
}

fn absolute(path: &Path, cwd: &Path) -> String {
    // URLs and oci:// references are passed on as they are.
    if path.to_str().is_some_and(|p| p.contains("://")) {
        return path.display().to_string();
    }
    let path = cwd.join(path);
    path.canonicalize().unwrap_or(path).display().to_string()
}

/// Quotes a word for a POSIX shell when it needs it.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch::stdio(
            "/opt/moat/bin/moat".into(),
            &["plugins/echo.wasm".into()],
            Some(Path::new("my moat.toml")),
            Path::new("/home/me"),
        )
    }

    #[test]
    fn remote_sources_are_passed_on_as_they_are() {
        let cwd = Path::new("/home/me");
        for source in ["oci://ghcr.io/acme/notes:1", "https://example.com/n.wasm"] {
            assert_eq!(absolute(Path::new(source), cwd), source);
        }
    }

    #[test]
    fn file_configured_hosts_get_json_with_absolute_paths() {
        let desktop: Value =
            serde_json::from_str(&snippet(Host::ClaudeDesktop, "moat", &launch()).unwrap())
                .unwrap();
        assert_eq!(
            desktop,
            json!({"mcpServers": {"moat": {
                "command": "/opt/moat/bin/moat",
                "args": ["serve", "/home/me/plugins/echo.wasm", "--config", "/home/me/my moat.toml"],
            }}})
        );
        let vscode: Value =
            serde_json::from_str(&snippet(Host::Vscode, "moat", &launch()).unwrap()).unwrap();
        assert_eq!(vscode["servers"]["moat"]["type"], "stdio");
        assert!(
            vscode.get("mcpServers").is_none(),
            "VS Code reads `servers`"
        );
    }

    #[test]
    fn claude_code_gets_a_quoted_command() {
        assert_eq!(
            snippet(Host::ClaudeCode, "moat", &launch()).unwrap(),
            "claude mcp add moat -- /opt/moat/bin/moat serve /home/me/plugins/echo.wasm \
             --config '/home/me/my moat.toml'"
        );
    }

    #[test]
    fn http_hosts_get_the_url_and_the_token() {
        let http = Launch::Http {
            url: "http://127.0.0.1:8080/mcp".into(),
            headers: vec![("Authorization".into(), "Bearer moat_x".into())],
        };
        let cursor: Value =
            serde_json::from_str(&snippet(Host::Cursor, "moat", &http).unwrap()).unwrap();
        assert_eq!(
            cursor["mcpServers"]["moat"],
            json!({"url": "http://127.0.0.1:8080/mcp", "headers": {"Authorization": "Bearer moat_x"}})
        );
        let vscode: Value =
            serde_json::from_str(&snippet(Host::Vscode, "moat", &http).unwrap()).unwrap();
        assert_eq!(
            vscode["servers"]["moat"]["headers"]["Authorization"],
            "Bearer moat_x"
        );
        assert_eq!(
            snippet(Host::ClaudeCode, "moat", &http).unwrap(),
            "claude mcp add --transport http moat http://127.0.0.1:8080/mcp \
             --header 'Authorization: Bearer moat_x'"
        );
        let desktop: Value =
            serde_json::from_str(&snippet(Host::ClaudeDesktop, "moat", &http).unwrap()).unwrap();
        assert_eq!(
            desktop["mcpServers"]["moat"],
            json!({
                "command": "npx",
                "args": ["-y", "mcp-remote", "http://127.0.0.1:8080/mcp", "--header",
                         "Authorization:${MOAT_HEADER_0}"],
                "env": {"MOAT_HEADER_0": "Bearer moat_x"},
            })
        );
    }
}
