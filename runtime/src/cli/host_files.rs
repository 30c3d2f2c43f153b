//! Each MCP host's own config file: where it is, and `moat config HOST --write`, which merges
//! this moat's entry into it and keeps everything else, with the old file kept as `FILE.bak`
//! (both written by `replace_file`: through no link, never more readable than before).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::hosts::{Host, Launch, entry};
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
    let old = replace_file::read_existing(&path)?;
    let (key, server) = entry(host, launch);
    let (merged, replaced) = merge(old.as_ref().map(|old| old.text.as_str()), key, name, server)
        .with_context(|| format!("in {}", path.display()))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    replace_file::replace(&path, old.as_ref(), &(merged + "\n"), false)?;
    let done = if replaced { "replaced" } else { "added" };
    let kept = match old {
        Some(_) => format!("; the file as it was is {}", backup_path(&path).display()),
        None => String::new(),
    };
    eprintln!(
        "moat: {done} \"{name}\" in `{key}` of {}{kept}; restart the host to pick it up",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `text` (a host's JSON config, or none yet) with `server` as `table.name`; whether an entry
/// of that name was there before. Everything else is kept as it was, in its order.
fn merge(text: Option<&str>, table: &str, name: &str, server: Value) -> Result<(String, bool)> {
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
    Ok((serde_json::to_string_pretty(&config)?, replaced))
}

/// Whether the host's config file names this moat binary; `None` when the file or its
/// servers table is missing or unreadable.
pub fn points_at(host: Host, path: &Path, moat: &Path) -> Option<bool> {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let (table, _) = entry(
        host,
        &Launch::Stdio {
            command: PathBuf::new(),
            args: Vec::new(),
        },
    );
    let Some(servers) = config.get(table) else {
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

    #[test]
    fn merging_keeps_everything_else_in_its_order() {
        let text = r#"{"theme": "dark", "mcpServers": {"other": {"command": "x"}, "moat": {}}}"#;
        let (merged, replaced) =
            merge(Some(text), "mcpServers", "moat", json!({"command": "/m"})).unwrap();
        assert!(replaced);
        let value: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(value["theme"], "dark");
        assert_eq!(value["mcpServers"]["other"], json!({"command": "x"}));
        assert_eq!(value["mcpServers"]["moat"], json!({"command": "/m"}));
        assert!(merged.find("theme") < merged.find("mcpServers"));
        assert!(merge(Some("{// a comment\n}"), "servers", "moat", json!({})).is_err());
        let (fresh, replaced) = merge(None, "servers", "moat", json!({})).unwrap();
        assert!(!replaced && fresh.contains("\"servers\""));
    }
}
