//! Each MCP host's own config file: where it is, and `moat config HOST --write`, which merges
//! this moat's entry into it and keeps everything else, with the old file kept as `FILE.bak`
//! (both written by `replace_file`: through no link, never more readable than before). The local
//! token goes only into the host's own user file (Claude Desktop's, Cursor's), made private to its
//! owner; any other file, a project's above all, names it by a reference the host expands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::host_auth::{Credential, TokenIn, note};
use super::hosts::{Entry, Host, Launch, entry, servers_table};
use super::replace_file::{self, backup_path};

/// `--write` and where to.
#[derive(clap::Args)]
pub struct WriteArgs {
    /// Merge the entry into the host's config file instead of printing it (the old file is
    /// kept as FILE.bak).
    #[arg(long)]
    pub write: bool,
    /// The host's config file to write (default: $MOAT_HOST_CONFIG, else the host's own; see
    /// `moat doctor`).
    #[arg(long, value_name = "FILE", requires = "write")]
    pub file: Option<PathBuf>,
}

/// Where `host` keeps its MCP servers: Claude Desktop's and Cursor's user files, Claude Code's
/// and VS Code's project files in the current folder.
pub fn config_file(host: Host) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match host {
        Host::ClaudeDesktop if cfg!(target_os = "macos") => {
            Some(home?.join("Library/Application Support/Claude/claude_desktop_config.json"))
        }
        Host::ClaudeDesktop => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".config")))?;
            Some(config.join("Claude/claude_desktop_config.json"))
        }
        Host::Cursor => Some(home?.join(".cursor/mcp.json")),
        Host::ClaudeCode => Some(PathBuf::from(".mcp.json")),
        Host::Vscode => Some(PathBuf::from(".vscode/mcp.json")),
    }
}

/// The file `--write` writes: the flag's, else `MOAT_HOST_CONFIG`, else the host's own.
fn target(host: Host, file: Option<PathBuf>) -> Result<PathBuf> {
    file.or_else(|| std::env::var_os("MOAT_HOST_CONFIG").map(PathBuf::from))
        .or_else(|| config_file(host))
        .context("no home folder to find the host's config file in: give --file")
}

