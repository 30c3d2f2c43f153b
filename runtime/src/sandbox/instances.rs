//! Fresh instances of one plugin, each serving exactly one call, made ahead of the call.
//!
//! Making an instance (the store, the WASI context, instantiation) and throwing one away (the
//! pooling allocator resets its memory) take tens of microseconds, as long as the tool call of
//! a small plugin itself. Both happen off the call's path: after a call, a thread of its own
//! makes the instance the next call will take, then drops the used store. That thread runs at
//! the lowest priority (nice 19), so it fills moments when no call (and no client on the
//! machine) wants a CPU instead of delaying them. No instance ever serves two calls, so nothing
//! a call leaves in guest memory reaches another; a plugin that is never called holds no
//! instance, and one that is holds [`READY_PER_PLUGIN`] at most, [`MAX_READY`] in all so that
//! waiting instances never take the pool's room from calls. When that thread falls behind,
//! calls do the work themselves, so used instances never pile up in the pool either; and a
//! plugin whose start is slow (or fails) holds it up for [`AHEAD_BUDGET`] once, after
//! which its calls make their own instances until one is quick again.
//!
//! A plugin's code may be replaced while it serves ([`Instances::upgrade`]: Cranelift's code
//! after Winch's). Each instance keeps the [`Code`] it was made from, so a call that has begun
//! ends on the code it began with, and every instance made after the swap runs the new code.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use wasmtime::component::{Component, ComponentExportIndex, Instance, InstancePre, types};
use wasmtime::{Store, UpdateDeadline};

use crate::sandbox::grants::Grants;
use crate::sandbox::guest_log::GuestLog;
use crate::sandbox::host::{CapturedOutput, HostState};
use crate::sandbox::limits::{DeadlineExceeded, Limits};

/// Host bytes a call may receive from its guest per byte of `max_result_bytes`: room for the
/// host's own representation of lists (a `Val` per element) while keeping the bound tight.
const HOSTCALL_FUEL_PER_RESULT_BYTE: usize = 8;

/// Instances of one plugin waiting for its calls, at most. A plugin has a second once a call of
/// it, running alone, found none waiting because the instance thread was still making the last
/// call's replacement: a client calling it back to back outpaces one instance ahead (a third
/// of the harness's P1 calls made their own; its round trip went from 29.0 to 24.6 µs with
/// two). Only [`MAX_SECONDS`] plugins have one, since each holds a pool slot's resident memory.
pub const READY_PER_PLUGIN: usize = 2;

/// Plugins that may have a second instance waiting. Few: they are for the plugins one client
/// calls back to back; under load from many clients a call runs alone often enough that every
/// busy plugin would earn one (harness P4, 17 busy plugins: +15 MiB with no such cap).
pub const MAX_SECONDS: usize = 4;

/// Plugins that have a second instance waiting, or may have.
static SECONDS: AtomicUsize = AtomicUsize::new(0);

/// Instances waiting for a call, across all plugins: a quarter of the pool at most.
pub const MAX_READY: usize = crate::sandbox::engine::MAX_LIVE_INSTANCES as usize / 4;

/// Instances waiting now, across all plugins.
static READY: AtomicUsize = AtomicUsize::new(0);

/// Instances made ahead and waiting for a call now, across all plugins.
pub fn ready_instances() -> usize {
    READY.load(Ordering::Relaxed)
}

/// The longest the instance thread spends making one instance ahead of a call. A plugin whose
/// start takes longer, or fails, has its instances made on the call's path until one is made
/// within this again: no plugin's start holds up the thread that serves every plugin.
pub const AHEAD_BUDGET: Duration = Duration::from_millis(250);

/// An instance not yet used, its store, the pipes its stdout and stderr go to, and the code it
/// runs.
pub struct Fresh {
    pub store: Store<HostState>,
    pub instance: Instance,
    pub output: CapturedOutput,
    pub code: Arc<Code>,
    /// What the instance answered to each of the plugin's [`WarmUp`] messages.
    pub warmed: Vec<String>,
}

