//! `moat.schema.json`, the JSON Schema editors check `moat.toml` against: the configs moat reads
//! fit it, the mistakes moat refuses do not, and its patterns never refuse what moat accepts.
//! (That the file is what moat generates is a unit test of the runtime crate.)

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use moat::sandbox::network::{Injection, NetworkGrant};
use moat::supply::source::Source;
use serde_json::{Value, json};

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed schema, compiled once.
static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let path = repo_root().join("moat.schema.json");
    let text = std::fs::read_to_string(&path).expect("reading moat.schema.json");
    let schema: Value = serde_json::from_str(&text).expect("moat.schema.json is JSON");
    crate::shapes::validator(&schema)
});

/// A TOML text as the JSON an editor checks against the schema.
fn as_json(toml_text: &str) -> Value {
    let table: toml::Table = toml::from_str(toml_text).expect("valid TOML");
    serde_json::to_value(table).expect("TOML as JSON")
}

/// Why `config` does not fit the schema; empty when it does.
fn schema_errors(config: &Value) -> Vec<String> {
    VALIDATOR
        .iter_errors(config)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Checks that the TOML `text` fits the schema, saying why not.
pub(crate) fn assert_fits(text: &str, what: &str) {
    let errors = schema_errors(&as_json(text));
    assert!(
        errors.is_empty(),
        "{what} does not fit moat.schema.json: {errors:#?}\n{text}"
    );
}

/// The first ```toml block of README.md after the line that contains `after`.
fn readme_toml(after: &str) -> String {
    readme_block(after, "toml")
}

/// The first ```{lang} block of README.md after the line that contains `after`.
pub(crate) fn readme_block(after: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find(after)
        .unwrap_or_else(|| panic!("README.md no longer says {after:?}"));
    let block = readme[start..]
        .split_once(&format!("```{lang}\n"))
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap_or_else(|| panic!("no ```{lang} block after {after:?} in README.md"));
    block.0.to_string()
}

#[test]
fn the_readme_and_repository_configs_fit() {
    for (what, text) in [
        (
            "README's moat.toml",
            readme_toml("`moat.toml` names plugins, their grants and their limits"),
        ),
        (
            "README's filesystem and memory example",
            readme_toml("`filesystem`, `memory` and `notebook` need a directory granted"),
        ),
        (
            "tests/conformance/moat.toml",
            std::fs::read_to_string(repo_root().join("tests/conformance/moat.toml")).unwrap(),
        ),
    ] {
        assert_fits(&text, what);
    }
    // Every key, as the runtime's own tests write them.
    assert_fits(
        r#"secrets = "secrets.toml"
[plugins.api]
source = "oci://127.0.0.1:5000/api@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
deadline_ms = 5000
max_memory_mb = 64
max_output_kb = 64
max_result_kb = 4096
max_concurrent_calls = 4
max_queued_calls = 0
fuel = 100000000
files = [{ host = "data", guest = "/data", mode = "ro" }, { host = ".", guest = "/", mode = "rw" }]
network = ["https://api.example.com", "*.wikipedia.org:443", "http://127.0.0.1:8080", "[::1]:*", "*"]
inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]
env = { KEY = "${secret:API_TOKEN}", MIXED = "a-${env:HOST_NAME}-b", PRICE = "$5", DOLLARS = "$$" }

[audit]
path = "audit.jsonl"
arguments = true
"#,
        "a config with every key",
    );
}

