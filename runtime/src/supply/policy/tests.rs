use super::*;
use crate::sandbox::grants::{FileGrant, Grants};
use crate::sandbox::limits::Limits;
use crate::supply::manifest::{Manifest, RequestedDir};

fn pattern(text: &str) -> NetworkGrant {
    text.parse().unwrap()
}

#[test]
fn globs_match_names() {
    assert!(glob_match("text*", "text_tools"));
    assert!(glob_match("*", ""));
    assert!(glob_match("a*c*e", "abcde"));
    assert!(!glob_match("text*", "notes"));
    assert!(!glob_match("echo", "echo2"));
}

#[test]
fn host_patterns_parse_and_cover() {
    let p = pattern("https://API.example.org:443");
    assert_eq!(p.to_string(), "https://api.example.org:443");
    assert!(pattern("*.example.org").covers(&p));
    assert!(pattern("*.example.org").covers(&pattern("*.a.example.org")));
    assert!(!pattern("*.example.org").covers(&pattern("example.org.evil.com")));
    assert!(!pattern("*.example.org").covers(&pattern("badexample.org")));
    assert!(!pattern("http://api.example.org").covers(&p));
    assert!(!pattern("api.example.org:80").covers(&p));
    assert!(!p.covers(&pattern("*.example.org")));
    assert!(pattern("*").covers(&p));
    assert!(!pattern("*").covers(&pattern("api.example.org:8443")));
    assert!(pattern("*:*").covers(&pattern("http://[::1]:8080")));
    assert_eq!(
        pattern("http://[::1]:8080").host,
        crate::sandbox::network::HostPattern::Ip("::1".parse().unwrap())
    );
    for bad in ["", "a*b.org", "https://x.org/path", "x.org:http", "[::1"] {
        assert!(bad.parse::<NetworkGrant>().is_err(), "{bad}");
    }
}

#[test]
fn network_grants_narrow_to_request_and_ceiling() {
    let requested = [pattern("api.example.org"), pattern("files.other.net")];
    let granted = [pattern("*.example.org"), pattern("evil.com")];
    let ceiling = [pattern("*.org")];
    let (out, notes) = narrow_network(Some(&requested), &granted, Some(&ceiling));
    assert_eq!(out, [pattern("api.example.org")]);
    let fates: Vec<(&str, Fate)> = notes.iter().map(|n| (n.grant.as_str(), n.fate)).collect();
    assert_eq!(
        fates,
        [
            ("network *.example.org", Fate::Narrowed),
            ("network evil.com", Fate::Cut),
            ("network files.other.net", Fate::Missing),
        ]
    );
}