/// Messages an instance is given, one call of `export` (a function from a string to a string)
/// each, before any call takes it: an MCP server component's handshake. Made ahead like the
/// instance itself, it costs a call nothing.
pub struct WarmUp {
    pub export: ComponentExportIndex,
    pub messages: Vec<String>,
}

/// A plugin's compiled code, pre-linked, and where its exports are in it.
pub struct Code {
    pre: InstancePre<HostState>,
    /// The exports of the code the plugin was loaded with (whose indexes its tools keep) → the
    /// same exports in this code; empty for that first code itself.
    exports: HashMap<ComponentExportIndex, ComponentExportIndex>,
}

impl Code {
    /// Where the export that the plugin's first code has at `first` is in this code.
    pub fn export(&self, first: ComponentExportIndex) -> ComponentExportIndex {
        self.exports.get(&first).copied().unwrap_or(first)
    }
}

/// Makes a plugin's instances and keeps one ready for the next call.
pub struct Instances {
    plugin: Arc<str>,
    /// The code the plugin was loaded with: its tools know their exports by indexes into it.
    first: Component,
    code: RwLock<Arc<Code>>,
    grants: Grants,
    limits: Limits,
    /// The plugin's log budget, shared by all its instances.
    log: Arc<GuestLog>,
    /// Instances made ahead, at most [`READY_PER_PLUGIN`].
    ready: Mutex<Vec<Fresh>>,
    /// Whether the instance thread makes this plugin's instances ([`AHEAD_BUDGET`]).
    ahead: AtomicBool,
    /// Whether the plugin has earned a second instance waiting ([`READY_PER_PLUGIN`]).
    second: AtomicBool,
    /// Replacements of this plugin's used instances handed to the instance thread, not yet done.
    pending: AtomicUsize,
    /// What each instance is given before a call takes it, if anything.
    warm_up: Option<WarmUp>,
}

/// How making an instance failed: in its set-up, or in instantiation (a trap, the deadline),
/// with what the guest wrote to stderr meanwhile.
pub enum MakeError {
    Setup(String),
    Instantiate {
        error: wasmtime::Error,
        stderr: String,
    },
}

impl Instances {
    pub fn new(
        plugin: Arc<str>,
        pre: InstancePre<HostState>,
        grants: Grants,
        limits: Limits,
    ) -> Self {
        Self {
            log: Arc::new(GuestLog::new(plugin.clone())),
            plugin,
            first: pre.component().clone(),
            code: RwLock::new(Arc::new(Code {
                pre,
                exports: HashMap::new(),
            })),
            grants,
            limits,
            ready: Mutex::new(Vec::new()),
            ahead: AtomicBool::new(true),
            second: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            warm_up: None,
        }
    }

    /// The same instances, each given `warm_up` once it is made.
    pub fn warmed_up_by(mut self, warm_up: WarmUp) -> Self {
        self.warm_up = Some(warm_up);
        self
    }

    /// The plugin's log budget.
    pub fn log(&self) -> &GuestLog {
        &self.log
    }

    /// Runs the plugin on `pre` from now on: the next instance is made from it. The instances
    /// waiting for a call, made from the old code, are dropped; calls running finish on theirs.
    /// `pre` must be the same component, compiled anew on another engine.
    pub fn upgrade(&self, pre: InstancePre<HostState>) {
        let exports = export_map(&self.first, pre.component());
        *self.code.write().expect("code lock") = Arc::new(Code { pre, exports });
        let old = std::mem::take(&mut *self.ready.lock().expect("instance lock"));
        READY.fetch_sub(old.len(), Ordering::AcqRel);
    }

    /// Whether [`Instances::upgrade`] has replaced the code the plugin was loaded with.
    pub fn upgraded(&self) -> bool {
        let code = self.code.read().expect("code lock");
        !wasmtime::Engine::same(code.pre.engine(), self.first.engine())
    }

