//! Reloading: unchanged plugins are reused as they are, a bad file never costs the tools already
//! served, a call in flight finishes on the plugin it started with, and `tools/list` pages stay
//! whole across a swap.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use moat::access::Principal;
use moat::mcp::catalogue::Catalogue;
use moat::plugin::registry::Registry;
use moat::serve::reload::{Loader, Outcome, Served};
use moat_tests::{TempDir, engine, plugins, structured, text};
use serde_json::json;

/// A fresh folder under the system's temporary folder.
fn load(loader: &mut Loader, served: &Served) -> Outcome {
    loader.load(&served.sources().unwrap()).unwrap()
}

fn tool_names(registry: &Registry) -> Vec<String> {
    registry.tools().map(|(_, t)| t.name.clone()).collect()
}

fn plugin<'a>(registry: &'a Registry, name: &str) -> &'a Arc<moat::plugin::Plugin> {
    registry
        .plugins()
        .iter()
        .find(|p| &*p.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"))
}

fn page_size(n: usize) -> std::num::NonZeroUsize {
    n.try_into().unwrap()
}

#[test]
fn unchanged_plugins_are_reused_changed_ones_compiled_removed_ones_dropped() {
    let dir = TempDir::new("reload-reuse");
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    fs::copy(plugins::TIME, dir.join("time.wasm")).unwrap();
    let served = Served {
        paths: vec![dir.to_path_buf()],
        config: None,
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    assert_eq!(first.compiled, ["echo", "time"]);
    let echo = plugin(&first.registry, "echo").clone();

    fs::remove_file(dir.join("time.wasm")).unwrap();
    fs::copy(plugins::TEXT, dir.join("text.wasm")).unwrap();
    let second = load(&mut loader, &served);
    assert_eq!(second.unchanged, ["echo"]);
    assert_eq!(second.compiled, ["text"]);
    assert_eq!(second.removed, ["time"]);
    assert!(second.failed.is_empty());
    assert!(
        Arc::ptr_eq(plugin(&second.registry, "echo"), &echo),
        "echo was loaded again although its file did not change"
    );
    let names = tool_names(&second.registry);
    assert!(names.contains(&"text_hash".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("time_")), "{names:?}");

    // New bytes under the same name: compiled again.
    fs::copy(plugins::TIME, dir.join("echo.wasm")).unwrap();
    let third = load(&mut loader, &served);
    assert_eq!(third.compiled, ["echo"]);
    assert!(!Arc::ptr_eq(plugin(&third.registry, "echo"), &echo));
    assert!(tool_names(&third.registry).contains(&"echo_now".to_string()));
    fs::remove_dir_all(&dir).unwrap();
}

/// A reload that would leave nothing served (the config emptied, every plugin gone) is refused,
/// saying so: the plugins served stay, and a later reload reuses them as they are.
#[test]
fn a_reload_that_would_serve_nothing_keeps_what_is_served() {
    let dir = TempDir::new("reload-nothing");
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    let config = dir.join("moat.toml");
    fs::write(&config, "[plugins.echo]\npath = \"echo.wasm\"\n").unwrap();
    let served = Served {
        config: Some(config.clone()),
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    let echo = plugin(&first.registry, "echo").clone();

    fs::write(&config, "# every plugin gone\n").unwrap();
    let error = loader
        .load(&served.sources().unwrap())
        .err()
        .expect("refused");
    assert!(
        format!("{error:#}").contains("would serve no plugin"),
        "{error:#}"
    );
    fs::write(&config, "[plugins.echo]\npath = \"echo.wasm\"\n").unwrap();
    let again = load(&mut loader, &served);
    assert_eq!(again.unchanged, ["echo"]);
    assert!(Arc::ptr_eq(plugin(&again.registry, "echo"), &echo));
}

#[test]
fn a_changed_setting_loads_the_plugin_again_with_it() {
    let dir = TempDir::new("reload-settings");
    let config = dir.join("moat.toml");
    let entry = |deadline: u32| {
        format!(
            "[plugins.echo]\npath = {:?}\ndeadline_ms = {deadline}\n",
            plugins::ECHO
        )
    };
    fs::write(&config, entry(1000)).unwrap();
    let served = Served {
        paths: vec![],
        config: Some(config.clone()),
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    assert_eq!(load(&mut loader, &served).unchanged, ["echo"]);

    fs::write(&config, entry(2000)).unwrap();
    let changed = load(&mut loader, &served);
    assert_eq!(changed.compiled, ["echo"]);
    let echo = plugin(&changed.registry, "echo");
    assert_eq!(echo.limits.deadline, Duration::from_millis(2000));
    assert!(!Arc::ptr_eq(echo, plugin(&first.registry, "echo")));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_changed_or_removed_signature_is_admitted_anew() {
    let dir = TempDir::new("reload-signature");
    let (public, secret) = crate::trust::key_pair(&dir, "acme");
    let wasm = dir.join("echo.wasm");
    fs::copy(plugins::ECHO, &wasm).unwrap();
    let sign = || {
        let args = [
            "-S",
            "-s",
            secret.to_str().unwrap(),
            "-m",
            wasm.to_str().unwrap(),
        ];
        crate::trust::minisign(&args);
    };
    sign();
    let served = Served {
        paths: vec![wasm.clone()],
        config: None,
        secrets: None,
        ..Default::default()
    };
    let policy = crate::trust::signing_policy(&public);
    let mut loader = Loader::new(engine().clone(), None).with_policy(policy);
    assert_eq!(load(&mut loader, &served).compiled, ["echo"]);
    assert_eq!(load(&mut loader, &served).unchanged, ["echo"]);

    // The same bytes signed again (a new timestamp): admitted again, by the same publisher.
    std::thread::sleep(Duration::from_millis(1100));
    sign();
    let resigned = load(&mut loader, &served);
    assert_eq!(resigned.compiled, ["echo"]);
    let echo = plugin(&resigned.registry, "echo");
    assert_eq!(echo.admission.publisher.as_deref(), Some("acme"));

    // Without its signature it is refused; the version admitted before stays served.
    fs::remove_file(moat::supply::signing::signature_path(&wasm)).unwrap();
    let unsigned = load(&mut loader, &served);
    assert!(unsigned.unchanged.is_empty() && unsigned.compiled.is_empty());
    let error = format!("{:#}", unsigned.failed[0].error);
    assert!(error.contains("the plugin is unsigned"), "{error}");
    assert_eq!(unsigned.kept, ["echo"]);
    fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_bad_file_keeps_the_version_loaded_before() {
    let dir = TempDir::new("reload-bad");
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    let served = Served {
        paths: vec![dir.to_path_buf()],
        config: None,
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    let echo = plugin(&first.registry, "echo").clone();

    // A half-written component, and a new plugin that was never valid.
    let wasm = fs::read(plugins::ECHO).unwrap();
    fs::write(dir.join("echo.wasm"), &wasm[..wasm.len() / 2]).unwrap();
    fs::write(dir.join("junk.wasm"), b"\0asm\x0d\0\x01\0garbage").unwrap();
    let outcome = load(&mut loader, &served);
    assert_eq!(outcome.kept, ["echo"]);
    let errors: Vec<(String, String)> = outcome
        .failed
        .iter()
        .map(|f| (f.plugin.clone(), format!("{:#}", f.error)))
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for (name, error) in &errors {
        let path = dir.join(format!("{name}.wasm"));
        assert!(
            error.contains(&path.display().to_string())
                && error.contains("is not a valid WebAssembly component"),
            "{name}: {error}"
        );
    }
    assert!(Arc::ptr_eq(plugin(&outcome.registry, "echo"), &echo));
    assert!(
        !outcome
            .registry
            .plugins()
            .iter()
            .any(|p| &*p.name == "junk")
    );

    let registry = Arc::new(outcome.registry);
    let (served_echo, tool) = registry.find("echo_echo").unwrap();
    let args = json!({"message": "still here"});
    let result = served_echo
        .call(tool, args.as_object(), None)
        .await
        .unwrap();
    assert_eq!(text(&result), "still here");

    // Fixed: the new bytes are loaded, the junk is still reported.
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    let fixed = load(&mut loader, &served);
    assert_eq!(
        fixed.unchanged,
        ["echo"],
        "the same bytes as the version kept"
    );
    assert_eq!(fixed.failed.len(), 1);
    assert!(fixed.kept.is_empty());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_config_that_does_not_parse_is_an_error_naming_the_file_and_line() {
    let dir = TempDir::new("reload-config");
    let config = dir.join("moat.toml");
    fs::write(
        &config,
        "[plugins.echo]\npath = \"echo.wasm\"\ndeadline_ms = \"soon\"\n",
    )
    .unwrap();
    let served = Served {
        paths: vec![],
        config: Some(config.clone()),
        secrets: None,
        ..Default::default()
    };
    let error = format!("{:#}", served.sources().unwrap_err());
    assert!(
        error.contains(&config.display().to_string()) && error.contains("line 3"),
        "{error}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_on_the_plugin_it_started_with() {
    let dir = TempDir::new("reload-in-flight");
    fs::copy(plugins::CHATTY, dir.join("chatty.wasm")).unwrap();
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    let served = Served {
        paths: vec![dir.to_path_buf()],
        config: None,
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    let catalogue = Catalogue::new(Arc::new(first.registry), page_size(100));

    // As the server does: the call holds the registry it found its tool in.
    let registry = catalogue.current();
    let old_chatty = Arc::downgrade(plugin(&registry, "chatty"));
    let call = tokio::spawn(async move {
        let (plugin, tool) = registry.find("chatty_nap").unwrap();
        plugin
            .call(tool, json!({"ms": 500}).as_object(), None)
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    fs::remove_file(dir.join("chatty.wasm")).unwrap();
    let outcome = load(&mut loader, &served);
    assert_eq!(outcome.removed, ["chatty"]);
    assert!(catalogue.replace(Arc::new(outcome.registry)));
    assert!(catalogue.current().find("chatty_nap").is_none());
    assert!(catalogue.current().find("echo_echo").is_some());
    assert!(old_chatty.upgrade().is_some(), "the call still runs on it");

    let result = call.await.unwrap().expect("the call in flight completes");
    assert_eq!(structured(&result), &json!({"value": 500}));
    assert!(
        old_chatty.upgrade().is_none(),
        "the removed plugin is freed once its last call ended"
    );
    let again = Arc::new(load(&mut loader, &served).registry);
    assert!(
        !catalogue.replace(again),
        "the same tools again are no change"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// 30 copies of `shapes` (33 tools each) and 5 of `echo` (2 each): 1000 tools in 35 plugins.
fn thousand_tools(dir: &Path) -> Served {
    let config: String = (0..35)
        .map(|i| {
            let wasm = if i < 30 {
                plugins::SHAPES
            } else {
                plugins::ECHO
            };
            format!("[plugins.p{i:02}]\npath = {wasm:?}\n")
        })
        .collect();
    fs::write(dir.join("moat.toml"), config).unwrap();
    Served {
        paths: vec![],
        config: Some(dir.join("moat.toml")),
        secrets: None,
        ..Default::default()
    }
}

#[test]
fn a_thousand_tools_are_listed_page_by_page_each_exactly_once() {
    let dir = TempDir::new("reload-thousand");
    let served = thousand_tools(&dir);
    let cache = moat::supply::cache::Cache::open(&dir.join("cache")).unwrap();
    let mut loader = Loader::new(engine().clone(), Some(cache));
    let outcome = load(&mut loader, &served);
    assert!(outcome.failed.is_empty());
    let all = tool_names(&outcome.registry);
    assert_eq!(all.len(), 1000);
    let catalogue = Catalogue::new(Arc::new(outcome.registry), page_size(100));

    let registry = catalogue.current();
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = catalogue
            .page(
                &registry,
                &Principal::stdio("stdio"),
                &Default::default(),
                cursor.as_deref(),
            )
            .unwrap();
        assert!(page.tools.len() <= 100);
        listed.extend(page.tools.iter().map(|(_, t)| t.name.clone()));
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 10);
    assert_eq!(listed, all, "every tool once, in name order");
    fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_cursor_stays_meaningful_across_a_swap() {
    let dir = TempDir::new("reload-cursor");
    fs::copy(plugins::ECHO, dir.join("a.wasm")).unwrap();
    fs::copy(plugins::TIME, dir.join("b.wasm")).unwrap();
    fs::copy(plugins::TEXT, dir.join("c.wasm")).unwrap();
    let served = Served {
        paths: vec![dir.to_path_buf()],
        config: None,
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let catalogue = Catalogue::new(Arc::new(load(&mut loader, &served).registry), page_size(3));
    let registry = catalogue.current();
    let first = catalogue
        .page(
            &registry,
            &Principal::stdio("stdio"),
            &Default::default(),
            None,
        )
        .unwrap();
    let first_names: Vec<&str> = first.tools.iter().map(|(_, t)| t.name.as_str()).collect();
    assert_eq!(first_names, ["a_echo", "a_repeat", "b_add"]);
    let cursor = first.next_cursor.clone().unwrap();

    // `b` goes away between two pages: the walk goes on after "b_add", with what is there now.
    fs::remove_file(dir.join("b.wasm")).unwrap();
    catalogue.replace(Arc::new(load(&mut loader, &served).registry));
    let now = catalogue.current();
    let mut rest = BTreeSet::new();
    let mut cursor = Some(cursor);
    while let Some(at) = cursor {
        let page = catalogue
            .page(
                &now,
                &Principal::stdio("stdio"),
                &Default::default(),
                Some(&at),
            )
            .unwrap();
        rest.extend(page.tools.iter().map(|(_, t)| t.name.clone()));
        cursor = page.next_cursor;
    }
    let expected: BTreeSet<String> = tool_names(&now)
        .into_iter()
        .filter(|n| n.starts_with("c_"))
        .collect();
    assert_eq!(rest, expected);
    assert!(!expected.is_empty());

    let Err(error) = catalogue.page(
        &now,
        &Principal::stdio("stdio"),
        &Default::default(),
        Some("not-a-cursor"),
    ) else {
        panic!("a cursor moat never issued was taken");
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_plugin_that_could_write_what_decides_its_grants_is_not_loaded() {
    let dir = TempDir::new("reload-protected");
    fs::copy(plugins::ECHO, dir.join("echo.wasm")).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    let config = dir.join("moat.toml");
    let served = Served {
        paths: vec![],
        config: Some(config.clone()),
        secrets: None,
        ..Default::default()
    };
    let with_grant = |host: &str, mode: &str| {
        fs::write(
            &config,
            format!(
                "[plugins.echo]\npath = \"echo.wasm\"\n\
                 files = [{{ host = \"{host}\", guest = \"/d\", mode = \"{mode}\" }}]\n"
            ),
        )
        .unwrap();
    };
    let load_protected = || {
        let mut loader = Loader::new(engine().clone(), None).with_protected([config.clone()]);
        load(&mut loader, &served)
    };

    // Writing the folder that holds moat.toml would let the plugin widen its own grants.
    with_grant(".", "rw");
    let refused = load_protected();
    assert!(refused.registry.plugins().is_empty());
    let [failure] = &refused.failed[..] else {
        panic!("{:?}", refused.failed)
    };
    let message = format!("{:#}", failure.error);
    assert!(
        message.contains("writable grant of")
            && message.contains(&config.canonicalize().unwrap().display().to_string()),
        "{message}"
    );

    // Reading it, or writing a folder beside it, is fine.
    for (host, mode) in [(".", "ro"), ("data", "rw")] {
        with_grant(host, mode);
        let loaded = load_protected();
        assert!(
            loaded.failed.is_empty(),
            "{host} {mode}: {:?}",
            loaded.failed
        );
        assert!(tool_names(&loaded.registry).contains(&"echo_echo".to_string()));
    }

    // The audit log may not even be read: it tells what every plugin was asked.
    let audit = dir.join("data/audit.jsonl");
    with_grant("data", "ro");
    let mut loader = Loader::new(engine().clone(), None).with_private([audit.clone()]);
    let refused = load(&mut loader, &served);
    let [failure] = &refused.failed[..] else {
        panic!("{:?}", refused.failed)
    };
    let message = format!("{:#}", failure.error);
    assert!(
        message.contains("which records every plugin's calls") && message.contains("audit.jsonl"),
        "{message}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// Writes `text` as a private secrets file at `path`.
fn write_secrets(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// Plugin `writer` may write `work/`; plugin `reader` may read `work/assets/`. The writer moves
/// `assets` aside and puts a symlink to a private folder of the operator's in its place: the
/// reader's instances keep the directory that was checked, and a reload (or a restart) refuses
/// the grant that now leads through the writer's symlink.
#[tokio::test]
async fn a_plugin_cannot_redirect_another_plugins_grant() {
    let dir = TempDir::new("reload-redirect").canonicalize().unwrap();
    fs::create_dir_all(dir.join("work/assets")).unwrap();
    fs::write(dir.join("work/assets/logo.txt"), "the logo").unwrap();
    fs::create_dir_all(dir.join("private")).unwrap();
    fs::write(dir.join("private/key.txt"), "private-key-5530").unwrap();
    write_secrets(&dir.join("secrets.toml"), "TOKEN = \"tok-4411\"\n");
    let config = dir.join("moat.toml");
    fs::write(
        &config,
        format!(
            "secrets = \"secrets.toml\"\n\
             [plugins.writer]\npath = \"{hostile}\"\n\
             files = [{{ host = \"work\", guest = \"/work\", mode = \"rw\" }}]\n\
             [plugins.reader]\npath = \"{hostile}\"\n\
             files = [{{ host = \"work/assets\", guest = \"/assets\", mode = \"ro\" }}]\n",
            hostile = plugins::HOSTILE
        ),
    )
    .unwrap();
    let served = Served {
        paths: vec![],
        config: Some(config.clone()),
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    let first = load(&mut loader, &served);
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    let writer = plugin(&first.registry, "writer").clone();
    let reader = plugin(&first.registry, "reader").clone();

    let swap = moat_tests::call(
        &writer,
        "writer_swap_for_symlink",
        json!({ "path": "/work/assets", "target": "../private" }),
    )
    .await;
    assert_ne!(swap.is_error, Some(true), "{swap:?}");
    assert!(
        fs::symlink_metadata(dir.join("work/assets"))
            .unwrap()
            .is_symlink()
    );

    let read = moat_tests::call(
        &reader,
        "reader_read_file",
        json!({ "path": "/assets/key.txt" }),
    )
    .await;
    assert_eq!(read.is_error, Some(true), "{read:?}");
    assert!(!format!("{read:?}").contains("private-key"), "{read:?}");
    // Still the directory that was granted, now at its new path.
    let logo = moat_tests::call(
        &reader,
        "reader_read_file",
        json!({ "path": "/assets/logo.txt" }),
    )
    .await;
    assert_eq!(moat_tests::text(&logo), "the logo");

    // A reload reads the grant again: through the writer's symlink it is refused, and the reader
    // loaded before stays in service with the directory it had.
    let second = load(&mut loader, &served);
    let refused = second
        .failed
        .iter()
        .find(|f| f.plugin == "reader")
        .unwrap_or_else(|| panic!("the reader was loaded again: {:?}", second.unchanged));
    let message = format!("{:#}", refused.error);
    assert!(
        message.contains("passes through the symlink") && message.contains("work/assets"),
        "{message}"
    );
    assert!(second.kept.contains(&"reader".to_string()));
    let kept = plugin(&second.registry, "reader").clone();
    let read = moat_tests::call(
        &kept,
        "reader_read_file",
        json!({ "path": "/assets/logo.txt" }),
    )
    .await;
    assert_eq!(moat_tests::text(&read), "the logo");

    // So does a fresh start.
    let mut restarted = Loader::new(engine().clone(), None);
    let fresh = load(&mut restarted, &served);
    assert!(fresh.failed.iter().any(|f| f.plugin == "reader"));
    assert!(
        fresh
            .registry
            .plugins()
            .iter()
            .all(|p| &*p.name != "reader")
    );

    // A symlink to the folder of moat.toml and the secrets: the whole config is refused, and
    // nothing served changes.
    fs::remove_file(dir.join("work/assets")).unwrap();
    std::os::unix::fs::symlink("..", dir.join("work/assets")).unwrap();
    let error = format!("{:#}", served.sources().unwrap_err());
    assert!(error.contains("contains the secrets file"), "{error}");
    let read = moat_tests::call(
        &kept,
        "reader_read_file",
        json!({ "path": "/assets/secrets.toml" }),
    )
    .await;
    assert!(!format!("{read:?}").contains("tok-4411"), "{read:?}");
    fs::remove_dir_all(&dir).unwrap();
}

/// A reload that changes nothing but an injected secret's value (a revoked token) loads the
/// plugin again with the new value; one that changes nothing keeps it.
#[test]
fn a_changed_secret_reloads_the_plugin() {
    let dir = TempDir::new("reload-secret-change");
    write_secrets(&dir.join("secrets.toml"), "TOKEN = \"old-token\"\n");
    let config = dir.join("moat.toml");
    fs::write(
        &config,
        format!(
            "secrets = \"secrets.toml\"\n[plugins.api]\npath = \"{}\"\n\
             network = [\"https://api.example.org\"]\n\
             inject = [{{ host = \"api.example.org\", header = \"Authorization\", \
             value = \"Bearer ${{secret:TOKEN}}\" }}]\n",
            plugins::ECHO
        ),
    )
    .unwrap();
    let served = Served {
        paths: vec![],
        config: Some(config),
        secrets: None,
        ..Default::default()
    };
    let mut loader = Loader::new(engine().clone(), None);
    assert_eq!(load(&mut loader, &served).compiled, ["api"]);
    assert_eq!(load(&mut loader, &served).unchanged, ["api"]);
    write_secrets(&dir.join("secrets.toml"), "TOKEN = \"new-token\"\n");
    let outcome = load(&mut loader, &served);
    assert_eq!(
        outcome.compiled,
        ["api"],
        "the revoked token is still in use"
    );
    let injected = &plugin(&outcome.registry, "api")
        .admission
        .grants
        .network
        .inject[0];
    assert!(
        matches!(&injected.value, moat::sandbox::network::Injected::Fixed(v) if v == "Bearer new-token")
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_plugin_that_could_write_a_served_plugin_file_is_not_loaded() {
    let dir = TempDir::new("reload-plugin-files");
    fs::create_dir_all(dir.join("plugins")).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::copy(plugins::ECHO, dir.join("plugins/echo.wasm")).unwrap();
    fs::copy(plugins::TIME, dir.join("plugins/time.wasm")).unwrap();
    let config = dir.join("moat.toml");
    let served = Served {
        paths: vec![],
        config: Some(config.clone()),
        secrets: None,
        ..Default::default()
    };
    let with_grant = |host: &str, mode: &str| {
        fs::write(
            &config,
            format!(
                "[plugins.echo]\npath = \"plugins/echo.wasm\"\n\
                 files = [{{ host = \"{host}\", guest = \"/d\", mode = \"{mode}\" }}]\n\
                 [plugins.time]\npath = \"plugins/time.wasm\"\n"
            ),
        )
        .unwrap();
    };

    // Writing the folder of time.wasm (or its own file) would let echo replace what runs as
    // time, or as itself, at the next reload; time itself loads all the same.
    with_grant("plugins", "rw");
    let refused = load(&mut Loader::new(engine().clone(), None), &served);
    let [failure] = &refused.failed[..] else {
        panic!("{:?}", refused.failed)
    };
    assert_eq!(failure.plugin, "echo");
    let message = format!("{:#}", failure.error);
    assert!(
        message.contains("a plugin file moat serves") && message.contains("plugins/"),
        "{message}"
    );
    assert!(
        tool_names(&refused.registry)
            .iter()
            .any(|t| t.starts_with("time_"))
    );

    // Reading the plugins, or writing a folder beside them, is fine.
    for (host, mode) in [("plugins", "ro"), ("data", "rw")] {
        with_grant(host, mode);
        let loaded = load(&mut Loader::new(engine().clone(), None), &served);
        assert!(
            loaded.failed.is_empty(),
            "{host} {mode}: {:?}",
            loaded.failed
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}
