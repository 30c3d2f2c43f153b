//! What each MCP host needs in its configuration to start this moat, with the same arguments.
//!
//! Paths are made absolute: hosts start servers from folders of their own choosing.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use moat::serve::service::Service;
use moat::supply::source::Source;
use serde_json::{Value, json};

use super::host_auth::{Credential, KEY_VARIABLE, TokenIn, authorization};

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
    /// The host connects to a moat already serving this URL, with the credential it accepts.
    Http { url: String, credential: Credential },
}

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

/// Refuses what `moat serve` would refuse at once: a local plugin that is not there or is not
/// WebAssembly, a config that is not there. A host given such an entry fails each time it starts
/// moat, far from the command that wrote it.
pub fn check_sources(plugins: &[PathBuf], config: Option<&Path>, cwd: &Path) -> Result<()> {
    for plugin in plugins {
        Source::parse(&plugin.to_string_lossy(), cwd)?.check_local()?;
    }
    if let Some(config) = config
        && !cwd.join(config).is_file()
    {
        bail!("no moat.toml at {}: no such file", config.display());
    }
    Ok(())
}

/// The snippet for `host`: JSON for the hosts configured by file, a shell command for Claude Code.
/// It is printed for the user, so it holds the local token itself.
pub fn snippet(host: Host, name: &str, launch: &Launch) -> Result<String> {
    if host == Host::ClaudeCode {
        return claude_code_command(name, launch);
    }
    let Entry {
        table,
        server,
        input,
    } = entry(host, name, launch, TokenIn::Entry)?;
    let mut snippet = json!({ table: { name: server } });
    if let Some(input) = input {
        snippet["inputs"] = json!([input]);
    }
    Ok(serde_json::to_string_pretty(&snippet)?)
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
    let (url, credential) = match launch {
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
        Launch::Http { url, credential } => (url, credential),
    };
    let (authorization, input) = match authorization(host, name, credential, token_in)? {
        Some((value, input)) => (Some(value), input),
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
        Launch::Http { url, credential } => {
            let mut command = format!(
                "claude mcp add --transport http {} {}",
                shell_quote(name),
                shell_quote(url)
            );
            match credential {
                Credential::Local(token) => {
                    command.push_str(" --header ");
                    command.push_str(&shell_quote(&format!(
                        "Authorization: Bearer {}",
                        token.value
                    )));
                }
                // Double quotes: the shell puts the key in as the command runs.
                Credential::ApiKey => command.push_str(&format!(
                    " --header \"Authorization: Bearer ${{{KEY_VARIABLE}}}\""
                )),
                Credential::OAuth { .. } => {}
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

fn absolute(path: &Path, cwd: &Path) -> String {
    // URLs and oci:// references are passed on as they are.
    if path.to_str().is_some_and(|p| p.contains("://")) {
        return path.display().to_string();
    }
    let path = cwd.join(path);
    path.canonicalize().unwrap_or(path).display().to_string()
}

/// Quotes a word for a POSIX shell when it needs it.
pub fn shell_quote(word: &str) -> String {
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
    use super::super::host_auth::{LocalToken, note};
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
            credential: Credential::Local(LocalToken {
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
        let Launch::Http { credential, .. } = http() else {
            unreachable!()
        };
        let note = note(
            Host::ClaudeCode,
            "moat",
            Some(Path::new(".mcp.json")),
            &credential,
            TokenIn::Reference,
        )
        .unwrap();
        assert!(
            note.contains("export MOAT_TOKEN=\"$(cat /home/me/.config/moat/http-token)\""),
            "{note}"
        );
        assert!(!note.contains("moat_x"));
        // Printed, the entry holds the token: nothing is left to do.
        assert!(note_of(Host::Cursor, None, &credential).is_none());
    }

    fn note_of(host: Host, path: Option<&Path>, credential: &Credential) -> Option<String> {
        note(host, "moat", path, credential, TokenIn::Entry)
    }

    fn keyed() -> Launch {
        Launch::Http {
            url: "http://127.0.0.1:8080/mcp".into(),
            credential: Credential::ApiKey,
        }
    }

    #[test]
    fn with_api_keys_every_host_names_a_key_and_is_told_to_make_one() {
        let header = |host| {
            let entry = entry(host, "moat", &keyed(), TokenIn::Entry).unwrap();
            let server = entry.server;
            let value = match host {
                Host::ClaudeDesktop => server["env"]["MOAT_HEADER_0"].clone(),
                _ => server["headers"]["Authorization"].clone(),
            };
            (value, entry.input.map(|i| i["id"].clone()))
        };
        assert_eq!(
            header(Host::Cursor),
            (json!("Bearer ${env:MOAT_API_KEY}"), None)
        );
        assert_eq!(
            header(Host::ClaudeCode),
            (json!("Bearer ${MOAT_API_KEY}"), None)
        );
        assert_eq!(
            header(Host::Vscode),
            (
                json!("Bearer ${input:moat-api-key}"),
                Some(json!("moat-api-key"))
            )
        );
        assert_eq!(
            header(Host::ClaudeDesktop),
            (json!("Bearer REPLACE_WITH_MOAT_API_KEY"), None)
        );
        assert_eq!(
            snippet(Host::ClaudeCode, "moat", &keyed()).unwrap(),
            "claude mcp add --transport http moat http://127.0.0.1:8080/mcp \
             --header \"Authorization: Bearer ${MOAT_API_KEY}\""
        );
        // VS Code's printed snippet carries the input its header names.
        let vscode: Value =
            serde_json::from_str(&snippet(Host::Vscode, "moat", &keyed()).unwrap()).unwrap();
        assert_eq!(vscode["inputs"][0]["id"], "moat-api-key");
        for host in [
            Host::ClaudeDesktop,
            Host::ClaudeCode,
            Host::Cursor,
            Host::Vscode,
        ] {
            let said = note_of(host, None, &Credential::ApiKey).unwrap();
            assert!(said.contains("`moat auth key NAME`"), "{said}");
            assert!(said.contains("not the local token"), "{said}");
        }
    }

    #[test]
    fn with_oauth_alone_the_host_signs_in_and_the_entry_has_no_header() {
        let oauth = Credential::OAuth {
            issuer: "https://id.example.com".into(),
        };
        let launch = Launch::Http {
            url: "https://tools.example.com/mcp".into(),
            credential: oauth,
        };
        let cursor: Value =
            serde_json::from_str(&snippet(Host::Cursor, "moat", &launch).unwrap()).unwrap();
        assert_eq!(
            cursor["mcpServers"]["moat"],
            json!({"url": "https://tools.example.com/mcp"})
        );
        let Launch::Http { credential, .. } = &launch else {
            unreachable!()
        };
        let said = note_of(Host::Cursor, None, credential).unwrap();
        assert!(said.contains("https://id.example.com"), "{said}");
    }
}
