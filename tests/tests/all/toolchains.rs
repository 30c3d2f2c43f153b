//! What other toolchains' components expect of a host: `wasi:config/store` settings from a
//! `config` grant, a working directory in the first granted folder, room in the pool for many
//! core modules, and, for a component that cannot link, an error that names the import.

use moat::plugin::registry::Registry;
use moat::sandbox::engine::{PoolLimits, config_with};
use moat::sandbox::footprint::Footprint;
use moat::supply::embed::{embed, encode_wit};
use moat::supply::manifest::Manifest;
use moat_tests::{TempDir, engine, plugins, structured, text, try_call};
use serde_json::json;
use wasm_encoder::{
    Component, ComponentExportSection, ComponentImportSection, ComponentTypeRef,
    ComponentTypeSection, ComponentValType, InstanceType, PrimitiveValType,
};

use crate::filesystem::Fixture;

/// The `settings` plugin, loaded from a `moat.toml` with `grants` (TOML lines) in `dir`.
fn settings(dir: &std::path::Path, grants: &str) -> std::sync::Arc<moat::plugin::Plugin> {
    let path = dir.join("moat.toml");
    let wasm = plugins::SETTINGS;
    std::fs::write(
        &path,
        format!("[plugins.settings]\npath = {wasm:?}\n{grants}\n"),
    )
    .unwrap();
    let sources = moat::serve::config::read(&path).unwrap_or_else(|e| panic!("{e:#}"));
    let (registry, errors) = Registry::load(engine(), &sources).expect("a linker");
    assert!(errors.is_empty(), "{:#}", errors[0].error);
    registry.plugins()[0].clone()
}

#[tokio::test]
async fn settings_come_only_from_the_grant() {
    let dir = TempDir::new("settings");
    let plugin = settings(
        &dir,
        r#"config = { "api-url" = "https://api.example.org", mode = "fast" }"#,
    );
    let url = try_call(&plugin, "settings_setting", json!({"key": "api-url"}))
        .await
        .unwrap();
    assert_eq!(
        structured(&url)["value"],
        "https://api.example.org",
        "{url:?}"
    );
    let missing = try_call(&plugin, "settings_setting", json!({"key": "HOME"}))
        .await
        .unwrap();
    assert_eq!(structured(&missing)["value"], serde_json::Value::Null);
    let all = try_call(&plugin, "settings_all_settings", json!({}))
        .await
        .unwrap();
    assert_eq!(
        structured(&all)["value"],
        json!([["api-url", "https://api.example.org"], ["mode", "fast"]])
    );

    // No grant, no settings: the interface is there and empty.
    let bare = settings(&dir, "");
    let none = try_call(&bare, "settings_all_settings", json!({}))
        .await
        .unwrap();
    assert_eq!(structured(&none)["value"], json!([]));
}

#[tokio::test]
async fn a_relative_path_is_in_the_first_granted_folder() {
    let fixture = Fixture::new("relative");
    let files = r#"{ host = "ro", guest = "/docs", mode = "ro" }, { host = "rw", guest = "/data", mode = "rw" }"#;
    let plugin = fixture.load("settings", plugins::SETTINGS, files, "");
    let read = |path: &'static str| {
        let plugin = plugin.clone();
        async move {
            try_call(&plugin, "settings_read_relative", json!({"path": path}))
                .await
                .unwrap()
        }
    };
    let relative = read("readme.txt").await;
    assert_eq!(text(&relative), "read me", "{relative:?}");
    // The other grant stays where it was granted; nothing outside either is reachable.
    let absolute = read("/data/hello.txt").await;
    assert_eq!(text(&absolute), "one\ntwo\nthree\n", "{absolute:?}");
    for escape in ["../outside/secret.txt", "../../outside/secret.txt"] {
        let result = read(escape).await;
        assert_eq!(result.is_error, Some(true), "{escape}: {result:?}");
        assert!(!text(&result).contains("s3cret"), "{escape}: {result:?}");
    }

    // Without a granted folder there is no working directory to read from.
    let dir = TempDir::new("relative-none");
    let bare = settings(&dir, "");
    let result = try_call(
        &bare,
        "settings_read_relative",
        json!({"path": "readme.txt"}),
    )
    .await
    .unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(text(&result).contains("readme.txt"), "{result:?}");
}

/// A component that imports `import` as an instance whose one function `get` takes nothing
/// and returns a `u32`, and exports nothing.
fn importing(import: &str) -> Vec<u8> {
    let mut instance = InstanceType::new();
    instance
        .ty()
        .function()
        .params(Vec::<(&str, ComponentValType)>::new())
        .result(Some(ComponentValType::Primitive(PrimitiveValType::U32)));
    instance.export("get", ComponentTypeRef::Func(0));
    let mut types = ComponentTypeSection::new();
    types.instance(&instance);
    let mut imports = ComponentImportSection::new();
    imports.import(import, ComponentTypeRef::Instance(0));
    let mut component = Component::new();
    component
        .section(&types)
        .section(&imports)
        .section(&ComponentExportSection::new());
    component.finish()
}

/// The error of loading the component `wasm` as plugin `odd`.
fn load_error(wasm: &[u8]) -> String {
    let dir = TempDir::new("unlinkable");
    let path = dir.join("odd.wasm");
    std::fs::write(&path, wasm).unwrap();
    let source = moat_tests::source("odd", path.to_str().unwrap());
    let (_, errors) = Registry::load(engine(), &[source]).expect("a linker");
    format!("{:#}", errors.first().expect("a load error").error)
}

