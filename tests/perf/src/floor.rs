//! The baselines of the CPU-heavy call: the same component run by the leanest wasmtime embedding
//! (default engine settings: no epochs, no fuel, no limits, no pooling), and the same computation
//! compiled natively.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use sha2::{Digest, Sha256};
use wasmtime::component::{
    Component, ComponentExportIndex, InstancePre, Linker, ResourceTable, Val,
};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The least a WASI 0.2 component needs in its store.
struct Bare {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// A component compiled once, instantiated afresh for each call (as moat does).
pub struct Floor {
    engine: Engine,
    pre: InstancePre<Bare>,
    export: ComponentExportIndex,
}

impl Floor {
    /// Loads `wasm` and finds its top-level function `export`.
    pub fn load(wasm: &Path, export: &str) -> Result<Self> {
        let engine = Engine::default();
        let component = Component::from_file(&engine, wasm)
            .map_err(|e| anyhow!("{e:?}"))
            .with_context(|| format!("compiling {}", wasm.display()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| anyhow!("{e:?}"))?;
        let export = component
            .get_export_index(None, export)
            .with_context(|| format!("{} exports no `{export}`", wasm.display()))?;
        Ok(Self {
            engine,
            pre,
            export,
        })
    }

    /// One call in a fresh instance; the function must return a string.
    pub async fn call(&self, params: &[Val]) -> Result<String> {
        let bare = Bare {
            ctx: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, bare);
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let func = instance
            .get_func(&mut store, self.export)
            .context("the export is not a function")?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut store, params, &mut results)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        match results {
            [Val::String(s)] => Ok(s),
            other => Err(anyhow!("expected a string, got {other:?}")),
        }
    }
}

/// What the `burn` plugin's `sha256` computes, natively: the sha256 of `mib` MiB of the pattern.
pub fn native_sha256(mib: u32) -> String {
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut hasher = Sha256::new();
    for _ in 0..mib {
        hasher.update(&chunk);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
