//! Tool names across plugins: a name reaches one plugin, never silently another. The bundled
//! `conformance` plugin exports `simple-text` and the `shapes` test plugin exports `text`, so
//! served as `x` and `x_simple` both would offer `x_simple_text`.

use std::fs;

use moat::plugin::registry::Registry;
use moat::serve::reload::{Loader, Served};
use moat::supply::PluginSource;
use moat::supply::source::Source;
use moat_tests::{TempDir, engine, plugins};

fn source(name: &str, wasm: &str) -> PluginSource {
    PluginSource {
        name: name.into(),
        source: Source::File(wasm.into()),
        limits: Default::default(),
        grants: Default::default(),
        tools: Default::default(),
    }
}

/// The plugin that serves `tool`.
fn owner(registry: &Registry, tool: &str) -> Option<String> {
    registry
        .find(tool)
        .map(|(plugin, _)| plugin.name.to_string())
}

/// A moat.toml serving conformance as `x` (if `with_x`) and shapes as `x_simple`, with `extra`.
fn write_config(dir: &std::path::Path, with_x: bool, extra: &str) -> Served {
    let mut text = format!("[plugins.x_simple]\npath = {:?}\n", plugins::SHAPES);
    if with_x {
        text.push_str(&format!("[plugins.x]\npath = {:?}\n", plugins::CONFORMANCE));
    }
    text.push_str(extra);
    fs::write(dir.join("moat.toml"), text).unwrap();
    Served {
        paths: vec![],
        config: Some(dir.join("moat.toml")),
        secrets: None,
        ..Default::default()
    }
}

#[test]
fn of_two_plugins_offering_one_name_the_later_is_refused_whole() {
    // Whatever the order of the sources, the plugin whose name sorts later is refused.
    for sources in [
        [
            source("x", plugins::CONFORMANCE),
            source("x_simple", plugins::SHAPES),
        ],
        [
            source("x_simple", plugins::SHAPES),
            source("x", plugins::CONFORMANCE),
        ],
    ] {
        let (registry, errors) = Registry::load(engine(), &sources).unwrap();
        let [error] = &errors[..] else {
            panic!("{errors:?}")
        };
        assert_eq!(error.plugin, "x_simple");
        let message = format!("{:#}", error.error);
        for part in [
            "\"x_simple\"",
            "\"x\"",
            "`x_simple_text`",
            "[plugins.x_simple.tools]",
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
        assert_eq!(owner(&registry, "x_simple_text").as_deref(), Some("x"));
        // Refused whole: none of its other tools is served either.
        assert!(registry.plugins().iter().all(|p| &*p.name == "x"));
        assert_eq!(owner(&registry, "x_simple_echo_point"), None);
    }
}

#[test]
fn on_reload_the_plugin_serving_a_name_keeps_it() {
    let dir = TempDir::new("naming-reload");
    let mut loader = Loader::new(engine().clone(), None);
    let served = write_config(&dir, false, "");
    let first = loader.load(&served.sources().unwrap()).unwrap();
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    assert_eq!(
        owner(&first.registry, "x_simple_text").as_deref(),
        Some("x_simple")
    );

    // `x` sorts first, but `x_simple` was serving the name already: the newcomer is refused.
    let served = write_config(&dir, true, "");
    let second = loader.load(&served.sources().unwrap()).unwrap();
    let [error] = &second.failed[..] else {
        panic!("{:?}", second.failed)
    };
    assert_eq!(error.plugin, "x");
    let message = format!("{:#}", error.error);
    assert!(
        message.contains("which was serving it already"),
        "{message}"
    );
    assert_eq!(
        owner(&second.registry, "x_simple_text").as_deref(),
        Some("x_simple")
    );
    assert!(second.compiled.is_empty(), "{:?}", second.compiled);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn moat_toml_renames_or_hides_a_tool_to_settle_a_clash() {
    let dir = TempDir::new("naming-rules");
    let mut loader = Loader::new(engine().clone(), None);

    let renamed = "[plugins.x_simple.tools]\nx_simple_text = { name = \"x_simple_shapes_text\" }\n";
    let served = write_config(&dir, true, renamed);
    let outcome = loader.load(&served.sources().unwrap()).unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    let registry = &outcome.registry;
    assert_eq!(owner(registry, "x_simple_text").as_deref(), Some("x"));
    assert_eq!(
        owner(registry, "x_simple_shapes_text").as_deref(),
        Some("x_simple")
    );
    assert_eq!(
        owner(registry, "x_simple_echo_point").as_deref(),
        Some("x_simple")
    );

    // A hidden tool is neither listed nor callable: the plugin has no such tool at all.
    let served = write_config(
        &dir,
        true,
        "[plugins.x.tools]\nx_simple_text = { hide = true }\n",
    );
    let outcome = loader.load(&served.sources().unwrap()).unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    assert_eq!(
        owner(&outcome.registry, "x_simple_text").as_deref(),
        Some("x_simple")
    );
    let x = outcome
        .registry
        .plugins()
        .iter()
        .find(|p| &*p.name == "x")
        .unwrap();
    assert!(x.tools.iter().all(|t| t.name != "x_simple_text"));
    assert!(x.tools.iter().any(|t| t.name == "x_error_handling"));

    // A rule for a tool the plugin does not have names the real ones.
    let served = write_config(
        &dir,
        false,
        "[plugins.x_simple.tools]\ntext = { hide = true }\n",
    );
    let outcome = loader.load(&served.sources().unwrap()).unwrap();
    let [error] = &outcome.failed[..] else {
        panic!("{:?}", outcome.failed)
    };
    let message = format!("{:#}", error.error);
    assert!(
        message.contains("no tool `text`") && message.contains("x_simple_echo_point"),
        "{message}"
    );
    fs::remove_dir_all(&dir).unwrap();
}