/// Merges the entry `name` for `launch` into the host's config file.
pub fn write(host: Host, name: &str, launch: &Launch, file: Option<PathBuf>) -> Result<ExitCode> {
    let path = target(host, file)?;
    let token_in = if users_own_file(host, &path) {
        TokenIn::Entry
    } else {
        TokenIn::Reference
    };
    let credential = match launch {
        Launch::Http { credential, .. } => Some(credential),
        Launch::Stdio { .. } => None,
    };
    let entry = entry(host, name, launch, token_in)
        .with_context(|| format!("not writing {}", path.display()))?;
    let key = entry.table;
    let old = replace_file::read_existing(&path)?;
    let (merged, replaced) = merge(old.as_ref().map(|old| old.text.as_str()), name, entry)
        .with_context(|| format!("in {}", path.display()))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let holds_token =
        matches!(credential, Some(Credential::Local(_))) && token_in == TokenIn::Entry;
    replace_file::replace(&path, old.as_ref(), &(merged + "\n"), holds_token)?;
    let done = if replaced { "replaced" } else { "added" };
    let kept = match old {
        Some(_) => format!("; the file as it was is {}", backup_path(&path).display()),
        None => String::new(),
    };
    eprintln!(
        "moat: {done} \"{name}\" in `{key}` of {}{kept}; restart the host to pick it up",
        path.display()
    );
    if let Some(said) = credential.and_then(|c| note(host, name, Some(&path), c, token_in)) {
        eprintln!("moat: {said}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` is the host's own file in the user's home, which nobody commits: Claude
/// Desktop's or Cursor's. Claude Code's and VS Code's files are a project's, and a file named by
/// --file or MOAT_HOST_CONFIG is taken for one unless it is the same file.
fn users_own_file(host: Host, path: &Path) -> bool {
    matches!(host, Host::ClaudeDesktop | Host::Cursor)
        && config_file(host).is_some_and(|own| same_place(&own, path))
}

/// Whether two paths name the same place, their folders resolved (the file may not exist yet).
fn same_place(a: &Path, b: &Path) -> bool {
    fn resolved(path: &Path) -> Option<PathBuf> {
        let path = std::path::absolute(path).ok()?;
        let folder = path.parent()?;
        let folder = folder
            .canonicalize()
            .unwrap_or_else(|_| folder.to_path_buf());
        Some(folder.join(path.file_name()?))
    }
    resolved(a).is_some_and(|a| Some(a) == resolved(b))
}

/// `text` (a host's JSON config, or none yet) with `entry` as `table.name` (and its VS Code
/// input in `inputs`, in place of one with its id); whether an entry of that name was there
/// before. Everything else is kept as it was, in its order.
fn merge(text: Option<&str>, name: &str, entry: Entry) -> Result<(String, bool)> {
    let Entry {
        table,
        server,
        input,
    } = entry;
    let mut config: Value = match text {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text).context(
            "not plain JSON (comments or trailing commas?); moat changes nothing in a file it \
             cannot read whole: add the entry `moat config HOST` prints by hand",
        )?,
        _ => Value::Object(Default::default()),
    };
    let Value::Object(top) = &mut config else {
        bail!("the file is not a JSON object");
    };
    let servers = top
        .entry(table)
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(servers) = servers else {
        bail!("`{table}` is not a JSON object");
    };
    let replaced = servers.insert(name.to_string(), server).is_some();
    if let Some(input) = input {
        let inputs = top
            .entry("inputs")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(inputs) = inputs else {
            bail!("`inputs` is not a JSON array");
        };
        inputs.retain(|other| other.get("id") != input.get("id"));
        inputs.push(input);
    }
    Ok((serde_json::to_string_pretty(&config)?, replaced))
}

/// Whether the host's config file names this moat binary; `None` when the file or its
/// servers table is missing or unreadable.
pub fn points_at(host: Host, path: &Path, moat: &Path) -> Option<bool> {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let Some(servers) = config.get(servers_table(host)) else {
        return Some(false);
    };
    Some(servers.as_object()?.values().any(|server| {
        server
            .get("command")
            .and_then(Value::as_str)
            .is_some_and(|command| {
                let command = Path::new(command);
                command == moat || command.canonicalize().is_ok_and(|c| c == moat)
            })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(table: &'static str, server: Value) -> Entry {
        Entry {
            table,
            server,
            input: None,
        }
    }

    #[test]
    fn merging_keeps_everything_else_in_its_order() {
        let text = r#"{"theme": "dark", "mcpServers": {"other": {"command": "x"}, "moat": {}}}"#;
        let (merged, replaced) = merge(
            Some(text),
            "moat",
            entry("mcpServers", json!({"command": "/m"})),
        )
        .unwrap();
        assert!(replaced);
        let value: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(value["theme"], "dark");
        assert_eq!(value["mcpServers"]["other"], json!({"command": "x"}));
        assert_eq!(value["mcpServers"]["moat"], json!({"command": "/m"}));
        assert!(merged.find("theme") < merged.find("mcpServers"));
        assert!(
            merge(
                Some("{// a comment\n}"),
                "moat",
                entry("servers", json!({}))
            )
            .is_err()
        );
        let (fresh, replaced) = merge(None, "moat", entry("servers", json!({}))).unwrap();
        assert!(!replaced && fresh.contains("\"servers\""));
    }

    #[test]
    fn a_vscode_input_replaces_the_one_of_its_id_and_keeps_the_others() {
        let text = r#"{"inputs": [{"id": "theirs"}, {"id": "moat-token", "old": true}]}"#;
        let mut with_input = entry("servers", json!({}));
        with_input.input = Some(json!({"id": "moat-token", "password": true}));
        let (merged, _) = merge(Some(text), "moat", with_input).unwrap();
        let value: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(
            value["inputs"],
            json!([{"id": "theirs"}, {"id": "moat-token", "password": true}])
        );
    }

    #[test]
    fn only_the_hosts_own_user_file_is_the_users() {
        // HOME is read, not set: the test compares against whatever the host's own file is.
        if let Some(own) = config_file(Host::Cursor) {
            assert!(users_own_file(Host::Cursor, &own));
            assert!(!users_own_file(Host::Vscode, &own));
        }
        assert!(!users_own_file(Host::Cursor, Path::new(".cursor/mcp.json")));
        assert!(!users_own_file(Host::ClaudeCode, Path::new(".mcp.json")));
    }
}
