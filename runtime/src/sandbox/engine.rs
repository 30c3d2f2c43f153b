//! The one wasmtime [`Engine`] moat runs every plugin on, tuned for a fresh instance per call.
//!
//! * The pooling allocator with copy-on-write memory images makes instantiation a matter of
//!   microseconds, so no instance, and no state, ever outlives the call it serves.
//! * Epoch interruption lets a call be stopped at its deadline and lets a long call yield to the
//!   async runtime every tick, so one busy guest never holds a server thread for long.

use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use anyhow::Result;
use wasmtime::{
    Config, Engine, EngineWeak, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    Strategy,
};

/// How often the engine's epoch advances: the granularity of deadlines and of guest yields.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Most instances of all plugins that may be alive at once; further calls wait for a slot.
pub const MAX_LIVE_INSTANCES: u32 = 256;

/// The largest linear memory any plugin may have; a plugin's own limit may be lower.
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

/// Bytes at the bottom of each linear memory that are reset by writing them back (memset, or a
/// copy of the initial image) and stay resident, instead of being handed back with `madvise`.
/// Rust guests put their 1 MiB stack first, then their data and the start of their heap, so
/// nearly every page a small call writes lies below this. Handing them back made each call
/// fault them in again, and each fault and each `madvise` interrupted the other CPUs with a TLB
/// shootdown: ~35% of an `echo` round trip (harness P1). The cost is this much resident memory
/// per pooled memory in use, and a memset per call done off the call's path (see `instances`).
pub const KEEP_RESIDENT: usize = 1280 << 10;

/// The same for tables, which are small.
pub const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// How big one plugin's component may be, in the parts the pool gives each instance. The
/// defaults fit what componentize-py and componentize-js make (a CPython component links
/// dozens of core modules, each extension library one) with room to spare. Raising them costs
/// little: they cap what one instance may take from the pool's totals, which are counters and
/// reserved address space, not memory; the totals grow with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self {
            core_instances: 128,
            memories: 8,
            tables: 32,
        }
    }
}

impl std::fmt::Display for PoolLimits {
    /// As `[engine]` in moat.toml writes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max_core_instances_per_plugin = {}, max_memories_per_plugin = {}, \
             max_tables_per_plugin = {}",
            self.core_instances, self.memories, self.tables
        )
    }
}

static POOL_LIMITS: OnceLock<PoolLimits> = OnceLock::new();

/// Sets the pool limits of every engine this process builds (`[engine]` in moat.toml); only
/// before the first is built, since an engine's pool is fixed when it is made.
pub fn set_pool_limits(limits: PoolLimits) -> Result<()> {
    if POOL_LIMITS.set(limits).is_err() && pool_limits() != limits {
        anyhow::bail!("the engine's [engine] limits are fixed once an engine is built");
    }
    Ok(())
}

/// The pool limits engines are built with: those set, or the defaults.
pub fn pool_limits() -> PoolLimits {
    *POOL_LIMITS.get_or_init(PoolLimits::default)
}

/// Builds the engine and starts the thread that advances its epoch.
pub fn new_engine() -> Result<Engine> {
    new_engine_with_fuel(false)
}

/// [`new_engine`], with fuel metering when `fuel` is true. Metering slows every guest on the
/// engine, not only those with a fuel limit (README, Limits, has the measured cost), so moat
/// turns it on only when some plugin asks for fuel; the others then get unlimited fuel.
pub fn new_engine_with_fuel(fuel: bool) -> Result<Engine> {
    let mut config = config();
    config.consume_fuel(fuel);
    let engine = Engine::new(&config)?;
    // Raise the descriptor limit and fix each instance's share of it before any call runs.
    crate::sandbox::descriptors::handles_per_call();
    start_epoch_ticker(engine.weak());
    Ok(engine)
}

/// An engine like `optimizing` (the same limits, pool and fuel metering) that compiles with
/// Winch, wasmtime's baseline compiler: a single pass over each function, several times faster
/// than Cranelift, for code that runs slower. A plugin seen for the first time runs its code
/// while Cranelift's is made (see `plugin::tiers`). Winch has wasmtime's first tier of support
/// on x86_64, the same as Cranelift; a component it cannot compile (tail calls, exceptions, GC)
/// is compiled by Cranelift at once instead.
pub fn new_baseline_engine(optimizing: &Engine) -> Result<Engine> {
    let mut config = config();
    config
        .strategy(Strategy::Winch)
        // Winch hands the trampolines (host calls, exported entries) to Cranelift: made
        // unoptimized they cost a cold start less, and run for a call's first and last steps only.
        .cranelift_opt_level(OptLevel::None)
        .generate_address_map(false)
        .consume_fuel(optimizing.get_consume_fuel());
    let engine = Engine::new(&config)?;
    start_epoch_ticker(engine.weak());
    Ok(engine)
}

/// The engine configuration moat runs plugins with (benchmarks start from it too).
pub fn config() -> Config {
    config_with(pool_limits())
}

/// [`config`], with a pool of `limits`.
pub fn config_with(limits: PoolLimits) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(MAX_LIVE_INSTANCES)
        // Core instances are only counted: room for every live instance to be a big one.
        .total_core_instances(MAX_LIVE_INSTANCES.saturating_mul(limits.core_instances))
        // Memories and tables reserve address space per slot: most instances have one or two.
        .total_memories(MAX_LIVE_INSTANCES * 2)
        .total_tables(MAX_LIVE_INSTANCES * 4)
        .total_stacks(MAX_LIVE_INSTANCES)
        .max_memory_size(MAX_MEMORY_BYTES)
        .max_core_instances_per_component(limits.core_instances)
        .max_memories_per_component(limits.memories)
        .max_tables_per_component(limits.tables)
        // Reset the low memory a call dirties with memset instead of madvise: see KEEP_RESIDENT.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        // Reuse a slot some other plugin warmed before touching a cold one: with memory kept
        // resident, every slot ever used keeps KEEP_RESIDENT bytes, so the slots in use must
        // stay as few as the instances alive at once (harness P4: +69 MiB under load with
        // wasmtime's default of 100 unused warm slots, +41 MiB with none).
        .max_unused_warm_slots(0);

    let mut config = Config::new();
    config
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .memory_init_cow(true)
        .epoch_interruption(true)
        .wasm_component_model_map(true)
        // Plugins are WASI 0.2 components: no component-model async, which keeps calls cheaper.
        .concurrency_support(false)
        .parallel_compilation(true);
    config
}

/// Advances the epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_epoch_ticker(engine: EngineWeak) {
    thread::Builder::new()
        .name("moat-epoch".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch thread");
}
