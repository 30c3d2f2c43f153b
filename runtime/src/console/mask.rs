//! moat.toml as an operator may see it: every value that may be a secret masked. What is
//! masked is decided by where a value sits (the keys that hold secrets, and every value of the
//! tables of them), never by what it looks like; a `${secret:NAME}` or `${env:NAME}` reference
//! is no secret and stays, so that the page says where each secret comes from.

use toml::Value;

const MASK: &str = "********";

/// Keys whose string values are secrets wherever they are.
const SECRET_KEYS: [&str; 6] = [
    "client_secret",
    "key",
    "request_state_key",
    "value",
    "password",
    "token",
];

/// Tables every value of which is masked: plugins' environments and settings, API key hashes.
const SECRET_TABLES: [&str; 3] = ["env", "config", "api_keys"];

/// `text` with its secrets masked, as TOML; a text that does not parse is not shown at all.
pub fn masked(text: &str) -> String {
    match text.parse::<toml::Table>() {
        Ok(mut table) => {
            for (key, value) in table.iter_mut() {
                mask(key, value, false);
            }
            toml::to_string_pretty(&table).unwrap_or_default()
        }
        Err(_) => "(the file does not parse as TOML: not shown)".into(),
    }
}

fn mask(key: &str, value: &mut Value, all: bool) {
    let secret_key = all || SECRET_KEYS.contains(&key) || key.ends_with("_secret");
    match value {
        Value::String(text) => {
            if secret_key && !is_reference(text) {
                *text = MASK.into();
            } else if key == "redis" {
                *text = without_password(text);
            }
        }
        Value::Table(table) => {
            let all = all || SECRET_TABLES.contains(&key);
            for (key, value) in table.iter_mut() {
                mask(key, value, all);
            }
        }
        Value::Array(items) => {
            for item in items {
                mask(key, item, all);
            }
        }
        _ => {}
    }
}

/// Whether `text` is only a `${secret:…}` or `${env:…}` reference (in some text, as in
/// `Bearer ${secret:TOKEN}`, with nothing else secret beside it).
fn is_reference(text: &str) -> bool {
    let mut rest = text;
    let mut found = false;
    while let Some(at) = rest.find("${") {
        let Some(end) = rest[at..].find('}') else {
            return false;
        };
        found = true;
        rest = &rest[at + end + 1..];
    }
    // Only a fixed scheme may stand beside a reference ("Bearer ", "Basic ").
    found
        && text
            .split("${")
            .next()
            .is_some_and(|before| before.len() <= 8)
        && rest.is_empty()
}

/// A Redis URL without the password its user part may hold.
fn without_password(url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?)))
    {
        Some((scheme, (_, host))) => format!("{scheme}://{MASK}@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_references_kept() {
        let text = r#"
            secrets = "secrets.toml"
            [plugins.fetch]
            path = "fetch.wasm"
            env = { TOKEN = "plain-env-secret", NAME = "${env:NAME}" }
            inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer literal-secret" },
                      { host = "b.example.com", header = "X-Key", value = "Bearer ${secret:B}" }]
            [auth]
            api_keys = { ci = "sha256:abcd" }
            [auth.oauth]
            issuer = "https://id.example.com"
            sign_in = { client_id = "moat", client_secret = "sign-in-secret" }
            [http]
            request_state_key = "0123456789abcdef0123456789abcdef"
            [cluster]
            redis = "redis://moat:redis-password@127.0.0.1:6379"
            [credential_store]
            key = "${secret:STORE}"
        "#;
        let shown = masked(text);
        for secret in [
            "plain-env-secret",
            "literal-secret",
            "sha256:abcd",
            "sign-in-secret",
            "0123456789abcdef",
            "redis-password",
        ] {
            assert!(!shown.contains(secret), "{secret} shows: {shown}");
        }
        for kept in [
            "${env:NAME}",
            "Bearer ${secret:B}",
            "${secret:STORE}",
            "fetch.wasm",
            "https://id.example.com",
            "127.0.0.1:6379",
        ] {
            assert!(shown.contains(kept), "{kept} is missing: {shown}");
        }
    }
}
