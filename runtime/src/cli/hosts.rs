//! What each MCP host needs in its configuration to start this moat, with the same arguments.
//!
//! Paths are made absolute: hosts start servers from folders of their own choosing.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use moat::serve::service::Service;
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
    /// The host connects to a moat already serving this URL, with the local token when that
    /// moat requires it.
    Http {
        url: String,
        token: Option<LocalToken>,
    },
}

/// The local token `moat serve --http` requires, and the file it is kept in.
pub struct LocalToken {
    pub value: String,
    pub file: PathBuf,
}

/// How an entry gives the host the local token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenIn {
    /// The token itself: in what moat prints, and in a file only its owner may read.
    Entry,
    /// A reference the host expands when it connects, in the host's own syntax: for a file that
    /// is shared (a project's, which people commit).
    Reference,
}

/// The environment variable a project file names the local token by.
pub const TOKEN_VARIABLE: &str = "MOAT_TOKEN";

/// What goes into a host's config file: this moat's entry in the table of servers, and the
/// VS Code input its header names, if any.
pub struct Entry {
    pub table: &'static str,
    pub server: Value,
    pub input: Option<Value>,
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
/// It is printed for the user, so it holds the token itself.
pub fn snippet(host: Host, name: &str, launch: &Launch) -> Result<String> {
    if host == Host::ClaudeCode {
        return claude_code_command(name, launch);
    }
    let Entry { table, server, .. } = entry(host, name, launch, TokenIn::Entry)?;
    Ok(serde_json::to_string_pretty(
        &json!({ table: { name: server } }),
    )?)
}

/// The table of servers in `host`'s config file.
pub fn servers_table(host: Host) -> &'static str {
    match host {
        Host::Vscode => "servers",
        Host::ClaudeDesktop | Host::ClaudeCode | Host::Cursor => "mcpServers",
    }
}

/// This moat's entry `name` in `host`'s config file, with the local token as `token_in` says.
pub fn entry(host: Host, name: &str, launch: &Launch, token_in: TokenIn) -> Result<Entry> {
    let table = servers_table(host);
    let (url, token) = match launch {
        Launch::Stdio { command, args } => {
            let server = match host {
                Host::Vscode => json!({"type": "stdio", "command": command, "args": args}),
                _ => json!({"command": command, "args": args}),
            };
            return Ok(Entry {
                table,
                server,
                input: None,
            });
        }
        Launch::Http { url, token } => (url, token),
    };
    let (authorization, input) = match token {
        Some(token) => {
            let (value, input) = token_value(host, name, token, token_in)?;
            (Some(format!("Bearer {value}")), input)
        }
        None => (None, None),
    };
    let server = match host {
        // Claude Desktop's file starts stdio servers only: mcp-remote bridges to HTTP, the
        // header's value in its environment rather than on a command line `ps` shows.
        Host::ClaudeDesktop => {
            let mut server = json!({"command": "npx", "args": ["-y", "mcp-remote", url]});
            if let Some(authorization) = authorization {
                let args = server["args"].as_array_mut().expect("made above");
                args.push(json!("--header"));
                args.push(json!("Authorization:${MOAT_HEADER_0}"));
                server["env"] = json!({"MOAT_HEADER_0": authorization});
            }
            server
        }
        Host::Cursor | Host::ClaudeCode | Host::Vscode => {
            let mut server = match host {
                Host::Cursor => json!({"url": url}),
                _ => json!({"type": "http", "url": url}),
            };
            if let Some(authorization) = authorization {
                server["headers"] = json!({"Authorization": authorization});
            }
            server
        }
    };
    Ok(Entry {
        table,
        server,
        input,
    })
}

/// What stands for the local token in `host`'s entry, and the VS Code input it names. Each host
/// has its own syntax for what it expands when it connects: Claude Code `${VAR}` and Cursor
/// `${env:VAR}` from their environment; VS Code asks for an input once and keeps the answer in
/// its secret storage (its `${env:…}` is not expanded in headers everywhere); Claude Desktop
/// expands nothing in its file.
fn token_value(
    host: Host,
    name: &str,
    token: &LocalToken,
    token_in: TokenIn,
) -> Result<(String, Option<Value>)> {
    Ok(match (token_in, host) {
        (TokenIn::Entry, _) => (token.value.clone(), None),
        (TokenIn::Reference, Host::ClaudeCode) => (format!("${{{TOKEN_VARIABLE}}}"), None),
        (TokenIn::Reference, Host::Cursor) => (format!("${{env:{TOKEN_VARIABLE}}}"), None),
        (TokenIn::Reference, Host::Vscode) => {
            let id = token_input_id(name);
            let input = json!({
                "type": "promptString",
                "id": id,
                "description": format!(
                    "moat's local token for the server \"{name}\" (the text of its token file)"
                ),
                "password": true,
            });
            (format!("${{input:{id}}}"), Some(input))
        }
        (TokenIn::Reference, Host::ClaudeDesktop) => bail!(
            "Claude Desktop expands no environment variable in its config file, so this entry \
             would hold the local token itself; moat writes the token only into Claude Desktop's \
             own file, which only you may read: leave out --file and MOAT_HOST_CONFIG, or print \
             the entry without --write and add it by hand"
        ),
    })
}

