//! What a guest sees of the host during one call: a WASI context holding only its grants,
//! `wasi:http` behind moat's network checks, moat's `log` and `progress` imports, and a bounded
//! capture of its stdout and stderr.

use std::sync::Arc;

use anyhow::Result;
use tokio::sync::mpsc;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::grants::Grants;
use crate::network::{Denials, HttpHooks};
use crate::plugin::Limits;

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
    plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
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
    ) -> Result<(Self, CapturedOutput)> {
        let output = CapturedOutput {
            stdout: MemoryOutputPipe::new(limits.max_output_bytes),
            stderr: MemoryOutputPipe::new(limits.max_output_bytes),
        };
        let mut wasi = WasiCtx::builder();
        wasi.stdout(output.stdout.clone())
            .stderr(output.stderr.clone());
        grants.apply(&mut wasi)?;
        let denials = Denials::default();
        let network = grants.network.clone();
        let (socket_plugin, socket_denials) = (plugin.clone(), denials.clone());
        wasi.allow_tcp(true)
            .allow_ip_name_lookup(!network.is_empty())
            .socket_addr_check(move |addr, use_| {
                let verdict = network.check_socket(addr, use_, &socket_plugin);
                if let Err(message) = &verdict {
                    socket_denials.record(&socket_plugin, message.clone());
                }
                Box::pin(std::future::ready(verdict.is_ok()))
            });
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.max_memory_bytes)
            .trap_on_grow_failure(true)
            .build();
        let state = Self {
            plugin: plugin.clone(),
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: store_limits,
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

    pub fn limits(&mut self) -> &mut StoreLimits {
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
        let plugin = &*self.plugin;
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