    /// An instance for a call that must end by `deadline`: one made ahead if there is one,
    /// else one made now. `alone`: no other call of the plugin is running.
    pub async fn take(&self, deadline: Instant, alone: bool) -> Result<Fresh, MakeError> {
        let ready = self.ready.lock().expect("instance lock").pop();
        if ready.is_some() {
            READY.fetch_sub(1, Ordering::AcqRel);
        }
        let mut fresh = match ready {
            Some(fresh) => fresh,
            None => {
                if alone && self.pending.load(Ordering::Acquire) > 0 {
                    self.earn_a_second();
                }
                let started = Instant::now();
                let fresh = self.make(deadline).await?;
                if started.elapsed() < AHEAD_BUDGET {
                    self.ahead.store(true, Ordering::Relaxed);
                }
                fresh
            }
        };
        self.arm(&mut fresh.store, deadline)
            .map_err(|e| MakeError::Setup(format!("{e:#}")))?;
        Ok(fresh)
    }

    /// After a call: drops its store and makes the next call's instance, on the instance
    /// thread; when that thread is behind, only drops the store, here.
    pub fn replace(self: &Arc<Self>, used: Store<HostState>) {
        let job = Replacement {
            instances: self.clone(),
            used,
            runtime: Handle::current(),
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        if let Err(job) = background(job) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            drop(job.used);
        }
    }

    /// Makes the next calls' instances while the plugin has room for one more waiting
    /// ([`READY_PER_PLUGIN`]), unless one takes too long to make.
    fn replenish(&self, runtime: &Handle) {
        while self.ahead.load(Ordering::Relaxed)
            && self.room_for_another(self.ready.lock().expect("instance lock").len())
        {
            let deadline = Instant::now() + self.limits.deadline.min(AHEAD_BUDGET);
            match runtime.block_on(self.make(deadline)) {
                Ok(fresh) => {
                    let mut ready = self.ready.lock().expect("instance lock");
                    if self.room_for_another(ready.len()) {
                        ready.push(fresh);
                        READY.fetch_add(1, Ordering::AcqRel);
                    }
                }
                // The next call makes its own instance and reports what goes wrong.
                Err(_) => {
                    self.ahead.store(false, Ordering::Relaxed);
                    tracing::debug!(
                        plugin = &*self.plugin,
                        "no instance made within {AHEAD_BUDGET:?}: the next calls make their own"
                    );
                }
            }
        }
    }

    /// Gives the plugin a second waiting instance from now on, unless [`MAX_SECONDS`] plugins
    /// have theirs.
    fn earn_a_second(&self) {
        if self.second.load(Ordering::Relaxed) {
            return;
        }
        let room = SECONDS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |seconds| {
            (seconds < MAX_SECONDS).then_some(seconds + 1)
        });
        if room.is_ok() && self.second.swap(true, Ordering::AcqRel) {
            SECONDS.fetch_sub(1, Ordering::AcqRel); // another call earned it meanwhile
        }
    }

    /// Whether the plugin, with `waiting` instances waiting, may have one more: while fewer
    /// than [`MAX_READY`] wait in all, a first, and a second if it has earned one.
    fn room_for_another(&self, waiting: usize) -> bool {
        READY.load(Ordering::Acquire) < MAX_READY
            && (waiting == 0 || (waiting < READY_PER_PLUGIN && self.second.load(Ordering::Relaxed)))
    }

    /// A new instance, instantiated by `deadline`.
    async fn make(&self, deadline: Instant) -> Result<Fresh, MakeError> {
        let code = self.code.read().expect("code lock").clone();
        let (state, output) = HostState::new(
            self.plugin.clone(),
            &self.grants,
            &self.limits,
            self.log.clone(),
        )
        .map_err(|e| MakeError::Setup(format!("{e:#}")))?;
        let mut store = Store::new(code.pre.engine(), state);
        store.limiter(|state| state.limits());
        // Every open file is a host file descriptor: cap the handles one call may hold at its
        // share of the process's descriptors, so guests cannot exhaust them for everyone else.
        store.set_max_component_handles(crate::sandbox::descriptors::handles_per_call());
        self.arm(&mut store, deadline)
            .map_err(|e| MakeError::Setup(format!("{e:#}")))?;
        // The epoch stops a start function that computes; this timer one blocked in the host.
        let started = async {
            let instance = code.pre.instantiate_async(&mut store).await?;
            let warmed = match &self.warm_up {
                Some(warm_up) => {
                    warm(&mut store, instance, code.export(warm_up.export), warm_up).await?
                }
                None => Vec::new(),
            };
            wasmtime::Result::<_>::Ok((instance, warmed))
        };
        let (instance, warmed) = tokio::time::timeout_at(deadline.into(), started)
            .await
            .unwrap_or_else(|_| Err(DeadlineExceeded.into()))
            .map_err(|error| MakeError::Instantiate {
                error,
                stderr: String::from_utf8_lossy(&output.stderr.contents()).into_owned(),
            })?;
        Ok(Fresh {
            store,
            instance,
            output,
            code,
            warmed,
        })
    }

    /// Sets the call's deadline and fuel on `store`.
    fn arm(&self, store: &mut Store<HostState>, deadline: Instant) -> wasmtime::Result<()> {
        // What the guest hands the host in one go (its result included) grows host memory, at
        // tens of bytes per list element: bound it near the result limit, not wasmtime's 128 MiB.
        store.set_hostcall_fuel(
            self.limits
                .max_result_bytes
                .saturating_mul(HOSTCALL_FUEL_PER_RESULT_BYTE),
        );
        if store.engine().get_consume_fuel() {
            // On a metering engine a store starts empty: plugins without a limit get all there is.
            store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX))?;
        }
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Err(DeadlineExceeded.into())
            } else {
                // Give the thread back to the runtime every tick: a busy guest never hogs it.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        Ok(())
    }
}

