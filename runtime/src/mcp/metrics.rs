//! What moat has done, in Prometheus' text format at `/metrics` (Streamable HTTP only): calls by
//! plugin, tool and outcome, their durations, the accesses the sandbox denied, requests refused
//! for their credential or a quota, reloads, and what is served and running now (calls running
//! and queued per plugin, instances ready in the pool).
//!
//! Labels name only what the operator configured (plugins and their tools): a call of a tool
//! nobody serves is counted without its name, so a client cannot grow the series without bound.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::mcp::audit::Outcome;
use crate::plugin::registry::Registry as Served;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    plugin: String,
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

type Durations = Family<ToolLabels, Histogram, fn() -> Histogram>;

/// moat's series, shared by every session.
pub struct Metrics {
    /// Written once more when replicas share state ([`Metrics::add_cluster`]), read by each scrape.
    registry: std::sync::RwLock<Registry>,
    calls: Family<CallLabels, Counter>,
    durations: Durations,
    denials: Family<PluginLabels, Counter>,
    plugins: Gauge,
    tools: Gauge,
    running: Family<PluginLabels, Gauge>,
    queued: Family<PluginLabels, Gauge>,
    instances_ready: Gauge,
    auth_failures: Family<KindLabels, Counter>,
    quota_rejections: Family<KindLabels, Counter>,
    reloads: Family<KindLabels, Counter>,
}

/// From 0.5 ms to about 2 min, each bucket four times the one before.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 4.0, 10))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("moat");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "Tool calls, by plugin, tool and outcome",
            calls.clone(),
        );
        let durations: Durations = Family::new_with_constructor(call_buckets);
        registry.register(
            "call_duration_seconds",
            "How long tool calls took, from the request to the answer",
            durations.clone(),
        );
        let denials = Family::<PluginLabels, Counter>::default();
        registry.register(
            "denials",
            "Accesses the sandbox refused a plugin (network, sockets)",
            denials.clone(),
        );
        let plugins = Gauge::default();
        registry.register("plugins_loaded", "Plugins served now", plugins.clone());
        let tools = Gauge::default();
        registry.register("tools_served", "Tools served now", tools.clone());
        let running = Family::<PluginLabels, Gauge>::default();
        registry.register(
            "calls_running",
            "Calls running now, by plugin (each plugin has max_concurrent_calls slots)",
            running.clone(),
        );
        let queued = Family::<PluginLabels, Gauge>::default();
        registry.register(
            "calls_queued",
            "Calls waiting for one of their plugin's slots now, by plugin",
            queued.clone(),
        );
        let instances_ready = Gauge::default();
        registry.register(
            "instances_ready",
            "Instances made ahead of calls and waiting in the pool, all plugins together",
            instances_ready.clone(),
        );
        let pool_slots = Gauge::<i64>::default();
        pool_slots.set(i64::from(crate::sandbox::engine::MAX_LIVE_INSTANCES));
        registry.register(
            "instance_pool_slots",
            "Instances the pooling allocator holds room for (running and ready together)",
            pool_slots,
        );
        let auth_failures = Family::<KindLabels, Counter>::default();
        registry.register(
            "auth_failures",
            "HTTP requests refused for their credential, by kind (missing, invalid, \
             insufficient_scope, unavailable)",
            auth_failures.clone(),
        );
        let quota_rejections = Family::<KindLabels, Counter>::default();
        registry.register(
            "quota_rejections",
            "HTTP requests refused by a quota, by kind (rate, concurrency, sessions)",
            quota_rejections.clone(),
        );
        let reloads = Family::<KindLabels, Counter>::default();
        registry.register(
            "reloads",
            "Reloads of what is served, by kind (ok, failed)",
            reloads.clone(),
        );
        Self {
            registry: std::sync::RwLock::new(registry),
            calls,
            durations,
            denials,
            plugins,
            tools,
            running,
            queued,
            instances_ready,
            auth_failures,
            quota_rejections,
            reloads,
        }
    }
}

impl Metrics {
    /// Counts one call of `tool` (its MCP name) of `plugin`, or of a tool nobody serves.
    pub fn record_call(
        &self,
        plugin: Option<&str>,
        tool: &str,
        outcome: Outcome,
        took: Duration,
        denials: usize,
    ) {
        let (plugin, tool) = match plugin {
            Some(plugin) => (plugin.to_string(), tool.to_string()),
            None => (String::new(), String::new()),
        };
        self.calls
            .get_or_create(&CallLabels {
                plugin: plugin.clone(),
                tool: tool.clone(),
                outcome: outcome.as_str(),
            })
            .inc();
        if denials > 0 {
            self.denials
                .get_or_create(&PluginLabels {
                    plugin: plugin.clone(),
                })
                .inc_by(denials as u64);
        }
        self.durations
            .get_or_create(&ToolLabels { plugin, tool })
            .observe(took.as_secs_f64());
    }

    /// Counts a request refused for its credential; `kind` is the refusal's.
    pub fn record_auth_failure(&self, kind: &'static str) {
        self.auth_failures.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a request a quota refused.
    pub fn record_quota_rejection(&self, kind: &'static str) {
        self.quota_rejections
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Counts a reload, `ok` or `failed`.
    pub fn record_reload(&self, ok: bool) {
        let kind = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&KindLabels { kind }).inc();
    }

    /// Adds the `moat_cluster_*` series of the replicas' shared state.
    pub fn add_cluster(&self, cluster: &crate::cluster::Cluster) {
        cluster.register(&mut self.registry.write().expect("metrics registry lock"));
    }

    /// Every series as Prometheus reads it, with what `served` holds now.
    pub fn render(&self, served: &Served) -> String {
        self.plugins.set(served.plugins().len() as i64);
        self.tools.set(served.tools().count() as i64);
        // A reload drops plugins: their gauges go with them.
        self.running.clear();
        self.queued.clear();
        for plugin in served.plugins() {
            let labels = PluginLabels {
                plugin: plugin.name.to_string(),
            };
            self.running
                .get_or_create(&labels)
                .set(plugin.calls_running() as i64);
            self.queued
                .get_or_create(&labels)
                .set(plugin.calls_queued() as i64);
        }
        self.instances_ready
            .set(crate::sandbox::instances::ready_instances() as i64);
        // OpenMetrics text, ending with `# EOF` and a newline.
        let mut text = String::new();
        let registry = self.registry.read().expect("metrics registry lock");
        encode(&mut text, &registry).expect("writing to a String cannot fail");
        text
    }
}