#[test]
fn the_readmes_moat_toml_shows_every_limit_of_a_plugin() {
    let text = std::fs::read_to_string(repo_root().join("moat.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    // The limits: a plugin entry's integer keys.
    let limits: Vec<&String> = schema["$defs"]["PluginEntry"]["properties"]
        .as_object()
        .expect("a plugin entry's properties")
        .iter()
        .filter(|(_, property)| property["type"] == "integer")
        .map(|(key, _)| key)
        .collect();
    assert!(limits.len() >= 7, "{limits:?}");
    let example = as_json(&readme_toml(
        "`moat.toml` names plugins, their grants and their limits",
    ));
    let shown: Vec<&String> = example["plugins"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|plugin| plugin.as_object().unwrap().keys())
        .collect();
    let missing: Vec<&&String> = limits.iter().filter(|l| !shown.contains(l)).collect();
    assert!(
        missing.is_empty(),
        "README's moat.toml leaves out {missing:?}"
    );
}

#[test]
fn mistakes_moat_refuses_do_not_fit() {
    let grant = "path = \"a.wasm\"\nnetwork = [\"https://a.org\"]";
    let plugin = |entry: &str| format!("[plugins.a]\n{entry}\n");
    for (text, mistake) in [
        (plugin("path = \"a.wasm\"\ndeadline = 1"), "an unknown key"),
        (
            plugin("path = \"a.wasm\"\nfiles = [{ host = \"d\", guest = \"/d\", mode = \"rwx\" }]"),
            "a bad mode",
        ),
        (
            plugin("path = \"a.wasm\"\nfiles = [{ host = \"d\", guest = \"/d\" }]"),
            "a missing mode",
        ),
        (
            plugin("path = \"a.wasm\"\nfiles = [{ host = \"d\", guest = \"d\", mode = \"ro\" }]"),
            "a relative guest path",
        ),
        (
            plugin(
                "path = \"a.wasm\"\nfiles = [{ host = \"d\", guest = \"/d/../e\", mode = \"ro\" }]",
            ),
            "a guest path with ..",
        ),
        (
            plugin("path = \"a.wasm\"\ndeadline_ms = \"soon\""),
            "a string for a number",
        ),
        (
            plugin("path = \"a.wasm\"\nmax_memory_mb = -1"),
            "a negative size",
        ),
        (plugin("path = \"a.wasm\"\nfuel = 0"), "no fuel"),
        (
            plugin("path = \"a.wasm\"\ndeadline_ms = 0"),
            "no time at all",
        ),
        (
            plugin("path = \"a.wasm\"\nmax_memory_mb = 99999"),
            "more memory than the engine gives",
        ),
        (plugin("path = \"a.wasm\"\nmax_memory_mb = 0"), "no memory"),
        (
            plugin("path = \"a.wasm\"\nmax_concurrent_calls = 0"),
            "no calls at once",
        ),
        (plugin("path = 42"), "a number for a path"),
        (
            plugin("path = \"a.wasm\"\nnetwork = \"https://a.org\""),
            "a string for a list",
        ),
        (
            plugin("path = \"a.wasm\"\nnetwork = [\"ftp://a.org\"]"),
            "a scheme other than http(s)",
        ),
        (
            plugin("path = \"a.wasm\"\nnetwork = [\"https://a.org/path\"]"),
            "a network entry with a path",
        ),
        (
            plugin("path = \"a.wasm\"\nenv = { K = \"${file:/etc/passwd}\" }"),
            "an unknown ${…} reference",
        ),
        (
            plugin("path = \"a.wasm\"\nenv = { K = \"${env:K\" }"),
            "a ${ without }",
        ),
        (
            plugin("path = \"a.wasm\"\nenv = { K = 1 }"),
            "a number for an env value",
        ),
        (
            plugin(&format!(
                "{grant}\ninject = [{{ host = \"a.org\", header = \"X Key\", value = \"v\" }}]"
            )),
            "a bad header name",
        ),
        (
            plugin(&format!(
                "{grant}\ninject = [{{ host = \"a.org\", header = \"X-Key\" }}]"
            )),
            "an injection without a value",
        ),
        (
            plugin("path = \"a.wasm\"\nsource = \"a.wasm\""),
            "both path and source",
        ),
        (plugin("deadline_ms = 1"), "neither path nor source"),
        (
            plugin("source = \"ftp://example.com/a.wasm\""),
            "an unknown source scheme",
        ),
        (
            "[plugins.\"a.b\"]\npath = \"a.wasm\"\n".into(),
            "a plugin name with a dot",
        ),
        ("[plugin.a]\npath = \"a.wasm\"\n".into(), "a misspelt table"),
        (
            "[audit]\narguments = true\n".into(),
            "an audit log without a path",
        ),
        (
            "[audit]\npath = \"a.jsonl\"\narguments = \"yes\"\n".into(),
            "a string for a bool",
        ),
        ("secrets = 1\n".into(), "a number for the secrets file"),
    ] {
        assert!(
            !schema_errors(&as_json(&text)).is_empty(),
            "{mistake} fits the schema:\n{text}"
        );
        assert!(
            moat_reads(&text).is_err(),
            "moat accepts {mistake}, which the schema refuses:\n{text}"
        );
    }
    // Corrected, the `files` and `inject` entries above fit and are read, so their refusals
    // were the mistake's doing, not the temp folder's or the grant's.
    for text in [
        plugin("path = \"a.wasm\"\nfiles = [{ host = \"d\", guest = \"/d\", mode = \"rw\" }]"),
        plugin(&format!(
            "{grant}\ninject = [{{ host = \"a.org\", header = \"X-Key\", value = \"v\" }}]"
        )),
    ] {
        assert_fits(&text, "a corrected config");
        moat_reads(&text).unwrap_or_else(|e| panic!("moat refuses {text}: {e:#}"));
    }
}

/// Limits no call could live with and grants no call could pass are refused when moat.toml is
/// read, each saying why, rather than failing every call later.
#[test]
fn values_that_could_never_hold_are_refused_with_the_reason() {
    let plugin = |entry: &str| format!("[plugins.a]\npath = \"a.wasm\"\n{entry}\n");
    for (entry, reason) in [
        ("deadline_ms = 0", "deadline_ms = 0 would stop every call"),
        (
            "max_memory_mb = 99999",
            "more than the 1024 MiB moat's engine gives",
        ),
        (
            "network = [\"localhost\"]",
            "localhost is always a loopback address",
        ),
        (
            "network = [\"http://localhost:8080\"]",
            "grant the address itself",
        ),
        (
            "network = [\"*.localhost\"]",
            "localhost is always a loopback address",
        ),
    ] {
        let error = moat_reads(&plugin(entry)).expect_err(entry);
        assert!(format!("{error:#}").contains(reason), "{entry}: {error:#}");
    }
    for entry in [
        "deadline_ms = 1",
        "max_memory_mb = 1024",
        "network = [\"http://127.0.0.1:8080\"]",
    ] {
        moat_reads(&plugin(entry)).unwrap_or_else(|e| panic!("{entry}: {e:#}"));
        assert_fits(&plugin(entry), entry);
    }
}

/// `moat init`'s starter is a config moat reads and editors' schema takes.
#[test]
fn the_starter_config_fits_and_loads() {
    assert_fits(moat::serve::config::STARTER, "moat init's starter");
    let sources = moat_reads(moat::serve::config::STARTER).expect("moat reads the starter");
    assert_eq!(sources.len(), 1);
}

/// Reads `text` as moat would, from a `moat.toml` in a fresh temp folder holding a folder `d`.
fn moat_reads(text: &str) -> anyhow::Result<Vec<moat::supply::PluginSource>> {
    let dir = moat_tests::TempDir::new("schema");
    std::fs::create_dir_all(dir.join("d")).unwrap();
    let path = dir.join("moat.toml");
    std::fs::write(&path, text).unwrap();
    moat::serve::config::read(&path)
}

/// Whether the schema takes `value` as the field `key` of a plugin.
fn fits_field(key: &str, value: &str) -> bool {
    let mut entry = json!({ "path": "a.wasm" });
    entry[key] = match key {
        "network" => json!([value]),
        _ => json!(value),
    };
    if key == "source" {
        entry.as_object_mut().unwrap().remove("path");
    }
    schema_errors(&json!({ "plugins": { "a": entry } })).is_empty()
}

#[test]
fn the_network_pattern_takes_every_grant_moat_takes() {
    let accepted = [
        "https://api.example.com",
        "api.example.com",
        "API.Example.COM.",
        "http://api.example.com/",
        "*.wikipedia.org:443",
        "*.wikipedia.org:*",
        "*",
        "*:8080",
        "http://127.0.0.1:8080",
        "10.0.0.1",
        "[::1]",
        "[::1]:*",
        "https://[2001:db8::1]:8443",
        "[::ffff:127.0.0.1]",
        "my_host-1.internal:65535",
    ];
    for grant in accepted {
        grant
            .parse::<NetworkGrant>()
            .unwrap_or_else(|e| panic!("moat refuses {grant:?}: {e:#}"));
        assert!(fits_field("network", grant), "the schema refuses {grant:?}");
    }
    let refused = [
        "ftp://a.org",
        "https://a.org/path",
        "https://user@a.org",
        "a.org?x",
        "a.org:http",
        "",
        "*.",
        "a..org",
        "https://",
    ];
    for grant in refused {
        assert!(
            grant.parse::<NetworkGrant>().is_err(),
            "moat takes {grant:?}"
        );
        assert!(!fits_field("network", grant), "the schema takes {grant:?}");
    }
}

#[test]
fn the_injection_host_pattern_takes_every_target_moat_takes() {
    let fits = |host: &str| {
        let entry = json!({
            "path": "a.wasm",
            "inject": [{ "host": host, "header": "X-Key", "value": "v" }],
        });
        schema_errors(&json!({ "plugins": { "a": entry } })).is_empty()
    };
    let accepted = [
        "api.example.com",
        "API.Example.com.",
        "*.example.com",
        "*",
        "127.0.0.1",
        "[::1]",
        "[2001:db8::1]",
        "my_host-1",
        "https://api.example.com",
        "api.example.com:8443",
        "http://127.0.0.1:8080",
        "https://*.example.com:*",
    ];
    for host in accepted {
        Injection::target(host).unwrap_or_else(|e| panic!("moat refuses {host:?}: {e:#}"));
        assert!(fits(host), "the schema refuses {host:?}");
    }
    for host in [
        "ftp://api.example.com",
        "a.org/x",
        "",
        "*.",
        "a..org",
        "user@a.org",
    ] {
        assert!(Injection::target(host).is_err(), "moat takes {host:?}");
        assert!(!fits(host), "the schema takes {host:?}");
    }
}

#[test]
fn the_source_pattern_takes_every_source_moat_takes() {
    let base = Path::new("/etc/moat");
    let accepted = [
        "plugins/notes.wasm",
        "/abs/notes.wasm",
        "c:notes.wasm",
        "a:/b.wasm",
        "a::b.wasm",
        "a:/:b.wasm",
        "weird:",
        "https://example.com/notes.wasm",
        "http://127.0.0.1:8000/notes.wasm",
        "oci://ghcr.io/acme/notes:1.2",
        "oci://127.0.0.1:5000/notes@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ];
    for source in accepted {
        Source::parse(source, base).unwrap_or_else(|e| panic!("moat refuses {source:?}: {e:#}"));
        assert!(
            fits_field("source", source),
            "the schema refuses {source:?}"
        );
    }
    for source in [
        "ftp://example.com/a.wasm",
        "file:///a.wasm",
        "a:://b",
        ":/://b",
        "",
    ] {
        assert!(!fits_field("source", source), "the schema takes {source:?}");
    }
    for source in [
        "ftp://example.com/a.wasm",
        "file:///a.wasm",
        "a:://b",
        ":/://b",
    ] {
        assert!(
            Source::parse(source, base).is_err(),
            "moat takes {source:?}"
        );
    }
}

#[test]
fn the_schema_is_valid_json_schema() {
    let text = std::fs::read_to_string(repo_root().join("moat.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::draft202012::meta::validate(&schema)
        .unwrap_or_else(|e| panic!("moat.schema.json is no draft 2020-12 schema: {e}"));
    assert_eq!(schema["additionalProperties"], json!(false));
    for definition in ["PluginEntry", "FileEntry", "InjectEntry", "AuditSettings"] {
        assert_eq!(
            schema["$defs"][definition]["additionalProperties"],
            json!(false),
            "{definition} takes unknown keys"
        );
    }
}
