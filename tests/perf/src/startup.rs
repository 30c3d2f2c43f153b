//! P3: moat's start-up, from process start to its first `tools/list` answer, with an empty
//! compile cache (cold) and a filled one (warm), beside the echo baselines'. A cold start is timed
//! further: to an answered call of every plugin, and to optimized code in every plugin. moat
//! compiles a plugin it has not seen with a fast baseline compiler first and swaps Cranelift's code
//! in later, logging `optimized code in use` with the plugin's name; a moat that does not log it
//! leaves that figure missing, not the run failed.
//!
//! Also the warm compile cache every measurement but P3's cold starts runs in: each plugin is put
//! in it, and moat is waited for until it runs the plugin's optimized code, before anything is
//! measured there.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use serde_json::{Value, json};

use crate::logwatch::{Mark, Marks};
use crate::report::{Row, Target};
use crate::stats::{median, millis};
use crate::stdio::StdioServer;
use crate::{Bench, MANY_PLUGINS, MESSAGE, Plugin, check_echo, echo_tool};

/// What moat logs, with the plugin's name, once a plugin it compiled cold runs optimized code.
const OPTIMIZED: &str = "optimized code in use";

/// The targets with [`MANY_PLUGINS`]: a cold start's first `tools/list` answer, its answers from
/// every plugin, and a warm start's first `tools/list` answer.
const MANY_COLD_LISTED_MS: f64 = 3000.0;
const MANY_COLD_CALLABLE_MS: f64 = 5000.0;
const MANY_WARM_LISTED_MS: f64 = 100.0;

/// The figures of one cold start, from process start.
struct ColdStart {
    listed: Duration,
    callable: Duration,
    /// `None` when not every plugin logged it in time.
    optimized: Option<Duration>,
}

impl Bench {
    /// P3: start-up, cold and warm, with 1 and [`MANY_PLUGINS`] plugins.
    pub(crate) fn startup(&mut self) -> Result<()> {
        let mut baselines = Vec::new();
        for baseline in &self.baselines {
            let log = self.log(&format!("{}-start", baseline.name));
            let times: Vec<f64> = (0..self.settings.warm_starts)
                .map(|_| {
                    let (time, tools) = time_to_tools(baseline.command(), &log)?;
                    echo_tool(&tools)?;
                    Ok(millis(time))
                })
                .collect::<Result<_>>()?;
            baselines.push((baseline.name, median(times)));
        }
        for count in [1, MANY_PLUGINS] {
            let (config, plugins) = self.config(count)?;
            let args = ["serve", "--config", &config];
            // One echo server against another: the baselines stand beside 1 plugin only.
            let (beside, many) = if count == 1 {
                (&baselines[..], false)
            } else {
                (&[][..], true)
            };
            let text = if many {
                format!("{count} plugins ({})", self.settings.many_kinds.join(", "))
            } else {
                "1 plugin".to_string()
            };
            let cold_starts = if !many || self.settings.cold_many {
                self.settings.cold_starts
            } else {
                0
            };
            let (mut listed, mut callable, mut optimized) = (Vec::new(), Vec::new(), Vec::new());
            for run in 0..cold_starts {
                let cache = self.work.join(format!("cache-cold-{count}-{run}"));
                let log = self.log(&format!("moat-cold-{count}"));
                let start = self.cold_start(&args, &cache, &plugins, &log)?;
                let in_use = match start.optimized {
                    Some(time) => format!("{:.0} ms", millis(time)),
                    None => "missing".into(),
                };
                eprintln!(
                    "moat-perf:   {text}, cold: listed {:.0} ms, all called {:.0} ms, \
                     optimized {in_use}",
                    millis(start.listed),
                    millis(start.callable)
                );
                listed.push(millis(start.listed));
                callable.push(millis(start.callable));
                optimized.extend(start.optimized.map(millis));
            }
            if cold_starts > 0 {
                let target = |ms| {
                    if many {
                        Target::AtMost(ms)
                    } else {
                        Target::None
                    }
                };
                self.list_rows(
                    format!(
                        "start → first tools/list, {text}, cold cache (median of {cold_starts})"
                    ),
                    median(listed),
                    beside,
                    target(MANY_COLD_LISTED_MS),
                );
                self.rows.push(Row {
                    id: "P3",
                    what: format!(
                        "start → every plugin answered one call, {text}, cold cache (median of \
                         {cold_starts})"
                    ),
                    unit: "ms",
                    moat: Some(median(callable)),
                    baseline: None,
                    target: target(MANY_COLD_CALLABLE_MS),
                });
                let of = match optimized.len() {
                    0 => format!("not logged by moat in {:?}", self.settings.optimized_wait),
                    n => format!("median of {n}"),
                };
                self.rows.push(Row {
                    id: "P3",
                    what: format!(
                        "start → optimized code in use in every plugin, {text}, cold cache ({of})"
                    ),
                    unit: "ms",
                    moat: (!optimized.is_empty()).then(|| median(optimized)),
                    baseline: None,
                    target: Target::None,
                });
            }

            self.fill_warm_cache(&plugins)?;
            let log = self.log(&format!("moat-warm-{count}"));
            let mut warm = Vec::new();
            for _ in 0..self.settings.warm_starts {
                let (time, tools) =
                    time_to_tools(self.moat_command(&args, &self.warm_cache()), &log)?;
                check_tools(&tools, &plugins)?;
                warm.push(millis(time));
            }
            let target = if many {
                Target::AtMost(MANY_WARM_LISTED_MS)
            } else {
                Target::None
            };
            self.list_rows(
                format!(
                    "start → first tools/list, {text}, warm cache (median of {})",
                    warm.len()
                ),
                median(warm),
                beside,
                target,
            );
        }
        Ok(())
    }