#[test]
fn an_import_moat_does_not_offer_is_named_with_what_it_offers() {
    let error = load_error(&importing("wasi:cli/environment@0.3.0"));
    assert!(error.contains("`wasi:cli/environment@0.3.0`"), "{error}");
    assert!(error.contains("moat offers wasi:cli@0.2.12"), "{error}");

    let error = load_error(&importing("acme:vault/secrets@1.0.0"));
    assert!(error.contains("`acme:vault/secrets@1.0.0`"), "{error}");
    assert!(error.contains("wasi:config"), "{error}");
}

#[test]
fn an_offered_import_of_other_types_says_so() {
    let error = load_error(&importing("wasi:config/store@0.2.0-draft"));
    assert!(error.contains("with types other than moat's"), "{error}");
    assert!(error.contains("wasi:config/store@0.2.0-draft"), "{error}");
}

/// Whether `wasm` compiles on an engine whose pool allows `limits`.
fn fits(wasm: &[u8], limits: PoolLimits) -> bool {
    let engine = wasmtime::Engine::new(&config_with(limits)).unwrap();
    wasmtime::component::Component::new(&engine, wasm).is_ok()
}

#[test]
fn a_footprint_is_what_the_pool_counts() {
    let multi_memory = std::fs::read(crate::handmade::multi_memory()).unwrap();
    let echo = std::fs::read(plugins::ECHO).unwrap();
    for wasm in [multi_memory, echo] {
        let footprint = Footprint::of(&wasm).unwrap();
        let exact = PoolLimits {
            core_instances: footprint.core_instances,
            memories: footprint.memories.max(1),
            tables: footprint.tables.max(1),
        };
        assert!(fits(&wasm, exact), "{footprint:?}");
        assert!(footprint.check(&exact).is_ok());
        let fewer = [
            PoolLimits {
                core_instances: exact.core_instances - 1,
                ..exact
            },
            PoolLimits {
                memories: footprint.memories - 1,
                ..exact
            },
        ];
        for limits in fewer {
            assert!(!fits(&wasm, limits), "{footprint:?} under {limits:?}");
            let error = footprint.check(&limits).unwrap_err().to_string();
            assert!(error.contains("in moat.toml's [engine] table"), "{error}");
        }
    }
}

#[test]
fn a_refusal_names_the_count_the_limit_and_the_setting() {
    let echo = std::fs::read(plugins::ECHO).unwrap();
    let footprint = Footprint::of(&echo).unwrap();
    let tight = PoolLimits {
        core_instances: footprint.core_instances - 1,
        ..PoolLimits::default()
    };
    let error = footprint.check(&tight).unwrap_err().to_string();
    assert!(
        error.contains(&format!(
            "has {} core module instances per instance, more than the {}",
            footprint.core_instances, tight.core_instances
        )),
        "{error}"
    );
    assert!(error.contains("max_core_instances_per_plugin"), "{error}");
    // Moat's defaults leave room for what componentize-py makes (dozens of core modules).
    assert!(PoolLimits::default().core_instances >= 64);
}

#[test]
fn embedded_docs_and_manifest_reach_the_tools() {
    let wasm = std::fs::read(plugins::FOREIGN).unwrap();
    let wit_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/foreign/wit");
    let wit = encode_wit(&wit_dir).unwrap();
    let manifest = Manifest {
        env: vec!["LANG".into()],
        max_memory_mb: Some(32),
        ..Manifest::default()
    };
    let embedded = embed(&wasm, &wit, Some(&manifest)).unwrap();
    // Embedding again replaces the sections instead of adding a second pair.
    assert_eq!(embed(&embedded, &wit, Some(&manifest)).unwrap(), embedded);
    let without_manifest = embed(&embedded, &wit, None).unwrap();
    assert!(without_manifest.len() < embedded.len());

    let dir = TempDir::new("embedded");
    let path = dir.join("foreign.wasm");
    std::fs::write(&path, &embedded).unwrap();
    let plugin = moat_tests::load("foreign", path.to_str().unwrap());
    let add = plugin
        .tools
        .iter()
        .find(|t| t.name == "foreign_add")
        .unwrap();
    assert_eq!(add.description, "Adds two numbers.");
    assert_eq!(plugin.admission.manifest.as_ref(), Some(&manifest));

    // A core module is not a component, and says so.
    let core = wasm_encoder::Module::new().finish();
    let error = embed(&core, &wit, None).unwrap_err().to_string();
    assert!(error.contains("core module, not a component"), "{error}");
}

#[test]
fn the_readme_greeter_is_described_by_its_doc_comments_alone() {
    // Every comment before an item is its docs to wit-parser: a remark at the end of the line
    // before an export would join the tool's description.
    let dir = TempDir::new("greeter-wit");
    let wit = dir.join("wit");
    let deps = wit.join("deps/moat-plugin");
    std::fs::create_dir_all(&deps).unwrap();
    let plugin_wit = crate::schema::repo_root().join("wit/plugin.wit");
    std::fs::copy(plugin_wit, deps.join("plugin.wit")).unwrap();
    let greeter = crate::schema::readme_block("In a Rust crate of its own, the guest SDK", "wit");
    std::fs::write(wit.join("greeter.wit"), greeter).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(&wit).unwrap();
    let world = resolve.select_world(&[package], Some("greeter")).unwrap();
    let greet = resolve.worlds[world]
        .exports
        .values()
        .find_map(|item| match item {
            wit_parser::WorldItem::Function(f) if f.name == "greet" => Some(f),
            _ => None,
        })
        .expect("the README's greeter exports greet");
    assert_eq!(
        greet.docs.contents.as_deref(),
        Some("Greets someone by name.\n\nname: who to greet.")
    );
}
