use std::time::Duration;

use super::expand::parse_secrets;
use super::*;
use crate::sandbox::network::Injected;
use crate::wit::naming::ToolRule;

#[test]
fn reads_plugins_with_limits() {
    let sources = parse(
        "[plugins.echo]\npath = \"echo.wasm\"\ndeadline_ms = 100\n",
        Path::new("/etc/moat"),
        &no_env,
        None,
    )
    .unwrap();
    assert_eq!(sources.len(), 1);
    assert_eq!(
        sources[0].source,
        Source::File("/etc/moat/echo.wasm".into())
    );
    assert_eq!(sources[0].limits.deadline, Duration::from_millis(100));
}

#[test]
fn unknown_keys_are_errors() {
    let error = parse(
        "[plugins.echo]\npath = \"e.wasm\"\ndeadline = 1\n",
        Path::new("."),
        &no_env,
        None,
    )
    .unwrap_err();
    assert!(
        format!("{error:#}").contains("unknown field `deadline`"),
        "{error:#}"
    );
}

#[test]
fn tools_are_renamed_or_hidden() {
    let parse_tools = |table: &str| {
        parse(
            &format!("[plugins.x]\npath = \"x.wasm\"\n[plugins.x.tools]\n{table}"),
            Path::new("."),
            &no_env,
            None,
        )
        .map(|sources| sources[0].tools.clone())
        .map_err(|e| format!("{e:#}"))
    };
    assert_eq!(
        parse_tools("x_read_file = { name = \"x_fetch\" }\nx_write = { hide = true }\n"),
        Ok(ToolRules::from([
            ("x_read_file".into(), ToolRule::Rename("x_fetch".into())),
            ("x_write".into(), ToolRule::Hide),
        ]))
    );
    for (table, expected) in [
        (
            "a = { name = \"bad name\" }",
            "tool name \"bad name\" must be",
        ),
        ("a = { name = \"b\", hide = true }", "not both"),
        ("a = { hide = false }", "give `name"),
        ("a = {}", "give `name"),
        ("a = { rename = \"b\" }", "unknown field `rename`"),
    ] {
        let error = parse_tools(table).unwrap_err();
        assert!(error.contains(expected), "{table}: {error}");
    }
}

#[test]
fn plugin_names_are_checked() {
    let error = parse(
        "[plugins.\"a.b\"]\npath = \"e.wasm\"\n",
        Path::new("."),
        &no_env,
        None,
    )
    .unwrap_err();
    assert!(error.to_string().contains("may hold only"), "{error}");
}

#[test]
fn a_malformed_secrets_file_is_reported_without_its_secrets() {
    for (text, expected) in [
        (
            "A = \"ok\"\nTOKEN = \"sk-live-9f2e\n",
            "line 2: not valid TOML",
        ),
        (
            "A = \"ok\"\n\nTOKEN = sk-live-9f2e\n",
            "line 3: not valid TOML",
        ),
        ("TOKEN = \"sk-live-9f2e\" junk\n", "line 1: not valid TOML"),
        (
            "A = \"ok\"\nTOKEN = 0x9f2e\n",
            "line 2: TOKEN is not a string but a TOML integer",
        ),
        (
            "[TOKEN]\nsk-live-9f2e = \"x\"\n",
            "line 1: TOKEN is not a string but a TOML table",
        ),
    ] {
        let error = format!("{:#}", parse_secrets(text).unwrap_err());
        assert!(error.contains(expected), "{text:?}: {error}");
        for secret in ["sk-live", "9f2e"] {
            assert!(!error.contains(secret), "{text:?} quoted: {error}");
        }
    }
    let parsed = parse_secrets("A = \"x\"\nB = 'y'\n").unwrap();
    assert_eq!(parsed["A"], "x");
    assert_eq!(parsed["B"], "y");
}

