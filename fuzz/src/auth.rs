//! Who a caller is and what it may call: an arbitrary `Authorization` header through moat's
//! bearer check, and arbitrary token claims through the principal they make and the
//! `[[access]]` rules of a `moat.toml`.
//!
//! Input: the header's value, a newline, then the claims as JSON (a JWT's payload, an
//! introspection answer). Checks that the header is accepted only when it is
//! `Bearer <a configured credential>`, that a refusal never quotes the credential, that each
//! principal gets exactly the tools the rules give it (against a model of them written out
//! below), and that globs match as a plain dynamic-programming matcher says.

use std::path::PathBuf;
use std::sync::LazyLock;

use super::RUNTIME;
use moat::access::authenticator::{Authenticator, Refusal};
use moat::access::credentials::{ApiKeys, digest};
use moat::access::oauth::claims::Claims;
use moat::access::tool_sets::ToolSets;
use moat::access::{Principal, Via, glob};
use serde_json::{Map, Value};

const TOKEN: &str = "moat_fuzz_token_0123456789abcdef";
const KEY: &str = "moat_fuzz_key_ci_0123456789abcdef";

/// The rules the model in [`expected`] describes, as an operator writes them.
const CONFIG: &str = r#"
[[access]]
group = "eng"
allow = ["plugin:notes", "echo_*"]
deny = ["notes_purge"]

[[access]]
key = "ci"
allow = ["echo_echo"]

[[access]]
scope = "admin"
allow = ["*"]

[[access]]
subject = "mallory*"
deny = ["*"]

[[access]]
client_id = "bot-?"
allow = ["echo_*"]
"#;

/// (plugin, tool) pairs asked about for every principal.
const TOOLS: [(&str, &str); 7] = [
    ("notes", "notes_search"),
    ("notes", "notes_purge"),
    ("notes", "notes_delete"),
    ("echo", "echo_echo"),
    ("echo", "echo_shout"),
    ("shapes", "shapes_area"),
    ("shapes", "echo_like"),
];

static AUTHENTICATOR: LazyLock<Authenticator> = LazyLock::new(|| {
    Authenticator::new(
        Some(TOKEN),
        ApiKeys::new(vec![("ci".into(), digest(KEY))]),
        None,
    )
});

/// The config's rules, read as `moat serve` reads them, under a policy denying `*_delete`.
static TOOL_SETS: LazyLock<ToolSets> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("moat-fuzz-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("moat.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let service = moat::serve::config::read_service(&path, None).expect("the rules parse");
    service.tool_sets(&["*_delete".to_string()])
});

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let (header, claims) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    authenticate(header);
    if let Ok(values) = serde_json::from_slice::<Map<String, Value>>(claims) {
        for via in [Via::Jwt, Via::Introspection] {
            let claims = Claims {
                via,
                values: values.clone(),
            };
            let _ = claims.has_audience("http://127.0.0.1:1/mcp");
            let named = |claim: &str| matches!(values.get(claim), Some(Value::String(_)));
            let principal = match claims.principal() {
                Ok(principal) => principal,
                Err(_) => {
                    // Refused only for naming no one: it could not be told from another such.
                    assert!(!named("sub") && !named("client_id") && !named("azp"));
                    continue;
                }
            };
            assert_eq!(principal.via, via);
            if let Some(Value::String(sub)) = values.get("sub") {
                // Namespaced where it could pass for another authenticator's principal.
                let namespaced = format!("sub:{sub}");
                assert!(
                    principal.name == *sub || principal.name == namespaced,
                    "{sub:?}"
                );
                assert!(!principal.name.starts_with("key:") && principal.name != "local");
            }
            // `scope` is a space-separated list, as RFC 8693 and 7662 have it.
            if let Some(Value::String(scope)) = values.get("scope") {
                for word in scope.split_whitespace() {
                    assert!(principal.scopes.iter().any(|s| s == word), "{word:?}");
                }
            }
            check_tools(&principal);
        }
        globs(&values);
    }
}