    /// A start → first `tools/list` figure: a row beside each of `baselines`, or one alone.
    fn list_rows(
        &mut self,
        what: String,
        moat: f64,
        baselines: &[(&'static str, f64)],
        target: Target,
    ) {
        let beside: Vec<_> = match baselines {
            [] => vec![None],
            _ => baselines.iter().copied().map(Some).collect(),
        };
        for baseline in beside {
            self.rows.push(Row {
                id: "P3",
                what: what.clone(),
                unit: "ms",
                moat: Some(moat),
                baseline,
                target,
            });
        }
    }

    /// One start with an empty compile cache, timed to the first `tools/list` answer, to an
    /// answered call of every plugin (one after another, after the list), and to optimized code
    /// in every plugin.
    fn cold_start(
        &mut self,
        args: &[&str],
        cache: &Path,
        plugins: &[Plugin],
        log: &Path,
    ) -> Result<ColdStart> {
        let start = Instant::now();
        let (mut server, marks) =
            StdioServer::spawn_watched(self.moat_command(args, cache), log, OPTIMIZED)?;
        server.initialize()?;
        let tools = server.list_tools()?;
        let listed = start.elapsed();
        check_tools(&tools, plugins)?;
        for plugin in plugins {
            let (tool, arguments) = first_call(plugin)?;
            let result = server.call_tool(&tool, arguments)?;
            if plugin.kind == "echo" {
                check_echo(&result)?;
            }
        }
        let callable = start.elapsed();
        let optimized = self
            .wait_optimized(&marks, plugins)
            .map(|at| at.duration_since(start));
        Ok(ColdStart {
            listed,
            callable,
            optimized,
        })
    }

    /// Puts `plugins` in the warm compile cache, unless they are there already, and waits until
    /// moat runs their optimized code; then asks moat to exit, so that it finishes what it
    /// writes to the cache.
    pub(crate) fn fill_warm_cache(&mut self, plugins: &[Plugin]) -> Result<()> {
        let cold: Vec<Plugin> = plugins
            .iter()
            .filter(|p| !self.warmed.contains(&p.path))
            .cloned()
            .collect();
        if cold.is_empty() {
            return Ok(());
        }
        let config = self.write_config("warm-fill.toml", &cold)?;
        let (mut server, marks) = StdioServer::spawn_watched(
            self.moat_command(&["serve", "--config", &config], &self.warm_cache()),
            &self.log("moat-warm-fill"),
            OPTIMIZED,
        )?;
        server.initialize()?;
        check_tools(&server.list_tools()?, &cold)?;
        self.wait_optimized(&marks, &cold);
        server.close(Duration::from_secs(10));
        self.warmed.extend(cold.into_iter().map(|p| p.path));
        Ok(())
    }

    /// [`Bench::fill_warm_cache`] with one bundled plugin.
    pub(crate) fn warm_bundled(&mut self, kind: &'static str) -> Result<()> {
        let plugin = self.bundled(kind)?;
        self.fill_warm_cache(&[plugin])
    }

    /// When the last of `plugins` logged that it runs optimized code, waited for up to the
    /// timeout; `None` if not all did. A moat that logs no such line at all in that time is not
    /// waited for again in this run: it compiles with Cranelift before answering (a moat without
    /// tiered compilation), or does not say when it swaps.
    fn wait_optimized(&mut self, marks: &Marks, plugins: &[Plugin]) -> Option<Instant> {
        if self.swap_logged == Some(false) {
            return None;
        }
        let wait = self.settings.optimized_wait;
        let last = marks.wait(Instant::now() + wait, |marks| {
            last_optimized(marks, plugins)
        });
        let note = match (last, marks.count()) {
            (Some(_), _) => {
                self.swap_logged = Some(true);
                return last;
            }
            (None, 0) => {
                self.swap_logged = Some(false);
                format!(
                    "moat logged no `{OPTIMIZED}` line within {wait:?} of a cold start: the \
                     figures of optimized code are missing, and no later start waits for them"
                )
            }
            (None, seen) => format!(
                "only {seen} `{OPTIMIZED}` lines for {} plugins came within {wait:?} of a cold start",
                plugins.len()
            ),
        };
        eprintln!("moat-perf:   {note}");
        self.notes.push(note);
        None
    }
}

/// Starts an MCP server on stdio and times it to its first `tools/list` answer.
fn time_to_tools(command: Command, log: &Path) -> Result<(Duration, Vec<Value>)> {
    let start = Instant::now();
    let mut server = StdioServer::spawn(command, log)?;
    server.initialize()?;
    let tools = server.list_tools()?;
    Ok((start.elapsed(), tools))
}

/// Every configured plugin must have brought its tools.
fn check_tools(tools: &[Value], plugins: &[Plugin]) -> Result<()> {
    for plugin in plugins {
        let prefix = format!("{}_", plugin.name);
        ensure!(
            tools
                .iter()
                .any(|t| t["name"].as_str().is_some_and(|n| n.starts_with(&prefix))),
            "plugin {} has no tools in the list ({} tools)",
            plugin.name,
            tools.len()
        );
    }
    Ok(())
}

/// A cheap call of a plugin, by what it is a copy of.
fn first_call(plugin: &Plugin) -> Result<(String, Value)> {
    let name = &plugin.name;
    Ok(match plugin.kind {
        "echo" => (format!("{name}_echo"), json!({"message": MESSAGE})),
        "text" => (format!("{name}_base64_encode"), json!({"text": MESSAGE})),
        "time" => (format!("{name}_now"), json!({})),
        other => bail!("no first call for a copy of {other}"),
    })
}

/// When the last of `plugins` logged its optimized code, if every one has.
fn last_optimized(marks: &[Mark], plugins: &[Plugin]) -> Option<Instant> {
    plugins
        .iter()
        .map(|p| marks.iter().find(|m| names(&m.line, &p.name)).map(|m| m.at))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .max()
}

/// Whether `line` has `name` as a word of its own: `echo01` is not in `echo010` or `echo01_echo`.
fn names(line: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    line.match_indices(name).any(|(at, _)| {
        !word(line[..at].chars().next_back()) && !word(line[at + name.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_plugin_is_named_as_a_word() {
        let line = r#"INFO moat: optimized code in use plugin="echo01" tools=echo01_echo"#;
        assert!(names(line, "echo01"));
        assert!(!names(line, "echo"));
        assert!(!names("optimized code in use plugin=echo010", "echo01"));
        assert!(names("optimized code in use: echo", "echo"));
    }
}
