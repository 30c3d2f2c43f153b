//! Signatures, allow rules and effective grants on the real load path: keys and signatures made
//! by the `minisign` tool, components loaded through the registry (with and without the cache),
//! and the `notes` plugin called with what its manifest, the operator and the policy leave it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use moat::plugin::registry::Registry;
use moat::sandbox::grants::{FileGrant, Grants};
use moat::sandbox::limits::Limits;
use moat::supply::PluginSource;
use moat::supply::cache::Cache;
use moat::supply::policy::Policy;
use moat::supply::source::Source;
use moat_tests::{TempDir, call, engine, plugins, structured, text};
use serde_json::json;

/// A fresh folder for one test.
/// Runs the `minisign` tool, failing the test with its output if it fails.
pub(crate) fn minisign(args: &[&str]) -> String {
    let output = Command::new("minisign")
        .args(args)
        .output()
        .expect("running minisign (./dev test installs it)");
    assert!(
        output.status.success(),
        "minisign {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A key pair made by `minisign -G` in `dir`: (public key file, secret key file).
pub(crate) fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let public = dir.join(format!("{name}.pub"));
    let secret = dir.join(format!("{name}.key"));
    minisign(&[
        "-G",
        "-W",
        "-p",
        public.to_str().unwrap(),
        "-s",
        secret.to_str().unwrap(),
    ]);
    (public, secret)
}

/// The base64 line of a `minisign.pub` file, as a policy names a publisher.
pub(crate) fn key_line(public: &Path) -> String {
    fs::read_to_string(public)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string()
}

/// A copy of the `notes` plugin in `dir`, to sign and tamper with.
fn notes_copy(dir: &Path) -> PathBuf {
    let path = dir.join("notes.wasm");
    fs::copy(plugins::NOTES, &path).unwrap();
    path
}

fn source(path: &Path) -> PluginSource {
    PluginSource {
        name: "notes".into(),
        source: Source::File(path.to_path_buf()),
        limits: Limits::default(),
        grants: Grants::default(),
        tools: Default::default(),
    }
}

/// Loads `path` under `policy`: the plugin, or the error that kept it out.
fn load(
    path: &Path,
    policy: &Policy,
    cache: Option<&Cache>,
) -> Result<moat::supply::policy::Admitted, String> {
    let (registry, errors) =
        Registry::load_checked(engine(), &[source(path)], cache, policy).unwrap();
    match errors.into_iter().next() {
        Some(error) => Err(format!("{:#}", error.error)),
        None => Ok(registry.plugins()[0].admission.clone()),
    }
}

pub(crate) fn signing_policy(acme_public: &Path) -> Policy {
    Policy::parse(&format!(
        "require_signatures = true\n[publishers]\nacme = \"{}\"\n[[allow]]\npublisher = \"acme\"\n",
        key_line(acme_public)
    ))
    .unwrap()
}

#[test]
fn a_signature_by_the_minisign_tool_loads_every_time_and_only_while_it_matches() {
    let dir = TempDir::new("trust-tool-signed");
    let (public, secret) = key_pair(&dir, "acme");
    let wasm = notes_copy(&dir);
    minisign(&[
        "-S",
        "-s",
        secret.to_str().unwrap(),
        "-m",
        wasm.to_str().unwrap(),
    ]);
    let policy = signing_policy(&public);
    let cache = Cache::open(&dir.join("cache")).unwrap();

    // Twice: a compile, then a cache hit; both verify.
    for _ in 0..2 {
        let admitted = load(&wasm, &policy, Some(&cache)).unwrap();
        assert_eq!(admitted.publisher.as_deref(), Some("acme"));
        assert!(
            admitted.allowed_by.contains("rule 1"),
            "{}",
            admitted.allowed_by
        );
        assert_eq!(
            admitted.digest,
            moat::supply::source::Digest::of(&fs::read(&wasm).unwrap()).to_string()
        );
    }

    // The cache holds the compiled plugin, yet without its signature it no longer loads.
    let signature = moat::supply::signing::signature_path(&wasm);
    let saved = fs::read(&signature).unwrap();
    fs::remove_file(&signature).unwrap();
    let error = load(&wasm, &policy, Some(&cache)).unwrap_err();
    assert!(
        error.contains(
            "requires a signature by one of its publishers (acme), and the plugin is unsigned"
        ),
        "{error}"
    );

    // One changed byte (in a custom section's name, so the component stays valid): refused.
    fs::write(&signature, saved).unwrap();
    let mut bytes = fs::read(&wasm).unwrap();
    let at = bytes
        .windows(b"moat:manifest".len())
        .position(|w| w == b"moat:manifest")
        .unwrap();
    bytes[at] = b'n';
    fs::write(&wasm, &bytes).unwrap();
    let error = load(&wasm, &policy, Some(&cache)).unwrap_err();
    assert!(
        error.contains("the signature by \"acme\"")
            && error.contains("does not match the component's bytes"),
        "{error}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn moat_sign_makes_signatures_the_minisign_tool_accepts() {
    let dir = TempDir::new("trust-moat-signed");
    let (public, secret) = key_pair(&dir, "acme");
    let wasm = notes_copy(&dir);
    let written = moat::supply::signing::sign_file(&secret, &wasm).unwrap();
    assert_eq!(written, dir.join("notes.wasm.minisig"));
    let out = minisign(&[
        "-V",
        "-p",
        public.to_str().unwrap(),
        "-m",
        wasm.to_str().unwrap(),
    ]);
    assert!(
        out.contains("Signature and comment signature verified"),
        "{out}"
    );
    assert!(load(&wasm, &signing_policy(&public), None).is_ok());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_signature_by_a_key_the_policy_does_not_name_is_refused() {
    let dir = TempDir::new("trust-stranger");
    let (public, _) = key_pair(&dir, "acme");
    let (stranger_public, stranger_secret) = key_pair(&dir, "stranger");
    let wasm = notes_copy(&dir);
    minisign(&[
        "-S",
        "-s",
        stranger_secret.to_str().unwrap(),
        "-m",
        wasm.to_str().unwrap(),
    ]);
    let error = load(&wasm, &signing_policy(&public), None).unwrap_err();
    let stranger_id = moat::supply::signing::TrustedKey::from_file(&stranger_public)
        .unwrap()
        .id;
    assert!(
        error.contains(&format!(
            "the signature was made with key {stranger_id}, which is not a publisher key of the policy"
        )),
        "{error}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn allow_rules_admit_by_name_and_digest_and_say_why_not() {
    let dir = TempDir::new("trust-rules");
    let wasm = notes_copy(&dir);
    let digest = moat::supply::source::Digest::of(&fs::read(&wasm).unwrap()).to_string();

    let by_digest = Policy::parse(&format!("[[allow]]\nsha256 = \"{digest}\"\n")).unwrap();
    assert!(load(&wasm, &by_digest, None).is_ok());

    let other = Policy::parse(&format!(
        "[[allow]]\nname = \"text*\"\n[[allow]]\nname = \"notes\"\nsha256 = \"{}\"\n",
        "0".repeat(64)
    ))
    .unwrap();
    let error = load(&wasm, &other, None).unwrap_err();
    assert!(
        error.contains("allows no plugin like this one (notes; sha256:")
            && error.contains("rule 1: name is not \"text*\"")
            && error.contains(&format!("rule 2: digest is not sha256:{}", "0".repeat(64))),
        "{error}"
    );

    let nothing = Policy::parse("require_manifest = true\n").unwrap();
    let error = load(&wasm, &nothing, None).unwrap_err();
    assert!(
        error.contains("has no [[allow]] rule, so it allows no plugin"),
        "{error}"
    );

    let needs_manifest =
        Policy::parse("require_manifest = true\n[[allow]]\nname = \"*\"\n").unwrap();
    let (registry, errors) = Registry::load_checked(
        engine(),
        &[PluginSource {
            name: "shapes".into(),
            source: Source::File(plugins::SHAPES.into()),
            limits: Limits::default(),
            grants: Grants::default(),
            tools: Default::default(),
        }],
        None,
        &needs_manifest,
    )
    .unwrap();
    assert!(registry.plugins().is_empty());
    let error = format!("{:#}", errors[0].error);
    assert!(error.contains("requires a permission manifest"), "{error}");

    // Every bundled plugin that needs a grant says what it needs, so each loads.
    let bundled: Vec<PluginSource> = [
        ("filesystem", plugins::FILESYSTEM),
        ("memory", plugins::MEMORY),
        ("fetch", plugins::FETCH),
        ("weather", plugins::WEATHER),
    ]
    .into_iter()
    .map(|(name, path)| PluginSource {
        name: name.into(),
        source: Source::File(path.into()),
        limits: Limits::default(),
        grants: Grants::default(),
        tools: Default::default(),
    })
    .collect();
    let (registry, errors) =
        Registry::load_checked(engine(), &bundled, None, &needs_manifest).unwrap();
    let errors: Vec<String> = errors.iter().map(|e| format!("{:#}", e.error)).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(registry.plugins().len(), 4);
    for plugin in registry.plugins() {
        assert!(
            plugin.admission.manifest.is_some(),
            "{} carries no manifest",
            plugin.name
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_plugin_runs_with_request_grant_and_ceiling_intersected() {
    let dir = TempDir::new("trust-effective");
    let notes = dir.join("notes");
    let other = dir.join("other");
    fs::create_dir_all(&notes).unwrap();
    fs::create_dir_all(&other).unwrap();
    fs::write(notes.join("hello.txt"), "hi").unwrap();
    let notes = notes.canonicalize().unwrap();
    let grants = Grants {
        files: vec![
            FileGrant::open(&notes, "/notes", true).unwrap(),
            // Not asked for: cut, though the operator grants it.
            FileGrant::open(&other.canonicalize().unwrap(), "/other", true).unwrap(),
        ],
        env: vec![
            ("NOTES_TITLE".into(), "Mine".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "hunter2".into()),
        ],
        ..Grants::default()
    };
    let policy = Policy::parse(&format!(
        "[[allow]]\nname = \"notes\"\n[ceiling]\ndirectories = [{{ path = \"{}\", mode = \"ro\" }}]\ndeadline_ms = 1000\n",
        dir.display()
    ))
    .unwrap();
    let (registry, errors) = Registry::load_checked(
        engine(),
        &[PluginSource {
            name: "notes".into(),
            source: Source::File(plugins::NOTES.into()),
            limits: Limits::default(),
            grants,
            tools: Default::default(),
        }],
        None,
        &policy,
    )
    .unwrap();
    assert!(errors.is_empty(), "{:?}", errors.first().map(|e| &e.error));
    let plugin = registry.plugins()[0].clone();

    assert_eq!(plugin.grants.files.len(), 1);
    assert!(!plugin.grants.files[0].writable, "the ceiling is read-only");
    assert_eq!(
        plugin.grants.env,
        [("NOTES_TITLE".to_string(), "Mine".to_string())]
    );
    assert_eq!(
        plugin.limits.max_memory_bytes,
        32 << 20,
        "the manifest asks for 32 MB"
    );
    assert_eq!(
        plugin.limits.deadline.as_millis(),
        1000,
        "the ceiling caps the deadline"
    );
    let notes_of = |grant: &str| {
        plugin
            .admission
            .notes
            .iter()
            .find(|n| n.grant.contains(grant))
            .unwrap_or_else(|| panic!("no note on {grant}"))
            .to_string()
    };
    assert!(notes_of("at /other").contains("cut: beyond the request"));
    assert!(notes_of("at /notes").contains("narrowed: read-only: the policy allows it read-only"));
    assert!(notes_of("AWS_SECRET_ACCESS_KEY").contains("cut"));

    // What the guest sees is exactly that.
    let read = call(&plugin, "notes_read_note", json!({"name": "hello.txt"})).await;
    assert_eq!(text(&read), "hi", "{read:?}");
    let write = call(
        &plugin,
        "notes_write_note",
        json!({"name": "new.txt", "text": "x"}),
    )
    .await;
    assert_eq!(write.is_error, Some(true), "{write:?}");
    assert!(!notes.join("new.txt").exists());
    let title = call(&plugin, "notes_title", json!({})).await;
    assert_eq!(structured(&title)["value"], "Mine");
    fs::remove_dir_all(&dir).unwrap();
}
