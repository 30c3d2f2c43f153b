//! The credential a host sends to `moat serve --http`, chosen as moat chooses what it accepts,
//! and how a host's entry names it. Without `[auth]` keys or OAuth, moat accepts its local token;
//! with either, it accepts only those, so an entry with the local token would be refused.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use moat::serve::service::Service;
use serde_json::{Value, json};

use super::hosts::Host;

/// What a host sends moat.
pub enum Credential {
    /// moat's local token: `[auth]` names no API keys and no OAuth issuer.
    Local(LocalToken),
    /// One of `[auth] api_keys`. moat keeps only their hashes, so the entry names the key by a
    /// reference the user fills ([`KEY_VARIABLE`]).
    ApiKey,
    /// OAuth alone: the host signs in at the issuer itself, and its entry holds nothing.
    OAuth { issuer: String },
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
/// The environment variable an entry names an API key by.
pub const KEY_VARIABLE: &str = "MOAT_API_KEY";
/// What stands for the API key in Claude Desktop's entry, which expands nothing: the user
/// replaces it.
pub const KEY_PLACEHOLDER: &str = "REPLACE_WITH_MOAT_API_KEY";

/// The credential a moat serving HTTP with `service` accepts from a host.
pub fn credential(service: &Service, token_file: Option<PathBuf>) -> Result<Credential> {
    if !service.api_keys.is_empty() {
        return Ok(Credential::ApiKey);
    }
    if let Some(oauth) = &service.oauth {
        return Ok(Credential::OAuth {
            issuer: oauth.issuer.clone(),
        });
    }
    let file = moat::access::credentials::token_file(token_file, service.token_file.clone())?;
    let value = moat::access::credentials::local_token(&file)?;
    // Absolute: the user reads it from wherever the host runs.
    let file = std::path::absolute(&file).unwrap_or(file);
    Ok(Credential::Local(LocalToken { value, file }))
}

/// The `Authorization` value of `host`'s entry `name`, and the VS Code input it names; `None`
/// when the host sends no header (OAuth).
pub fn authorization(
    host: Host,
    name: &str,
    credential: &Credential,
    token_in: TokenIn,
) -> Result<Option<(String, Option<Value>)>> {
    let (value, input) = match credential {
        Credential::OAuth { .. } => return Ok(None),
        Credential::Local(token) => match token_in {
            TokenIn::Entry => (token.value.clone(), None),
            TokenIn::Reference => reference(host, name, TOKEN_VARIABLE, "token")?,
        },
        Credential::ApiKey => match host {
            Host::ClaudeDesktop => (KEY_PLACEHOLDER.to_string(), None),
            _ => reference(host, name, KEY_VARIABLE, "api-key")?,
        },
    };
    Ok(Some((format!("Bearer {value}"), input)))
}

/// What stands for a secret in `host`'s entry, and the VS Code input it names. Each host has its
/// own syntax for what it expands when it connects: Claude Code `${VAR}` and Cursor
/// `${env:VAR}` from their environment; VS Code asks for an input once and keeps the answer in
/// its secret storage (its `${env:…}` is not expanded in headers everywhere); Claude Desktop
/// expands nothing in its file.
fn reference(
    host: Host,
    name: &str,
    variable: &str,
    what: &str,
) -> Result<(String, Option<Value>)> {
    Ok(match host {
        Host::ClaudeCode => (format!("${{{variable}}}"), None),
        Host::Cursor => (format!("${{env:{variable}}}"), None),
        Host::Vscode => {
            let id = input_id(name, what);
            let input = json!({
                "type": "promptString",
                "id": id,
                "description": match what {
                    "token" => format!(
                        "moat's local token for the server \"{name}\" (the text of its token file)"
                    ),
                    _ => format!("an API key of moat's [auth] api_keys for the server \"{name}\""),
                },
                "password": true,
            });
            (format!("${{input:{id}}}"), Some(input))
        }
        Host::ClaudeDesktop => bail!(
            "Claude Desktop expands no environment variable in its config file, so this entry \
             would hold the local token itself; moat writes the token only into Claude Desktop's \
             own file, which only you may read: leave out --file and MOAT_HOST_CONFIG, or print \
             the entry without --write and add it by hand"
        ),
    })
}

/// The id of the VS Code input that asks for the `what` (`token`, `api-key`).
fn input_id(name: &str, what: &str) -> String {
    format!("{name}-{what}")
}

/// What the user must do, now that the entry (printed, or written to `path`) names
/// `credential` as `token_in` says; `None` when nothing is left to do.
pub fn note(
    host: Host,
    name: &str,
    path: Option<&Path>,
    credential: &Credential,
    token_in: TokenIn,
) -> Option<String> {
    let host_name = host_name(host);
    let entry = match path {
        Some(path) => path.display().to_string(),
        None => "the entry".to_string(),
    };
    match credential {
        Credential::OAuth { issuer } => Some(format!(
            "this moat accepts OAuth access tokens from {issuer}, not the local token: \
             {host_name} signs in there itself when it connects, so {entry} holds no header"
        )),
        Credential::ApiKey => {
            let how = match host {
                Host::ClaudeDesktop => format!("write it in place of {KEY_PLACEHOLDER} in {entry}"),
                Host::Vscode => format!(
                    "{host_name} asks for it (input \"{}\") when it first starts the server",
                    input_id(name, "api-key")
                ),
                Host::ClaudeCode if path.is_none() => {
                    format!("`export {KEY_VARIABLE}=KEY` before running the command")
                }
                Host::ClaudeCode | Host::Cursor => format!(
                    "start {host_name} with it in ${KEY_VARIABLE} (`export {KEY_VARIABLE}=KEY`)"
                ),
            };
            Some(format!(
                "this moat accepts the API keys of [auth] api_keys, not the local token: make one \
                 with `moat auth key NAME` (it prints the hash to add to [auth] api_keys), then \
                 {how}"
            ))
        }
        Credential::Local(token) => {
            let path = path?;
            let path = path.display();
            let export = format!(
                "export {TOKEN_VARIABLE}=\"$(cat {})\"",
                super::hosts::shell_quote(&token.file.display().to_string())
            );
            Some(match (token_in, host) {
                (TokenIn::Entry, _) => {
                    format!("{path} holds the local token: only you may read it")
                }
                (TokenIn::Reference, Host::Vscode) => format!(
                    "{path} holds no token: {host_name} asks for input \"{}\" when it first \
                     starts the server and keeps the answer in its secret storage; give it the \
                     text of {}",
                    input_id(name, "token"),
                    token.file.display()
                ),
                (TokenIn::Reference, _) => format!(
                    "{path} holds no token, only a reference to ${TOKEN_VARIABLE}: start \
                     {host_name} with the local token in it, e.g. after `{export}`"
                ),
            })
        }
    }
}

fn host_name(host: Host) -> &'static str {
    match host {
        Host::ClaudeDesktop => "Claude Desktop",
        Host::ClaudeCode => "Claude Code",
        Host::Cursor => "Cursor",
        Host::Vscode => "VS Code",
    }
}