/// Gives `instance` each message of `warm_up` through `export`, and what it answered to each.
async fn warm(
    store: &mut Store<HostState>,
    instance: Instance,
    export: ComponentExportIndex,
    warm_up: &WarmUp,
) -> wasmtime::Result<Vec<String>> {
    use wasmtime::component::Val;
    let func = instance
        .get_func(&mut *store, export)
        .ok_or_else(|| wasmtime::Error::msg("the warm-up export is missing"))?;
    let mut answers = Vec::with_capacity(warm_up.messages.len());
    for message in &warm_up.messages {
        let mut results = [Val::Bool(false)];
        func.call_async(&mut *store, &[Val::String(message.clone())], &mut results)
            .await?;
        match results {
            [Val::String(answer)] => answers.push(answer),
            _ => wasmtime::bail!("the warm-up export returned no string"),
        }
    }
    Ok(answers)
}

impl Drop for Instances {
    fn drop(&mut self) {
        if let Ok(ready) = self.ready.get_mut() {
            READY.fetch_sub(ready.len(), Ordering::AcqRel);
        }
        if *self.second.get_mut() {
            SECONDS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Each export of `from` (and each function of an exported instance) → the same export of `to`:
/// two compilations of one component have the same exports, under indexes of their own.
fn export_map(
    from: &Component,
    to: &Component,
) -> HashMap<ComponentExportIndex, ComponentExportIndex> {
    let mut map = HashMap::new();
    for (name, item) in from.component_type().exports(from.engine()) {
        let (Some(old), Some(new)) = (
            from.get_export_index(None, name),
            to.get_export_index(None, name),
        ) else {
            continue;
        };
        map.insert(old, new);
        if let types::ComponentItem::ComponentInstance(instance) = item.ty {
            for (function, _) in instance.exports(from.engine()) {
                if let (Some(old), Some(new)) = (
                    from.get_export_index(Some(&old), function),
                    to.get_export_index(Some(&new), function),
                ) {
                    map.insert(old, new);
                }
            }
        }
    }
    map
}

/// The work after a call: make the next instance, drop the used store.
struct Replacement {
    instances: Arc<Instances>,
    used: Store<HostState>,
    runtime: Handle,
}

/// Replacements handed to the instance thread and not yet done, past which calls drop their
/// own stores.
const MAX_BACKLOG: usize = 8;

/// Replacements handed to the instance thread and not yet done.
static BACKLOG: AtomicUsize = AtomicUsize::new(0);

/// Held by the instance thread while it makes an instance on the runtime's timers.
static IN_HAND: Mutex<()> = Mutex::new(());
/// Set when the runtime is about to go: the instance thread makes no more instances.
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Stops making instances ahead, and waits for the one in hand (at most [`AHEAD_BUDGET`]):
/// call it before the async runtime shuts down, whose timers an instance being made needs.
pub fn stop_making_ahead() {
    STOPPED.store(true, Ordering::Release);
    drop(IN_HAND.lock());
}

/// Hands `job` to the instance thread (started on first use); gives it back when that thread
/// is [`MAX_BACKLOG`] jobs behind or could not start.
fn background(job: Replacement) -> Result<(), Replacement> {
    static JOBS: OnceLock<Option<Sender<Replacement>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Replacement>();
        let started = std::thread::Builder::new()
            .name("moat-instances".into())
            .spawn(move || {
                lower_priority();
                for job in queue {
                    // The next call waits for the new instance, nobody for the old one's reset
                    // (a memset of its low memory, longer than making one): make first.
                    {
                        let _in_hand = IN_HAND.lock();
                        if !STOPPED.load(Ordering::Acquire) {
                            job.instances.replenish(&job.runtime);
                        }
                    }
                    drop(job.used);
                    job.instances.pending.fetch_sub(1, Ordering::AcqRel);
                    BACKLOG.fetch_sub(1, Ordering::AcqRel);
                }
            });
        match started {
            Ok(_) => Some(jobs),
            Err(e) => {
                tracing::warn!("instances are made on the call's path: {e}");
                None
            }
        }
    });
    let Some(jobs) = jobs else {
        return Err(job);
    };
    if BACKLOG.fetch_add(1, Ordering::AcqRel) >= MAX_BACKLOG {
        BACKLOG.fetch_sub(1, Ordering::AcqRel);
        return Err(job);
    }
    jobs.send(job).map_err(|mpsc::SendError(job)| {
        BACKLOG.fetch_sub(1, Ordering::AcqRel);
        job
    })
}

/// Gives the calling thread the lowest share of a busy CPU (nice 19): it yields to calls and
/// clients, yet runs as soon as a CPU is free. `SCHED_IDLE` yielded more: the next call found
/// no instance ready one time in eight and made its own (harness P1: 1.32× native, against
/// 0.95× at nice 19 and 0.83× at normal priority, which also slowed the native server).
fn lower_priority() {
    // SAFETY: a plain system call; on Linux `who` 0 with PRIO_PROCESS is the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } != 0 {
        tracing::debug!(
            "the instance thread keeps its priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wasmtime::Engine;
    use wasmtime::component::{Component, Linker};

    use super::*;

    /// The instance thread and the counts are the process's: one test at a time uses them.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Instances of an empty component (the 8-byte preamble of a component binary), so that
    /// only moat's bookkeeping is at work.
    fn empty_plugin(engine: &Engine, name: &str) -> Arc<Instances> {
        let component = Component::new(engine, b"\0asm\x0d\0\x01\0").expect("empty component");
        let pre = Linker::new(engine)
            .instantiate_pre(&component)
            .expect("nothing to link");
        let limits = Limits::default();
        Arc::new(Instances::new(name.into(), pre, Grants::default(), limits))
    }

    /// Instances of a component whose start function never returns.
    fn endless_start(engine: &Engine) -> Arc<Instances> {
        use wasm_encoder::{
            BlockType, CodeSection, Function, FunctionSection, InstanceSection, Module,
            ModuleSection, StartSection, TypeSection,
        };
        let mut types = TypeSection::new();
        types.ty().function([], []);
        let mut functions = FunctionSection::new();
        functions.function(0);
        let mut body = Function::new([]);
        body.instructions()
            .loop_(BlockType::Empty)
            .br(0)
            .end()
            .end();
        let mut code = CodeSection::new();
        code.function(&body);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&functions)
            .section(&StartSection { function_index: 0 })
            .section(&code);
        let mut instances = InstanceSection::new();
        instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
        let mut component = wasm_encoder::Component::new();
        component
            .section(&ModuleSection(&module))
            .section(&instances);
        let component = Component::new(engine, component.finish()).expect("a valid component");
        let pre = Linker::new(engine).instantiate_pre(&component).unwrap();
        let limits = Limits::default();
        Arc::new(Instances::new(
            "endless".into(),
            pre,
            Grants::default(),
            limits,
        ))
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    async fn fresh(instances: &Instances) -> Fresh {
        match instances.take(deadline(), true).await {
            Ok(fresh) => fresh,
            Err(_) => panic!("the empty component did not instantiate"),
        }
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        let give_up = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < give_up, "gave up waiting for {what}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn backlog_done() -> bool {
        BACKLOG.load(Ordering::Acquire) == 0
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_instance_thread_is_handed_no_more_than_max_backlog_stores() {
        let _serial = SERIAL.lock().await;
        let engine = crate::sandbox::engine::new_engine().unwrap();
        let plugin = empty_plugin(&engine, "stalled");
        let mut used = Vec::new();
        for _ in 0..MAX_BACKLOG + 3 {
            used.push(fresh(&plugin).await.store);
        }

        // The thread looks at the plugin's waiting slot before it makes an instance: holding
        // that lock stalls it on its first job.
        let slot = plugin.ready.lock().unwrap();
        let mut handed = 0;
        for store in used {
            let job = Replacement {
                instances: plugin.clone(),
                used: store,
                runtime: Handle::current(),
            };
            match background(job) {
                Ok(()) => handed += 1,
                Err(job) => drop(job.used),
            }
        }
        assert_eq!(handed, MAX_BACKLOG);
        assert_eq!(BACKLOG.load(Ordering::Acquire), MAX_BACKLOG);
        drop(slot);

        until("the instance thread to catch up", backlog_done).await;
        assert_eq!(
            plugin.ready.lock().unwrap().len(),
            1,
            "no instance was made ahead"
        );
        assert_eq!(READY.load(Ordering::Acquire), 1);
        // Caught up, it takes work again.
        let used = fresh(&plugin).await.store;
        assert_eq!(READY.load(Ordering::Acquire), 0);
        plugin.replace(used);
        until("the instance thread", backlog_done).await;
        assert_eq!(READY.load(Ordering::Acquire), 1);
        drop(plugin);
        // The instance thread may still hold the plugin a moment after its last job.
        until("the waiting instances to go", || {
            READY.load(Ordering::Acquire) == 0
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_than_max_ready_instances_wait_for_calls() {
        let _serial = SERIAL.lock().await;
        let engine = crate::sandbox::engine::new_engine().unwrap();
        let plugins: Vec<_> = (0..MAX_READY + 6)
            .map(|n| empty_plugin(&engine, &format!("p{n}")))
            .collect();
        let waiting = || {
            plugins
                .iter()
                .map(|p| p.ready.lock().unwrap().len())
                .sum::<usize>()
        };
        assert_eq!(waiting(), 0, "a plugin never called holds no instance");

        // One call of each plugin, one at a time, so that the thread is never behind.
        for plugin in &plugins {
            let used = fresh(plugin).await.store;
            plugin.replace(used);
            until("the instance thread", backlog_done).await;
        }
        assert_eq!(waiting(), MAX_READY);
        assert_eq!(READY.load(Ordering::Acquire), MAX_READY);

        // Called once each, none earned a second.
        assert!(plugins.iter().all(|p| p.ready.lock().unwrap().len() <= 1));

        // A call takes a waiting instance, and its replacement takes the room it left.
        let called = plugins
            .iter()
            .find(|p| p.ready.lock().unwrap().len() == 1)
            .unwrap();
        let used = fresh(called).await.store;
        assert_eq!(READY.load(Ordering::Acquire), MAX_READY - 1);
        called.replace(used);
        until("the instance thread", backlog_done).await;
        assert_eq!(waiting(), MAX_READY);

        drop(plugins);
        // The instance thread may still hold the plugin a moment after its last job.
        until("the waiting instances to go", || {
            READY.load(Ordering::Acquire) == 0
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plugin_called_alone_faster_than_its_instances_are_made_gets_a_second_instance() {
        let _serial = SERIAL.lock().await;
        let engine = crate::sandbox::engine::new_engine().unwrap();
        let waiting = |p: &Instances| p.ready.lock().unwrap().len();
        let replaced = async |p: &Arc<Instances>, used| {
            p.replace(used);
            until("the instance thread", backlog_done).await;
        };

        // Calls that find none waiting while the last call's replacement is still being made
        // (held back here).
        let misses = async |p: &Arc<Instances>, alone: bool| {
            p.pending.fetch_add(1, Ordering::AcqRel);
            let call = p.take(deadline(), alone).await;
            assert!(call.is_ok(), "the empty component did not instantiate");
            p.pending.fetch_sub(1, Ordering::AcqRel);
        };
        let made_ahead = async |p: &Arc<Instances>| {
            let used = fresh(p).await.store;
            replaced(p, used).await;
            waiting(p)
        };

        // Side by side with another call of the plugin: a second instance would not keep up
        // with such calls either.
        let side_by_side = empty_plugin(&engine, "side_by_side");
        misses(&side_by_side, false).await;
        assert_eq!(made_ahead(&side_by_side).await, 1);

        // Alone: its calls outpace one instance ahead, and it gets two from then on.
        let back_to_back = empty_plugin(&engine, "back_to_back");
        misses(&back_to_back, true).await;
        assert_eq!(made_ahead(&back_to_back).await, READY_PER_PLUGIN);
        assert_eq!(made_ahead(&back_to_back).await, READY_PER_PLUGIN);
        assert_eq!(READY.load(Ordering::Acquire), 1 + READY_PER_PLUGIN);

        // No more than MAX_SECONDS plugins get one.
        let more: Vec<_> = (0..MAX_SECONDS)
            .map(|n| empty_plugin(&engine, &format!("more{n}")))
            .collect();
        for plugin in &more {
            misses(plugin, true).await;
        }
        let seconds = more
            .iter()
            .filter(|p| p.second.load(Ordering::Relaxed))
            .count();
        assert_eq!(seconds, MAX_SECONDS - 1);
        assert_eq!(SECONDS.load(Ordering::Acquire), MAX_SECONDS);
        drop(more);
        assert_eq!(SECONDS.load(Ordering::Acquire), 1);

        drop((side_by_side, back_to_back));
        until("the waiting instances to go", || {
            READY.load(Ordering::Acquire) == 0 && SECONDS.load(Ordering::Acquire) == 0
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_start_holds_up_the_instance_thread_once_not_per_call() {
        let _serial = SERIAL.lock().await;
        let engine = crate::sandbox::engine::new_engine().unwrap();
        let replenish = |plugin: &Arc<Instances>| {
            let (plugin, runtime) = (plugin.clone(), Handle::current());
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                plugin.replenish(&runtime);
                started.elapsed()
            })
        };

        let endless = endless_start(&engine);
        let first = replenish(&endless).await.unwrap();
        assert!(
            first >= AHEAD_BUDGET && first < Limits::default().deadline,
            "made for {first:?}, not for the budget of {AHEAD_BUDGET:?}"
        );
        assert!(!endless.ahead.load(Ordering::Relaxed));
        assert!(endless.ready.lock().unwrap().is_empty());
        // From then on the thread leaves it alone: its calls make their own instances.
        let second = replenish(&endless).await.unwrap();
        assert!(second < AHEAD_BUDGET, "tried again for {second:?}");
        let call = endless
            .take(Instant::now() + Duration::from_millis(100), true)
            .await;
        assert!(matches!(call, Err(MakeError::Instantiate { .. })));
        assert!(!endless.ahead.load(Ordering::Relaxed));

        // A plugin whose call makes an instance quickly gets them made ahead again.
        let quick = empty_plugin(&engine, "quick");
        quick.ahead.store(false, Ordering::Relaxed);
        let used = fresh(&quick).await.store;
        assert!(quick.ahead.load(Ordering::Relaxed));
        drop(used);
        replenish(&quick).await.unwrap();
        assert_eq!(quick.ready.lock().unwrap().len(), 1);
        drop(quick);
        assert_eq!(READY.load(Ordering::Acquire), 0);
    }
}
