//! wasmtime's own floor under a tool call: a component compiled once and called in a fresh
//! instance each time, the leanest way wasmtime allows (a store holding only an empty WASI
//! context; no limits, no output capture, no JSON). The benchmarks measure moat against it.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
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

/// One exported function of a component, compiled once on `engine`.
pub struct Floor {
    engine: Engine,
    pre: InstancePre<Bare>,
    export: ComponentExportIndex,
}

impl Floor {
    /// Compiles `wasm` on `engine` and finds `function`, at the top level or in the exported
    /// `interface`.
    pub fn load(
        engine: &Engine,
        wasm: &Path,
        interface: Option<&str>,
        function: &str,
    ) -> Result<Self> {
        let component = Component::from_file(engine, wasm)
            .map_err(|e| anyhow!("{e:?}"))
            .with_context(|| format!("compiling {}", wasm.display()))?;
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| anyhow!("{e:?}"))?;
        let instance = match interface {
            Some(name) => Some(
                component
                    .get_export_index(None, name)
                    .with_context(|| format!("{} exports no `{name}`", wasm.display()))?,
            ),
            None => None,
        };
        let export = component
            .get_export_index(instance.as_ref(), function)
            .with_context(|| format!("{} exports no `{function}`", wasm.display()))?;
        Ok(Self {
            engine: engine.clone(),
            pre,
            export,
        })
    }

    /// One call in a fresh instance; the function's one result.
    pub async fn call(&self, params: &[Val]) -> Result<Val> {
        let bare = Bare {
            ctx: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, bare);
        // On an engine that interrupts on epochs, a deadline centuries away keeps the floor free
        // of it; elsewhere the deadline is not read.
        store.set_epoch_deadline(1 << 40);
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
        let [result] = results;
        Ok(result)
    }
}
