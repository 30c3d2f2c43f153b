//! `wasi:config/store`: the settings the operator gives a plugin (its `config` grant), read
//! by key. Nothing by default: a plugin granted no settings finds every key missing.
//!
//! Toolchains import the interface at three versions of its draft, whose functions and types
//! are the same; moat offers each, from the one grant.

use wasmtime::component::{ComponentType, Linker, Lower};

use crate::sandbox::host::HostState;

/// The versions of `wasi:config/store` moat offers: what Spin, wasmCloud and wasmtime's own
/// implementation import.
pub const VERSIONS: [&str; 3] = ["0.2.0-draft", "0.2.0-draft-2024-09-27", "0.2.0-rc.1"];

/// The interface's `error`; moat holds every setting in memory, so it never returns one.
#[derive(ComponentType, Lower)]
#[component(variant)]
#[allow(dead_code)]
enum StoreError {
    #[component(name = "upstream")]
    Upstream(String),
    #[component(name = "io")]
    Io(String),
}

type Answer<T> = wasmtime::Result<(Result<T, StoreError>,)>;

/// Adds `wasi:config/store`, at each of [`VERSIONS`], to `linker`.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    for version in VERSIONS {
        let mut store = linker.instance(&format!("wasi:config/store@{version}"))?;
        store.func_wrap("get", |cx, (key,): (String,)| -> Answer<Option<String>> {
            Ok((Ok(cx.data().config().get(&key).cloned()),))
        })?;
        store.func_wrap("get-all", |cx, (): ()| -> Answer<Vec<(String, String)>> {
            let all = cx.data().config();
            Ok((Ok(all
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()),))
        })?;
    }
    Ok(())
}