#[test]
fn no_grant_may_contain_the_secrets_file() {
    let dir = std::env::temp_dir().join(format!("moat-config-exposed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let secrets = dir.join("keys/secrets.toml");
    std::fs::write(&secrets, "TOKEN = \"tok\"\n").unwrap();
    set_mode(&secrets, 0o600);
    let env = |_: &str| None;
    let config = |folder: &str| {
        format!(
            "secrets = \"keys/secrets.toml\"\n[plugins.notes]\npath = \"n.wasm\"\n\
             files = [{{ host = \"{folder}\", guest = \"/d\", mode = \"ro\" }}]\n"
        )
    };
    parse(&config("data"), &dir, &env, None).unwrap();
    // Read-only is enough to read every plugin's secrets: refused, from the file's folder or
    // any folder above it, whether the config or the command line names the secrets file.
    for folder in ["keys", "."] {
        let error = format!(
            "{:#}",
            parse(&config(folder), &dir, &env, None).unwrap_err()
        );
        assert!(
            error.contains("plugin \"notes\": its grant of")
                && error.contains("contains the secrets file"),
            "{error}"
        );
    }
    let flag = "[plugins.notes]\npath = \"n.wasm\"\n\
                files = [{ host = \".\", guest = \"/d\", mode = \"rw\" }]\n";
    let error = parse(flag, &dir, &env, Some(&secrets)).unwrap_err();
    assert!(
        format!("{error:#}").contains("contains the secrets file"),
        "{error:#}"
    );
    // The credential store too, made or not yet: every caller's consented tokens.
    let store = "credential_store = { path = \"state/credentials.sealed\", key = \"k\" }\n";
    std::fs::create_dir_all(dir.join("state")).unwrap();
    for folder in ["state", "."] {
        let text = format!(
            "{store}{}",
            config(folder).replace("secrets = \"keys/secrets.toml\"\n", "")
        );
        let error = format!("{:#}", parse(&text, &dir, &env, None).unwrap_err());
        assert!(
            error.contains("contains the credential store") && error.contains("credentials.sealed"),
            "{error}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn network_grants_secrets_and_injections() {
    let dir = std::env::temp_dir().join(format!("moat-config-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secrets = dir.join("secrets.toml");
    std::fs::write(&secrets, "API_TOKEN = \"tok-123\"\n").unwrap();
    set_mode(&secrets, 0o600);
    let config = r#"secrets = "secrets.toml"
[plugins.api]
path = "a.wasm"
network = ["https://api.example.com", "*.wikipedia.org:443", "http://127.0.0.1:8080"]
inject = [{ host = "api.example.com", header = "Authorization", value = "Bearer ${secret:API_TOKEN}" }]
env = { KEY = "${secret:API_TOKEN}", MIXED = "a-${env:HOST_NAME}-b" }
"#;
    let env = |name: &str| (name == "HOST_NAME").then(|| "h".to_string());
    let sources = parse(config, &dir, &env, None).unwrap();
    let grants = &sources[0].grants;
    let printed: Vec<String> = grants
        .network
        .grants
        .iter()
        .map(|g| g.to_string())
        .collect();
    assert_eq!(
        printed,
        [
            "https://api.example.com",
            "*.wikipedia.org:443",
            "http://127.0.0.1:8080"
        ]
    );
    let Injected::Fixed(value) = &grants.network.inject[0].value else {
        panic!("a fixed value")
    };
    assert_eq!(value, "Bearer tok-123");
    assert!(value.is_sensitive());
    assert!(!format!("{:?}", grants.network).contains("tok-123"));
    assert_eq!(
        grants.env,
        [
            ("KEY".into(), "tok-123".into()),
            ("MIXED".into(), "a-h-b".into())
        ]
    );

    set_mode(&secrets, 0o640);
    let error = parse(config, &dir, &env, None).unwrap_err();
    assert!(
        format!("{error:#}")
            .contains("is open to its group or others (mode 640); make it private with `chmod 600"),
        "{error:#}"
    );
    set_mode(&secrets, 0o600);

    for (bad, expected) in [
        (
            r#"network = ["ftp://x.org"]"#,
            "scheme `ftp` is not http or https",
        ),
        (
            r#"network = ["http://2130706433"]"#,
            "not a canonical IP address",
        ),
        (
            r#"network = ["https://a.org"]
inject = [{ host = "b.org", header = "X-Key", value = "v" }]"#,
            "no network grant allows requests to https://b.org",
        ),
        (
            // A grant without a scheme lets plain http through, but the header stays home.
            r#"network = ["http://127.0.0.1:8080"]
inject = [{ host = "127.0.0.1", header = "X-Key", value = "v" }]"#,
            "no network grant allows requests to https://127.0.0.1, so the header would never",
        ),
        (
            r#"network = ["a.org"]
inject = [{ host = "a.org:8443", header = "X-Key", value = "v" }]"#,
            "no network grant allows requests to https://a.org:8443",
        ),
        (
            r#"network = ["https://a.org"]
inject = [{ host = "a.org", header = "X Key", value = "v" }]"#,
            "not a valid header name",
        ),
        (r#"env = { K = "${secret:NOPE}" }"#, "has no NOPE"),
        (
            r#"env = { K = "${file:/etc/passwd}" }"#,
            "is neither ${env:NAME} nor ${secret:NAME}",
        ),
    ] {
        let text = format!("secrets = \"secrets.toml\"\n[plugins.p]\npath = \"p.wasm\"\n{bad}\n");
        let error = parse(&text, &dir, &env, None).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
    }
    let error = parse(
        "[plugins.p]\npath = \"p.wasm\"\nenv = { K = \"${secret:X}\" }\n",
        &dir,
        &env,
        None,
    )
    .unwrap_err();
    assert!(
        format!("{error:#}").contains("needs a secrets file"),
        "{error:#}"
    );
    // A flag's file takes the place of the one the config names.
    let other = dir.join("other.toml");
    std::fs::write(&other, "API_TOKEN = \"from-flag\"\n").unwrap();
    set_mode(&other, 0o600);
    let sources = parse(config, &dir, &env, Some(&other)).unwrap();
    assert!(matches!(
        &sources[0].grants.network.inject[0].value,
        Injected::Fixed(v) if v == "Bearer from-flag"
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_injection_may_take_the_callers_credential_from_a_source() {
    let config = |inject: &str| {
        format!(
            r#"[credentials.tracker]
hosts = ["api.tracker.example", "http://127.0.0.1:9300"]
principals = {{ stdio = "t-0123456789" }}

[plugins.p]
path = "p.wasm"
network = ["https://api.tracker.example", "https://other.example", "http://127.0.0.1:9300"]
inject = [{inject}]
"#
        )
    };
    let sources = parse(
        &config(r#"{ host = "api.tracker.example", header = "Authorization", value = "Bearer ${credential:tracker}" }"#),
        Path::new("."),
        &no_env,
        None,
    )
    .unwrap();
    assert_eq!(
        sources[0].grants.network.inject[0].value,
        Injected::Caller {
            source: "tracker".into(),
            before: "Bearer ".into(),
            after: String::new(),
        }
    );
    for (inject, expected) in [
        (
            r#"{ host = "api.tracker.example", header = "Authorization", value = "Bearer ${credential:wiki}" }"#,
            "`${credential:wiki}` names no source: add [credentials.wiki] to moat.toml (it has tracker)",
        ),
        (
            // Granted to the plugin, but not a host the source's credentials may go to.
            r#"{ host = "other.example", header = "Authorization", value = "Bearer ${credential:tracker}" }"#,
            "[credentials.tracker] may be sent only to https://api.tracker.example, http://127.0.0.1:9300, and https://other.example is not one of them",
        ),
        (
            r#"{ host = "http://127.0.0.1:9300", header = "Authorization", value = "${credential:tracker}${credential:tracker}" }"#,
            "a value may name one credential only",
        ),
    ] {
        let error = parse(&config(inject), Path::new("."), &no_env, None).unwrap_err();
        assert!(
            format!("{error:#}").contains(expected),
            "{inject}: {error:#}"
        );
    }
}

#[test]
fn the_committed_schema_is_what_moat_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../moat.schema.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
    assert!(
        committed == generated,
        "moat.schema.json differs from the structs moat.toml is read into; regenerate it \
         from the repository root: `cargo run -p moat -- config schema > moat.schema.json`"
    );
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn a_size_too_large_to_count_is_refused() {
    let error = parse(
        "[plugins.echo]\npath = \"echo.wasm\"\nmax_memory_mb = 9223372036854775807\n",
        Path::new("/etc/moat"),
        &no_env,
        None,
    )
    .unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "plugin \"echo\": max_memory_mb = 9223372036854775807 is too large"
    );
}

#[test]
fn a_plugin_has_a_path_or_a_source() {
    let sources = parse(
        "[plugins.a]\nsource = \"oci://127.0.0.1:5000/a:1\"\n\
         [plugins.b]\nsource = \"https://example.com/b.wasm\"\n\
         [plugins.c]\nsource = \"c.wasm\"\n",
        Path::new("/etc/moat"),
        &no_env,
        None,
    )
    .unwrap();
    let shown: Vec<String> = sources.iter().map(|s| s.source.to_string()).collect();
    assert_eq!(
        shown,
        [
            "oci://127.0.0.1:5000/a:1",
            "https://example.com/b.wasm",
            "/etc/moat/c.wasm"
        ]
    );
    for (entry, expected) in [
        ("path = \"a.wasm\"\nsource = \"a.wasm\"", "not both"),
        ("deadline_ms = 1", "`source` (or `path`) is missing"),
        ("source = \"http://example.com/a.wasm\"", "plain http"),
        ("source = \".\"", "is a folder"),
    ] {
        let text = format!("[plugins.a]\n{entry}\n");
        let error = parse(&text, Path::new("."), &no_env, None).unwrap_err();
        assert!(
            format!("{error:#}").contains(expected),
            "{entry}: {error:#}"
        );
    }
}

#[test]
fn grants_are_resolved_and_checked() {
    let dir = std::env::temp_dir().join(format!("moat-config-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let env = |name: &str| (name == "HOST_TOKEN").then(|| "s3cret".to_string());
    let sources = parse(
        r#"[plugins.notes]
path = "n.wasm"
files = [{ host = "data", guest = "/data", mode = "ro" }]
env = { TOKEN = "${env:HOST_TOKEN}", PLAIN = "x" }
"#,
        &dir,
        &env,
        None,
    )
    .unwrap();
    let grants = &sources[0].grants;
    assert_eq!(
        grants.files[0].host,
        dir.join("data").canonicalize().unwrap()
    );
    assert_eq!(grants.files[0].guest, "/data");
    assert!(!grants.files[0].writable);
    assert_eq!(
        grants.env,
        [
            ("PLAIN".into(), "x".into()),
            ("TOKEN".into(), "s3cret".into())
        ]
    );

    for (bad, expected) in [
        (
            r#"files = [{ host = "missing", guest = "/d", mode = "ro" }]"#,
            "granted directory",
        ),
        (
            r#"files = [{ host = "data", guest = "d", mode = "ro" }]"#,
            "must be absolute",
        ),
        (
            r#"files = [{ host = "data", guest = "/d", mode = "rwx" }]"#,
            "unknown variant",
        ),
        (
            r#"env = { T = "${env:NOPE}" }"#,
            "moat's environment has no NOPE",
        ),
    ] {
        let text = format!("[plugins.notes]\npath = \"n.wasm\"\n{bad}\n");
        let error = parse(&text, &dir, &env, None).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