fn authenticate(header: &[u8]) {
    match RUNTIME.block_on(AUTHENTICATOR.authenticate(Some(header))) {
        Ok(principal) => {
            let token = bearer(header).expect("only a bearer credential is accepted");
            match token {
                TOKEN => assert_eq!(principal, Principal::local()),
                KEY => assert_eq!(principal, Principal::api_key("ci")),
                other => panic!("accepted {other:?}"),
            }
            check_tools(&principal);
        }
        Err(Refusal::Invalid(why)) => {
            // The reason depends on the credential's shape, never its characters: the same
            // header with other letters and digits is refused for the same reason.
            let other = rotated(header);
            if let Err(Refusal::Invalid(again)) =
                RUNTIME.block_on(AUTHENTICATOR.authenticate(Some(&other)))
            {
                assert_eq!(why, again, "the refusal quotes the credential");
            }
        }
        Err(refusal) => panic!("a header without OAuth refused as {refusal:?}"),
    }
}

/// The token of `Bearer TOKEN` (any case, any spacing around the token).
fn bearer(header: &[u8]) -> Option<&str> {
    let (scheme, token) = std::str::from_utf8(header).ok()?.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// `header` with each ASCII letter and digit after the scheme replaced by the next one.
fn rotated(header: &[u8]) -> Vec<u8> {
    let start = header
        .iter()
        .position(|&b| b == b' ')
        .map_or(header.len(), |i| i + 1);
    let mut out = header.to_vec();
    for b in &mut out[start..] {
        *b = match *b {
            b'z' => b'a',
            b'Z' => b'A',
            b'9' => b'0',
            b'a'..=b'y' | b'A'..=b'Y' | b'0'..=b'8' => *b + 1,
            other => other,
        };
    }
    out
}

fn check_tools(principal: &Principal) {
    for (plugin, tool) in TOOLS {
        assert_eq!(
            TOOL_SETS.allows(principal, plugin, tool),
            expected(principal, plugin, tool),
            "{principal:?} and {tool}"
        );
    }
}

/// What [`CONFIG`] under the policy gives `principal`, written out by hand.
fn expected(principal: &Principal, plugin: &str, tool: &str) -> bool {
    let eng = principal.groups.iter().any(|g| g == "eng");
    let admin = principal.scopes.iter().any(|s| s == "admin");
    let ci = principal.key.as_deref() == Some("ci");
    let mallory = principal
        .subject
        .as_deref()
        .is_some_and(|s| s.starts_with("mallory"));
    let bot = principal
        .client_id
        .as_deref()
        .is_some_and(|c| c.starts_with("bot-") && c.chars().count() == 5);
    if tool.ends_with("_delete") || mallory || (eng && tool == "notes_purge") {
        return false;
    }
    (eng && (plugin == "notes" || tool.starts_with("echo_")))
        || (ci && tool == "echo_echo")
        || admin
        || (bot && tool.starts_with("echo_"))
}

/// Each short claim's name as a pattern against its string value, and the other way round.
fn globs(values: &Map<String, Value>) {
    for (name, value) in values {
        let Value::String(value) = value else {
            continue;
        };
        if name.chars().count() > 32 || value.chars().count() > 32 {
            continue;
        }
        for (pattern, text) in [
            (name.as_str(), value.as_str()),
            (value.as_str(), name.as_str()),
        ] {
            assert_eq!(
                glob::matches(pattern, text),
                reference(pattern, text),
                "{pattern:?} against {text:?}"
            );
        }
    }
}

/// Glob matching by dynamic programming: whether `pattern[..i]` matches `text[..j]`, for all.
fn reference(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let mut row = vec![false; t.len() + 1];
    row[0] = true;
    for &c in &p {
        let mut next = vec![false; t.len() + 1];
        for j in 0..=t.len() {
            next[j] = match c {
                '*' => row[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && row[j - 1],
                c => j > 0 && t[j - 1] == c && row[j - 1],
            };
        }
        row = next;
    }
    row[t.len()]
}