/// The id of the VS Code input that asks for the local token.
fn token_input_id(name: &str) -> String {
    format!("{name}-token")
}

/// What the user must do, now that `path` names the local token as `token_in` says.
pub fn token_note(
    host: Host,
    name: &str,
    path: &Path,
    token: &LocalToken,
    token_in: TokenIn,
) -> String {
    let path = path.display();
    let host_name = match host {
        Host::ClaudeDesktop => "Claude Desktop",
        Host::ClaudeCode => "Claude Code",
        Host::Cursor => "Cursor",
        Host::Vscode => "VS Code",
    };
    let export = format!(
        "export {TOKEN_VARIABLE}=\"$(cat {})\"",
        shell_quote(&token.file.display().to_string())
    );
    match (token_in, host) {
        (TokenIn::Entry, _) => format!("{path} holds the local token: only you may read it"),
        (TokenIn::Reference, Host::Vscode) => format!(
            "{path} holds no token: {host_name} asks for input \"{}\" when it first starts \
             the server and keeps the answer in its secret storage; give it the text of {}",
            token_input_id(name),
            token.file.display()
        ),
        (TokenIn::Reference, _) => format!(
            "{path} holds no token, only a reference to ${TOKEN_VARIABLE}: start {host_name} \
             with the local token in it, e.g. after `{export}`"
        ),
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
        Launch::Http { url, token } => {
            let mut command = format!(
                "claude mcp add --transport http {} {}",
                shell_quote(name),
                shell_quote(url)
            );
            if let Some(token) = token {
                command.push_str(" --header ");
                command.push_str(&shell_quote(&format!(
                    "Authorization: Bearer {}",
                    token.value
                )));
            }
            Ok(command)
        }
    }
}

/// The `[auth]` and `[http]` tables of `config`, or none.
pub fn service(config: Option<&Path>) -> Result<Service> {
    match config {
        Some(config) => moat::serve::config::read_service(config, None),
        None => Ok(Service::default()),
    }
}

/// The local token a host needs for a moat serving HTTP with `service`; none when it names
/// other credentials (API keys, OAuth), which the host brings itself.
pub fn local_token(service: &Service, token_file: Option<PathBuf>) -> Result<Option<LocalToken>> {
    if !service.api_keys.is_empty() || service.oauth.is_some() {
        return Ok(None);
    }
    let file = moat::access::credentials::token_file(token_file, service.token_file.clone())?;
    let value = moat::access::credentials::local_token(&file)?;
    // Absolute: the user reads it from wherever the host runs.
    let file = std::path::absolute(&file).unwrap_or(file);
    Ok(Some(LocalToken { value, file }))
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

    fn http() -> Launch {
        Launch::Http {
            url: "http://127.0.0.1:8080/mcp".into(),
            token: Some(LocalToken {
                value: "moat_x".into(),
                file: "/home/me/.config/moat/http-token".into(),
            }),
        }
    }

    #[test]
    fn http_hosts_get_the_url_and_the_token() {
        let http = http();
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

    #[test]
    fn a_shared_file_names_the_token_in_each_hosts_own_syntax() {
        let header = |host| {
            let entry = entry(host, "moat", &http(), TokenIn::Reference).unwrap();
            let server = serde_json::to_string(&entry.server).unwrap();
            assert!(!server.contains("moat_x"), "{server}");
            (
                entry.server["headers"]["Authorization"].clone(),
                entry.input,
            )
        };
        assert_eq!(
            header(Host::ClaudeCode),
            (json!("Bearer ${MOAT_TOKEN}"), None)
        );
        assert_eq!(
            header(Host::Cursor),
            (json!("Bearer ${env:MOAT_TOKEN}"), None)
        );
        let (vscode, input) = header(Host::Vscode);
        assert_eq!(vscode, "Bearer ${input:moat-token}");
        let input = input.expect("VS Code asks for the token");
        assert_eq!(input["id"], "moat-token");
        assert_eq!(input["password"], true);
        assert!(!input.to_string().contains("moat_x"));
        let refused = entry(Host::ClaudeDesktop, "moat", &http(), TokenIn::Reference);
        assert!(
            refused
                .err()
                .is_some_and(|e| e.to_string().contains("expands no environment variable"))
        );
    }

    #[test]
    fn the_note_says_how_to_give_the_host_the_token() {
        let Launch::Http {
            token: Some(token), ..
        } = http()
        else {
            unreachable!()
        };
        let note = token_note(
            Host::ClaudeCode,
            "moat",
            Path::new(".mcp.json"),
            &token,
            TokenIn::Reference,
        );
        assert!(
            note.contains("export MOAT_TOKEN=\"$(cat /home/me/.config/moat/http-token)\""),
            "{note}"
        );
        assert!(!note.contains("moat_x"));
    }
}
