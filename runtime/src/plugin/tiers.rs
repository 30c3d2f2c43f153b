//! Tiered compilation: a plugin seen for the first time runs Winch's code at once, and
//! Cranelift's as soon as it is made.
//!
//! Cranelift makes the fast code moat serves with, but takes seconds for a big component, and
//! a host that starts moat gives up on a server that does not answer soon. Winch, wasmtime's
//! baseline compiler, compiles in one pass several times faster, into slower code. So a plugin
//! whose Cranelift code is not in the cache is compiled by Winch, listed and callable at once,
//! and queued for the optimizer: a thread of lower priority that compiles it with Cranelift,
//! stores that code in the cache and swaps it in ([`Instances::upgrade`]). Calls running then
//! finish on Winch's code, the next ones run Cranelift's; clients see nothing but the speed.
//! The next start finds Cranelift's code in the cache and skips Winch. Before Cranelift starts,
//! the storer thread writes Winch's code to the cache, and moat's exit waits for that (see
//! [`crate::supply::cache::finish_writes`]): a moat that stops before Cranelift is done (a host
//! that lists tools and quits, `moat call`, which never optimizes) still starts warm the next
//! time, on Winch's code from the cache, and optimizes again. Both threads wait while a load
//! compiles: nothing is served before all its plugins are, so they come first.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Instant;

use anyhow::Result;
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::sandbox::host::{self, HostState};
use crate::sandbox::instances::Instances;
use crate::supply::cache::{Cache, Pending};
use crate::supply::source::{Digest, Fetched};

/// How plugins seen for the first time are compiled: by Winch, then (unless only the baseline
/// is wanted) by Cranelift in the background.
pub struct Tiers {
    baseline: Engine,
    linker: Linker<HostState>,
    /// Where plugins running Winch's code are sent: to the storer when there is a cache (which
    /// hands them on to the optimizer, if any), else to the optimizer; none when neither runs.
    queue: Option<Sender<Job>>,
    /// Whether they are optimized, and whether Winch's code is stored: a job is worth sending
    /// for either.
    optimizes: bool,
    stores: bool,
    /// Loads going on now, which the storer and the optimizer wait for: they want every CPU
    /// first.
    loads: Arc<Loads>,
}

/// How many loads are compiling now, and the optimizer's wait for none.
#[derive(Default)]
struct Loads {
    running: Mutex<usize>,
    none: Condvar,
}

impl Loads {
    fn wait_for_none(&self) {
        let running = self.running.lock().expect("loads lock");
        drop(
            self.none
                .wait_while(running, |n| *n > 0)
                .expect("loads lock"),
        );
    }
}

/// A load compiling: the optimizer waits until it is dropped.
pub(crate) struct Loading(Arc<Loads>);

impl Drop for Loading {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().expect("loads lock");
        *running -= 1;
        if *running == 0 {
            self.0.none.notify_all();
        }
    }
}

/// A plugin running Winch's code, to be given Cranelift's.
struct Job {
    plugin: Arc<str>,
    digest: Digest,
    wasm: Vec<u8>,
    /// Winch's code, when the cache does not hold it yet, and the write that moat's exit waits
    /// for until it is stored.
    unstored: Option<(Component, Pending)>,
    instances: Weak<Instances>,
    loaded: Instant,
}

/// How plugins become code: the engine they run on, the linker for it, the compiled-plugin
/// cache, and the tiers, if a plugin not in the cache runs Winch's code first.
pub struct Compiler<'a> {
    pub engine: &'a Engine,
    pub linker: &'a Linker<HostState>,
    pub cache: Option<&'a Cache>,
    pub tiers: Option<&'a Tiers>,
}

impl<'a> Compiler<'a> {
    /// `fetched` as code: Cranelift's from the cache when it is there, else Winch's when there
    /// are tiers and Winch can compile it, else Cranelift's compiled now (and stored).
    pub(crate) fn compile(&self, fetched: &Fetched) -> Result<Compiled<'a>> {
        let optimized = |component, from_cache| Compiled {
            component,
            engine: self.engine,
            linker: self.linker,
            baseline: false,
            from_cache,
        };
        if let Some(component) = self
            .cache
            .and_then(|cache| cache.cached(self.engine, &fetched.digest))
        {
            return Ok(optimized(component, true));
        }
        if let Some(tiers) = self.tiers {
            if let Some(component) = self
                .cache
                .and_then(|cache| cache.cached(&tiers.baseline, &fetched.digest))
            {
                return Ok(tiers.compiled(component, true));
            }
            match tiers.compile(&fetched.wasm) {
                Ok(compiled) => return Ok(compiled),
                Err(e) => tracing::debug!("Winch cannot compile {}: {e:#}", fetched.origin),
            }
        }
        let component = match self.cache {
            Some(cache) => cache.compile(self.engine, &fetched.wasm, &fetched.digest)?,
            None => Component::new(self.engine, &fetched.wasm).map_err(anyhow::Error::from)?,
        };
        Ok(optimized(component, false))
    }
}