#[test]
fn a_wildcard_request_granted_in_part_is_no_missing_grant_and_no_policy_is_named_without_one() {
    // fetch asks for `*:*`; the operator grants one site, and there is no policy.
    let requested = [pattern("*:*")];
    let granted = [pattern("https://example.com")];
    let (out, notes) = narrow_network(Some(&requested), &granted, None);
    assert_eq!(out, granted);
    let shown: Vec<String> = notes.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "network https://example.com: granted: the plugin asks for it",
            "network *:*: granted in part: the plugin asks for it; the operator grants \
             [https://example.com] of it",
        ]
    );
    assert_eq!(notes[1].fate, Fate::Partial);
    // Nothing granted: said once.
    let (_, none) = narrow_network(Some(&requested), &[], None);
    assert_eq!(
        none[0].to_string(),
        "network *:*: not granted: the plugin asks for it"
    );
    // The policy is named when it has a say.
    let (_, within) = narrow_network(Some(&requested), &granted, Some(&[pattern("*")]));
    assert!(
        within[0].reason.ends_with("the policy allows it"),
        "{}",
        within[0]
    );
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("moat-policy-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// The value of the operator's `AWS_SECRET`: distinctive, so that any note showing it is found.
const AWS_SECRET_VALUE: &str = "aws-secret-value-0b7c4e";

/// Fails if a note shows a variable's value, as its text or its debug form.
fn assert_no_secret_in(notes: &[Note]) {
    for note in notes {
        let shown = format!("{note} {note:?}");
        assert!(
            !shown.contains(AWS_SECRET_VALUE),
            "a note shows the secret: {shown}"
        );
    }
}

fn operator_grants() -> Grants {
    Grants {
        files: vec![
            FileGrant::open(&dir("notes"), "/notes", true).unwrap(),
            FileGrant::open(&dir("home"), "/home", false).unwrap(),
        ],
        env: vec![
            ("TITLE".into(), "Mine".into()),
            ("AWS_SECRET".into(), AWS_SECRET_VALUE.into()),
        ],
        ..Grants::default()
    }
}

#[test]
fn the_effective_grant_is_request_operator_and_ceiling() {
    let manifest = Manifest {
        files: vec![
            RequestedDir {
                guest: "/notes".into(),
                mode: Mode::ReadOnly,
            },
            RequestedDir {
                guest: "/cache".into(),
                mode: Mode::ReadWrite,
            },
        ],
        env: vec!["TITLE".into()],
        max_memory_mb: Some(32),
        deadline_ms: Some(60_000),
        ..Manifest::default()
    };
    let ceiling = Ceiling {
        deadline: Some(Duration::from_secs(10)),
        ..Ceiling::default()
    };
    let (limits, grants, notes) = effective(
        Some(&manifest),
        &Limits::default(),
        &operator_grants(),
        &ceiling,
    );
    assert_eq!(grants.files.len(), 1);
    assert_eq!(grants.files[0].guest, "/notes");
    assert!(!grants.files[0].writable, "the plugin asks for read-only");
    assert_eq!(grants.env, [("TITLE".to_string(), "Mine".to_string())]);
    assert_eq!(limits.max_memory_bytes, 32 << 20);
    assert_eq!(limits.deadline, Duration::from_secs(10));

    let fate = |grant: &str| {
        notes
            .iter()
            .find(|n| n.grant.starts_with(grant))
            .unwrap_or_else(|| panic!("no note on {grant}: {notes:#?}"))
            .clone()
    };
    assert_eq!(fate("directory").fate, Fate::Narrowed);
    let home = notes.iter().find(|n| n.grant.contains("at /home")).unwrap();
    assert_eq!(home.fate, Fate::Cut);
    assert!(home.reason.contains("does not ask for /home"), "{home}");
    assert_eq!(fate("directory at /cache").fate, Fate::Missing);
    assert_eq!(fate("env AWS_SECRET").fate, Fate::Cut);
    assert_eq!(fate("env TITLE").fate, Fate::Granted);
    assert_eq!(fate("deadline").fate, Fate::Narrowed);
    assert!(
        fate("deadline")
            .reason
            .contains("policy caps it at 10000 ms")
    );
    assert_eq!(fate("memory").fate, Fate::Granted);
    assert_no_secret_in(&notes);
}

#[test]
fn settings_are_cut_to_the_request_and_the_ceiling_like_variables() {
    let grants = Grants {
        config: std::sync::Arc::new(
            [
                ("api-url", "https://a"),
                ("region", "eu"),
                ("token", "t0ken"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ),
        ..Grants::default()
    };
    let manifest = Manifest {
        config: vec!["api-url".into(), "region".into(), "mode".into()],
        ..Manifest::default()
    };
    let ceiling = Ceiling {
        config: Some(vec!["api-*".into()]),
        ..Ceiling::default()
    };
    let (_, granted, notes) = effective(Some(&manifest), &Limits::default(), &grants, &ceiling);
    let keys: Vec<&String> = granted.config.keys().collect();
    assert_eq!(keys, ["api-url"]);
    let fate = |grant: &str| notes.iter().find(|n| n.grant == grant).unwrap().clone();
    assert_eq!(fate("config token").fate, Fate::Cut);
    assert!(
        fate("config token")
            .reason
            .contains("does not ask for token")
    );
    assert_eq!(fate("config region").fate, Fate::Cut);
    assert!(
        fate("config region")
            .reason
            .contains("policy allows only the settings [api-*]")
    );
    assert_eq!(fate("config mode").fate, Fate::Missing);
    assert!(notes.iter().all(|n| !n.to_string().contains("t0ken")));
}

#[test]
fn without_a_manifest_the_operator_grant_stands_within_the_ceiling() {
    let ceiling = Ceiling {
        directories: Some(vec![DirCeiling {
            path: dir("notes"),
            mode: Mode::ReadOnly,
        }]),
        env: Some(vec!["TIT*".into()]),
        max_memory_bytes: Some(64 << 20),
        ..Ceiling::default()
    };
    let (limits, grants, notes) = effective(None, &Limits::default(), &operator_grants(), &ceiling);
    assert_eq!(grants.files.len(), 1);
    assert!(!grants.files[0].writable, "the ceiling is read-only");
    assert_eq!(grants.env.len(), 1);
    assert_eq!(limits.max_memory_bytes, 64 << 20);
    let home = notes.iter().find(|n| n.grant.contains("at /home")).unwrap();
    assert!(home.reason.contains("only beneath"), "{home}");
    let secret = notes.iter().find(|n| n.grant == "env AWS_SECRET").unwrap();
    assert!(
        secret
            .reason
            .contains("policy allows only the variables [TIT*]"),
        "{secret}"
    );
    assert_no_secret_in(&notes);
}

#[test]
fn malformed_policies_are_errors() {
    for (text, expected) in [
        (
            "require_signature = true",
            "unknown field `require_signature`",
        ),
        ("[[allow]]\n", "names no condition"),
        (
            "[[allow]]\npublisher = \"acme\"\n",
            "which [publishers] lacks",
        ),
        ("[[allow]]\nsha256 = \"abc\"\n", "not 64 hex digits"),
        (
            "[publishers]\nacme = \"nope\"\n",
            "not a minisign public key",
        ),
        ("transports = [\"smoke\"]", "unknown variant"),
        ("http_bind = [\"localhost\"]", "neither an address"),
        ("[ceiling]\nnetwork = [\"a*b\"]\n", "network entry \"a*b\""),
        (
            "[ceiling]\ndirectories = [{ path = \"rel\", mode = \"ro\" }]\n",
            "must be absolute",
        ),
    ] {
        let error = Policy::parse(text).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{text}: {error:#}");
    }
}

#[test]
fn transports_and_binds_are_checked() {
    let policy =
        Policy::parse("transports = [\"http\"]\nhttp_bind = [\"127.0.0.1\", \"[::1]:8080\"]\n")
            .unwrap();
    assert!(policy.check_transport(Transport::Stdio, None).is_err());
    assert!(
        policy
            .check_transport(Transport::Http, Some("127.0.0.1:9".parse().unwrap()))
            .is_ok()
    );
    assert!(
        policy
            .check_transport(Transport::Http, Some("[::1]:8080".parse().unwrap()))
            .is_ok()
    );
    let error = policy
        .check_transport(Transport::Http, Some("0.0.0.0:80".parse().unwrap()))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("does not allow binding 0.0.0.0:80"),
        "{error}"
    );
    assert!(
        Policy::none()
            .check_transport(Transport::Stdio, None)
            .is_ok()
    );
}

#[test]
fn an_allow_rule_can_narrow_the_ceiling_for_the_plugins_it_admits() {
    let (notes, home) = (dir("notes"), dir("home"));
    let policy = Policy::parse(&format!(
        r#"
[ceiling]
max_memory_mb = 64
env = ["TITLE", "AWS_*"]
directories = [{{ path = "{notes}", mode = "rw" }}, {{ path = "{home}", mode = "ro" }}]

[[allow]]
name = "community_*"
ceiling = {{ max_memory_mb = 16, env = ["TITLE"], directories = [{{ path = "{notes}", mode = "ro" }}] }}

[[allow]]
name = "*"
"#,
        notes = notes.display(),
        home = home.display(),
    ))
    .unwrap();
    let component = Fetched {
        wasm: b"\0asm\x0d\0\x01\0".to_vec(),
        digest: crate::supply::source::Digest::of(b"\0asm\x0d\0\x01\0"),
        origin: "test".into(),
        signature: None,
    };
    let admit = |name: &str| {
        let source = PluginSource {
            name: name.into(),
            source: crate::supply::source::Source::File("x.wasm".into()),
            limits: Limits::default(),
            grants: operator_grants(),
            tools: Default::default(),
        };
        policy.admit(&source, &component).unwrap()
    };

    // The first rule's own ceiling applies on top of the policy's.
    let community = admit("community_notes");
    assert!(
        community.allowed_by.contains("rule 1"),
        "{}",
        community.allowed_by
    );
    assert_eq!(community.limits.max_memory_bytes, 16 << 20);
    assert_eq!(
        community.grants.env,
        [("TITLE".to_string(), "Mine".to_string())]
    );
    let files: Vec<(&str, bool)> = community
        .grants
        .files
        .iter()
        .map(|f| (f.guest.as_str(), f.writable))
        .collect();
    assert_eq!(
        files,
        [("/notes", false)],
        "the rule allows /notes read-only, /home not at all"
    );

    // A plugin the second rule admits gets only the policy's ceiling.
    let ours = admit("ours");
    assert!(ours.allowed_by.contains("rule 2"), "{}", ours.allowed_by);
    assert_eq!(ours.limits.max_memory_bytes, 64 << 20);
    assert_eq!(ours.grants.env.len(), 2);
    assert_eq!(ours.grants.files.len(), 2);
    assert!(ours.grants.files[0].writable);

    let error = Policy::parse("[[allow]]\nname = \"*\"\nceiling = { directories = [{ path = \"rel\", mode = \"ro\" }] }\n")
        .unwrap_err();
    assert!(
        format!("{error:#}").contains("[[allow]] rule 1 ceiling: directory rel must be absolute"),
        "{error:#}"
    );
}

#[test]
fn the_policy_in_security_md_parses() {
    let doc = include_str!("../../../../SECURITY.md");
    let section = &doc[doc.find("## Enterprise policy").unwrap()..];
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let policy = Policy::parse(example).unwrap_or_else(|e| panic!("{e:#}"));
    let rules = policy.allow.unwrap();
    assert_eq!(rules.len(), 3);
    let ceiling = rules[2].ceiling.as_ref().unwrap();
    assert_eq!(ceiling.max_memory_bytes, Some(32 << 20));
    assert_eq!(ceiling.network.as_deref(), Some(&[][..]));
}

#[test]
fn a_system_policy_that_cannot_be_checked_stops_moat() {
    let root = dir("system-unknown");
    let file = root.join("a-file");
    std::fs::write(&file, "").unwrap();
    // A path through a file: not "not found" but ENOTDIR, an error even root gets.
    let unknown = file.join("policy.toml");
    let error = Policy::resolve_with(&unknown, None).unwrap_err();
    let error = format!("{error:#}");
    assert!(
        error.contains("cannot tell whether the system policy") && error.contains("a-file"),
        "{error}"
    );
    // Truly absent: no policy, or the one named.
    let absent = root.join("no-such-policy.toml");
    let policy = Policy::resolve_with(&absent, None).unwrap();
    assert!(policy.source.is_none());
    let named = root.join("named.toml");
    std::fs::write(&named, "").unwrap();
    let policy = Policy::resolve_with(&absent, Some(&named)).unwrap();
    assert_eq!(policy.source.as_deref(), Some(named.as_path()));
}

#[test]
fn the_policy_names_the_credential_sources_and_may_require_exchange() {
    let policy = Policy::parse(
        "credential_sources = [\"github\", \"jira-*\"]\nrequire_token_exchange = true\n",
    )
    .unwrap();
    assert!(policy.check_credential_source("github", &[]).is_ok());
    assert!(policy.check_credential_source("jira-eu", &[]).is_ok());
    let other = policy
        .check_credential_source("slack", &[])
        .unwrap_err()
        .to_string();
    assert!(
        other.contains("does not allow the credential source \"slack\" (its credential_sources are github, jira-*)"),
        "{other}"
    );
    let fixed = policy
        .check_credential_source("github", &["principals", "consent"])
        .unwrap_err()
        .to_string();
    assert!(
        fixed.contains("requires token exchange for callers' upstream credentials, and the credential source \"github\" also gives them by `principals` and `consent`"),
        "{fixed}"
    );
    // Without a policy, any source, in any way.
    assert!(
        Policy::none()
            .check_credential_source("slack", &["principals"])
            .is_ok()
    );
}
