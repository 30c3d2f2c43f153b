//! What a guest sees of the host during one call: a WASI context holding only its grants,
//! `wasi:http` behind moat's network checks, moat's `log` and `progress` imports, and a bounded
//! capture of its stdout and stderr.

use std::sync::Arc;

use anyhow::Result;
use tokio::sync::mpsc;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::sandbox::grants::Grants;
use crate::sandbox::guest_log::GuestLog;
use crate::sandbox::limits::Limits;
use crate::sandbox::network::{Denials, HttpHooks};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "moat:plugin/imports",
    });
}

pub use bindings::moat::plugin::log::Level;

/// The longest log or progress message a guest may send; longer ones are cut.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// Something a guest reported while it ran, for the client that made the call.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestEvent {
    Log {
        level: Level,
        message: String,
    },
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
}

/// Where a call's [`GuestEvent`]s go; `None` when nobody listens.
pub type EventSink = Option<mpsc::Sender<GuestEvent>>;

/// Events a call may have waiting for the client; past that, new ones are dropped, so a guest
/// that reports faster than the client reads cannot make moat's memory grow.
pub const MAX_PENDING_EVENTS: usize = 256;

/// The store data of one call.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: CallLimits,
    log: Arc<GuestLog>,
    events: EventSink,
    http: WasiHttpCtx,
    http_hooks: HttpHooks,
}

/// The guest's captured stdout and stderr.
pub struct CapturedOutput {
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
}

impl HostState {
    /// A state that grants only `grants`: beyond them no files, no network, no environment, and
    /// no stdin.
    pub fn new(
        plugin: Arc<str>,
        grants: &Grants,
        limits: &Limits,
        log: Arc<GuestLog>,
    ) -> Result<(Self, CapturedOutput)> {
        let output = CapturedOutput {
            stdout: MemoryOutputPipe::new(limits.max_output_bytes),
            stderr: MemoryOutputPipe::new(limits.max_output_bytes),
        };
        let mut wasi = WasiCtx::builder();
        wasi.stdout(output.stdout.clone())
            .stderr(output.stderr.clone());
        grants.apply(&mut wasi)?;
        let denials = Denials::new(log.clone());
        let network = grants.network.clone();
        let (socket_plugin, socket_denials) = (plugin.clone(), denials.clone());
        // A TCP socket is a host descriptor from the moment it is created, before any address
        // is checked: only a plugin granted some IP address may create one. Name lookup is never
        // needed (socket grants name addresses; `wasi:http` resolves on the host), and each
        // lookup would be a query a plugin could smuggle data out through.
        wasi.allow_tcp(network.grants_sockets())
            .allow_ip_name_lookup(false)
            .socket_addr_check(move |addr, use_| {
                let verdict = network.check_socket(addr, use_, &socket_plugin);
                if let Err(message) = &verdict {
                    socket_denials.record(message.clone());
                }
                Box::pin(std::future::ready(verdict.is_ok()))
            });
        let state = Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: CallLimits::new(limits.max_memory_bytes),
            log,
            events: None,
            http: WasiHttpCtx::new(),
            http_hooks: HttpHooks {
                plugin,
                network: grants.network.clone(),
                denials,
            },
        };
        Ok((state, output))
    }

    /// Where the guest's log and progress reports go from now on.
    pub fn set_events(&mut self, events: EventSink) {
        self.events = events;
    }

    pub fn limits(&mut self) -> &mut CallLimits {
        &mut self.limits
    }

    /// The network accesses denied during the call so far; the host keeps them even when the
    /// guest swallows its own error.
    pub fn denials(&self) -> Denials {
        self.http_hooks.denials.clone()
    }

    fn emit(&self, event: GuestEvent) {
        if let Some(events) = &self.events {
            // Full: the client is behind, and this report is dropped. Closed: nobody listens.
            let _ = events.try_send(event);
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl bindings::moat::plugin::log::Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let message = truncate(message);
        // Over the plugin's log budget, a message is neither logged nor sent to the client.
        if !self.log.admit(message.len()) {
            return;
        }
        let plugin = &*self.http_hooks.plugin;
        match level {
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info | Level::Notice => tracing::info!(plugin, "{message}"),
            Level::Warning => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
        self.emit(GuestEvent::Log { level, message });
    }
}

impl bindings::moat::plugin::progress::Host for HostState {
    fn report(&mut self, progress: f64, total: Option<f64>, message: Option<String>) {
        // Progress goes only to the client, through the call's bounded queue, never to moat's
        // own log.
        let message = message.map(truncate);
        self.emit(GuestEvent::Progress {
            progress,
            total,
            message,
        });
    }
}

impl bindings::moat::plugin::content::Host for HostState {}

/// Adds everything moat offers to guests: WASI 0.2 with `wasi:http` (whose context grants
/// nothing by default) and the `moat:plugin` interfaces.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    bindings::Imports::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    Ok(())
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// What one instance may use of the host's memory and tables: wasmtime's [`StoreLimits`] for each
/// memory and table, and the total of all its linear memories, since a component may have
/// several and `max_memory_mb` is what the whole instance may hold.
pub struct CallLimits {
    each: StoreLimits,
    max_total: usize,
    total: usize,
}

impl CallLimits {
    fn new(max_memory_bytes: usize) -> Self {
        Self {
            each: StoreLimitsBuilder::new()
                .memory_size(max_memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            max_total: max_memory_bytes,
            total: 0,
        }
    }
}

impl ResourceLimiter for CallLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.each.memory_growing(current, desired, maximum)? {
            return Ok(false);
        }
        let total = self.total - current.min(self.total) + desired;
        if total > self.max_total {
            // A trap, as for one memory past the limit: the guest cannot go on without it.
            wasmtime::bail!(
                "forcing trap when growing memory to {desired} bytes: the instance's memories \
                 would hold {total} bytes, more than the {} allowed",
                self.max_total
            );
        }
        self.total = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.each.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.each.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.each.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.each.instances()
    }

    fn tables(&self) -> usize {
        self.each.tables()
    }

    fn memories(&self) -> usize {
        self.each.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{MemorySection, MemoryType, Module};

    /// A core module with one memory of `pages` 64 KiB pages per entry of `memories`.
    fn module_with_memories(memories: &[u64]) -> Vec<u8> {
        let mut section = MemorySection::new();
        for &pages in memories {
            section.memory(MemoryType {
                minimum: pages,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            });
        }
        let mut module = Module::new();
        module.section(&section);
        module.finish()
    }

    fn instantiate(memories: &[u64], limit: usize) -> wasmtime::Result<()> {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, module_with_memories(memories))?;
        let mut store = wasmtime::Store::new(&engine, CallLimits::new(limit));
        store.limiter(|limits| limits);
        wasmtime::Instance::new(&mut store, &module, &[]).map(drop)
    }

    #[test]
    fn the_memory_limit_is_the_total_of_all_memories() {
        let limit = 32 << 20;
        // 300 pages are 18.75 MiB: one fits, two together do not, though each would alone.
        instantiate(&[300], limit).unwrap();
        instantiate(&[300, 100], limit).unwrap();
        let error = instantiate(&[300, 300], limit).unwrap_err();
        assert!(
            format!("{error:?}").contains("the instance's memories would hold"),
            "{error:?}"
        );
        instantiate(&[100, 100, 100, 100, 100, 100], limit).unwrap_err();
    }
}