/// What a plugin's component was compiled into.
pub(crate) struct Compiled<'a> {
    pub component: Component,
    /// The engine it was compiled for, and the linker for that engine.
    pub engine: &'a Engine,
    pub linker: &'a Linker<HostState>,
    /// Whether it is Winch's code, to be optimized.
    pub baseline: bool,
    /// Whether this code was taken from the cache rather than compiled now.
    pub from_cache: bool,
}

impl Tiers {
    /// Tiers for plugins that run on `engine`: Winch's code first (stored in `cache`), then
    /// Cranelift's, compiled in the background and stored in `cache`.
    pub fn new(engine: &Engine, cache: Option<Cache>) -> Result<Self> {
        let (to_optimizer, queue) = mpsc::channel();
        let mut linker = Linker::new(engine);
        host::add_to_linker(&mut linker)?;
        let loads = Arc::<Loads>::default();
        let (optimizer, optimizer_cache, optimizer_loads) =
            (engine.clone(), cache.clone(), loads.clone());
        std::thread::Builder::new()
            .name("moat-optimizer".into())
            .spawn(move || optimize(optimizer, linker, optimizer_cache, queue, &optimizer_loads))?;
        Self::with_queue(engine, cache, Some(to_optimizer), loads)
    }

    /// Winch's code only, never optimized: for a command that makes a call or two and exits
    /// (`moat call`, `moat inspect`), which Cranelift's time would only delay. Winch's code is
    /// still stored in `cache`, so that the next such command starts warm.
    pub fn baseline_only(engine: &Engine, cache: Option<Cache>) -> Result<Self> {
        Self::with_queue(engine, cache, None, Arc::default())
    }

    /// Tiers whose jobs go to the storer (when there is a cache), then to `optimizer`.
    fn with_queue(
        engine: &Engine,
        cache: Option<Cache>,
        optimizer: Option<Sender<Job>>,
        loads: Arc<Loads>,
    ) -> Result<Self> {
        let baseline = crate::sandbox::engine::new_baseline_engine(engine)?;
        let mut linker = Linker::new(&baseline);
        host::add_to_linker(&mut linker)?;
        let optimizes = optimizer.is_some();
        let stores = cache.is_some();
        let queue = match cache {
            Some(cache) => {
                let (jobs, queue) = mpsc::channel();
                let (engine, loads) = (baseline.clone(), loads.clone());
                std::thread::Builder::new()
                    .name("moat-cache-writer".into())
                    .spawn(move || store(&engine, &cache, queue, optimizer, &loads))?;
                Some(jobs)
            }
            None => optimizer,
        };
        Ok(Self {
            baseline,
            linker,
            queue,
            optimizes,
            stores,
            loads,
        })
    }

    /// Holds the optimizer back until the result is dropped: a load's Winch compiles come
    /// first, since the plugins are served only when all are done.
    pub(crate) fn loading(&self) -> Loading {
        *self.loads.running.lock().expect("loads lock") += 1;
        Loading(self.loads.clone())
    }

    /// Compiles `wasm` with Winch, or says why it cannot (the caller then uses Cranelift).
    pub(crate) fn compile(&self, wasm: &[u8]) -> Result<Compiled<'_>> {
        let component = Component::new(&self.baseline, wasm).map_err(anyhow::Error::from)?;
        Ok(self.compiled(component, false))
    }

    fn compiled(&self, component: Component, from_cache: bool) -> Compiled<'_> {
        Compiled {
            component,
            engine: &self.baseline,
            linker: &self.linker,
            baseline: true,
            from_cache,
        }
    }

    /// Queues the plugin that `instances` serve, loaded from `fetched` with Winch's code
    /// (`compiled`), for the cache (if its code is not there yet) and for Cranelift's.
    pub(crate) fn optimize(
        &self,
        plugin: &str,
        fetched: &Fetched,
        compiled: &Compiled<'_>,
        instances: &Arc<Instances>,
    ) {
        let Some(queue) = &self.queue else {
            return;
        };
        let unstored = (self.stores && !compiled.from_cache)
            .then(Pending::begin)
            .flatten()
            .map(|pending| (compiled.component.clone(), pending));
        if unstored.is_none() && !self.optimizes {
            return;
        }
        let job = Job {
            plugin: plugin.into(),
            digest: fetched.digest,
            wasm: if self.optimizes {
                fetched.wasm.clone()
            } else {
                Vec::new() // only Cranelift reads it
            },
            unstored,
            instances: Arc::downgrade(instances),
            loaded: Instant::now(),
        };
        if queue.send(job).is_err() {
            tracing::warn!(plugin, "the optimizer has stopped: it keeps Winch's code");
        }
    }
}

/// The storer thread: writes each queued plugin's Winch code to the cache (once for all the
/// plugins with the same bytes), then hands the plugin on to the optimizer, if there is one.
/// It is its own thread so that a plugin loaded while Cranelift compiles another is stored
/// at once: moat's exit waits for this, not for Cranelift.
fn store(
    baseline: &Engine,
    cache: &Cache,
    jobs: Receiver<Job>,
    optimizer: Option<Sender<Job>>,
    loads: &Loads,
) {
    lower_priority();
    while let Ok(job) = jobs.recv() {
        loads.wait_for_none();
        let mut batch = vec![job];
        batch.extend(jobs.try_iter());
        let mut stored = Vec::new();
        for job in &mut batch {
            if let Some((winch, _pending)) = job.unstored.take()
                && !stored.contains(&job.digest)
            {
                cache.store(baseline, &job.digest, &winch);
                stored.push(job.digest);
            }
        }
        // The serialized code is freed; without this an idle server would keep it.
        crate::memory::release_freed();
        for job in batch {
            if let Some(optimizer) = &optimizer
                && optimizer.send(job).is_err()
            {
                tracing::warn!("the optimizer has stopped: plugins keep Winch's code");
                return;
            }
        }
    }
}

/// The optimizer thread: compiles each queued plugin with Cranelift (once for all the plugins
/// with the same bytes), stores the code and swaps it in, until the queue is dropped.
fn optimize(
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<Cache>,
    jobs: Receiver<Job>,
    loads: &Loads,
) {
    lower_priority();
    // wasmtime compiles a component's functions in parallel on the current rayon pool: this
    // one, whose threads yield to calls as this thread does.
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("moat-optimizer-{i}"))
        .start_handler(|_| lower_priority())
        .build();
    let pool = match pool {
        Ok(pool) => pool,
        Err(e) => {
            tracing::warn!("plugins keep Winch's code: no optimizer threads ({e})");
            return;
        }
    };
    let mut queue: Vec<Job> = Vec::new();
    loop {
        if queue.is_empty() {
            // Idle until the next job: the compiling threads' freed memory goes back first.
            pool.broadcast(|_| crate::memory::release_freed());
            crate::memory::release_freed();
            match jobs.recv() {
                Ok(job) => queue.push(job),
                Err(_) => return,
            }
        }
        loads.wait_for_none();
        queue.extend(jobs.try_iter());
        let digest = queue[0].digest;
        let (same, rest): (Vec<Job>, Vec<Job>) =
            queue.drain(..).partition(|job| job.digest == digest);
        queue = rest;
        let waiting: Vec<(Job, Arc<Instances>)> = same
            .into_iter()
            .filter_map(|job| job.instances.upgrade().map(|instances| (job, instances)))
            .collect();
        let Some((first, _)) = waiting.first() else {
            continue; // every plugin with these bytes was unloaded meanwhile
        };
        let compiled = pool.install(|| match &cache {
            Some(cache) => cache.compile(&engine, &first.wasm, &digest),
            None => Component::new(&engine, &first.wasm).map_err(anyhow::Error::from),
        });
        let pre = compiled.and_then(|component| {
            linker
                .instantiate_pre(&component)
                .map_err(anyhow::Error::from)
        });
        for (job, instances) in waiting {
            let plugin = &*job.plugin;
            match &pre {
                Ok(pre) => {
                    instances.upgrade(pre.clone());
                    tracing::info!(
                        plugin,
                        "optimized code in use, {} ms after the plugin was loaded",
                        job.loaded.elapsed().as_millis()
                    );
                }
                Err(e) => tracing::warn!(
                    plugin,
                    "keeps Winch's code: Cranelift could not compile it: {e:#}"
                ),
            }
        }
    }
}

/// Lowers the calling thread's priority (nice 10): compiling ahead gets about a tenth of a CPU
/// that calls want, and all of one they leave idle.
fn lower_priority() {
    // SAFETY: a plain system call; on Linux `who = 0` names the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) } != 0 {
        tracing::debug!(
            "the optimizer keeps its priority: {}",
            std::io::Error::last_os_error()
        );
    }
}
