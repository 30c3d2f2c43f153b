//! Calling a tool: a call slot, a fresh instance, the arguments in, the result out, and what
//! a failed call tells its caller.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Result;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use tokio::sync::SemaphorePermit;
use wasmtime::component::Val;

use std::sync::Arc;

use super::forms::Typed;
use super::{CallError, CallOutcome, Exchange, Export, Plugin, Runs, Tool};
use crate::sandbox::guest_log::Severity;
use crate::sandbox::host::{Client, Detached, EventSink, InputRequired, MissingCapability};
use crate::sandbox::instances::{Fresh, MakeError};
use crate::sandbox::limits::DeadlineExceeded;
use crate::sandbox::network::Denials;

impl Plugin {
    /// Runs `tool` with `args` in a new instance.
    pub async fn call(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        events: EventSink,
    ) -> Result<CallToolResult, CallError> {
        self.call_outcome(tool, args, events).await.result
    }

    /// Runs `tool` with `args` in a new instance, and tells what the host denied it on the way.
    /// A call that was denied network access is a tool error naming each denial, even when the
    /// guest swallowed its own error.
    pub async fn call_outcome(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        events: EventSink,
    ) -> CallOutcome {
        self.call_asking(
            tool,
            args,
            Exchange {
                events,
                client: None,
                credentials: None,
                reach: None,
            },
        )
        .await
    }

    /// Runs `tool` as [`Plugin::call_outcome`] does, sending its reports and questions through
    /// `exchange`.
    pub async fn call_asking(
        &self,
        tool: &Tool,
        args: Option<&JsonObject>,
        exchange: Exchange,
    ) -> CallOutcome {
        let mut denials = Denials::default();
        let result = match &tool.runs {
            Runs::Function {
                check,
                params,
                returns,
                index,
            } => match Tool::arguments(check.as_deref(), params, args) {
                Ok(params) => {
                    let export = Export {
                        name: &tool.name,
                        index: *index,
                    };
                    self.invoke(export, &params, exchange, &mut denials)
                        .await
                        .and_then(|results| {
                            returns
                                .render(results.first())
                                .map_err(CallError::BadResult)
                        })
                }
                Err(error) => Err(CallError::InvalidArguments(error)),
            },
            Runs::Served { name, check } => {
                self.call_served(&tool.name, name, check, args, exchange, &mut denials)
                    .await
            }
        };
        let (shown, denials): (Vec<String>, Vec<String>) = denials
            .take()
            .into_iter()
            .map(|denial| (denial.shown, denial.recorded))
            .unzip();
        let result = result.map(|r| with_denials(self.name_references(r, tool), &shown));
        CallOutcome { result, denials }
    }

    /// A tool error's text, naming the plugin's functions and the tool's parameters as the
    /// model knows them (see [`crate::wit::references::References`]).
    fn name_references(&self, mut result: CallToolResult, tool: &Tool) -> CallToolResult {
        if result.is_error != Some(true) {
            return result;
        }
        let names = tool.argument_names();
        let params: Vec<&str> = names.iter().map(String::as_str).collect();
        for block in &mut result.content {
            if let ContentBlock::Text(text) = block
                && let Cow::Owned(new) = self.references.rewrite(&text.text, &params)
            {
                text.text = new;
            }
        }
        result
    }

    /// The bytes moat has written to its log for this plugin's guests (their `log` messages,
    /// output and denials) since it was loaded.
    pub fn logged_bytes(&self) -> u64 {
        self.instances.log().logged_bytes()
    }

    /// Calls one export with `params` in a fresh instance, under the plugin's limits, and gives
    /// back what it returned. Every request a plugin serves (a tool call, a prompt, a resource
    /// read, a completion) goes through here.
    pub(super) async fn invoke(
        &self,
        export: Export<'_>,
        params: &[Val],
        exchange: Exchange,
        denials: &mut Denials,
    ) -> Result<Vec<Val>, CallError> {
        let limits = &self.limits;
        let _slot = self.take_slot().await?;
        let alone = self.slots.available_permits() + 1 >= limits.max_concurrent_calls;
        let deadline = Instant::now() + limits.deadline;
        let (mut store, instance, output, code) = match self.instances.take(deadline, alone).await {
            Ok(Fresh {
                store,
                instance,
                output,
                code,
                ..
            }) => (store, instance, output, code),
            Err(MakeError::Setup(message)) => return Err(CallError::Setup(message)),
            Err(MakeError::Instantiate { error, stderr }) => {
                return Err(self.failure(&error, &stderr));
            }
        };
        store.data_mut().set_events(exchange.events);
        // A plugin's own forms get their schema, and their answers a check, on the way.
        let client = match exchange.client {
            Some(inner) if !self.forms.is_empty() => Some(Arc::new(Typed {
                inner,
                forms: self.forms.clone(),
            }) as Arc<dyn Client>),
            client => client,
        };
        store.data_mut().set_client(client);
        store.data_mut().set_credentials(exchange.credentials);
        store.data_mut().set_reach(exchange.reach);
        *denials = store.data().denials();

        let run = async {
            let func = instance
                .get_func(&mut store, code.export(export.index))
                .expect("the export was found in the component's type");
            let mut results = vec![Val::Bool(false); func.ty(&store).results().len()];
            func.call_async(&mut store, params, &mut results).await?;
            wasmtime::Result::<_>::Ok(results)
        };
        // The epoch stops a guest that computes; this timer stops one blocked in the host (a
        // sleep, a slow read, a question to the client) at the same deadline.
        let outcome = tokio::time::timeout_at(deadline.into(), run)
            .await
            .unwrap_or_else(|_| Err(DeadlineExceeded.into()));
        // The call's reports end here (the server flushes them before answering); the used store
        // goes away, and the next call's instance is made, after the answer.
        // A request that waits for the caller to give a credential ends the call with its
        // question, whatever the guest made of the refusal.
        let pending_input = store.data().take_pending_input();
        store.data_mut().set_events(None);
        store.data_mut().set_client(None);
        store.data_mut().set_credentials(None);
        store.data_mut().set_reach(None);
        self.instances.replace(store);

        let stdout = String::from_utf8_lossy(&output.stdout.contents()).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr.contents()).into_owned();
        let log = self.instances.log();
        for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            if !text.is_empty() {
                let line = format!("{}: guest {stream}: {}", export.name, text.trim_end());
                log.write(Severity::Info, &line);
            }
        }
        log.report_dropped();
        if let Some(InputRequired(questions)) = pending_input {
            return Err(CallError::InputRequired(questions));
        }
        let results = outcome.map_err(|e| self.failure(&e, &stderr))?;
        let size: usize = results.iter().map(value_size).sum();
        if size > limits.max_result_bytes {
            return Err(CallError::BadResult(format!(
                "it is {size} bytes, more than the {} bytes allowed",
                limits.max_result_bytes
            )));
        }
        Ok(results)
    }

    /// Why a call that ended in an error failed, for the client.
    fn failure(&self, error: &wasmtime::Error, stderr: &str) -> CallError {
        if let Some(InputRequired(questions)) = error.downcast_ref::<InputRequired>() {
            return CallError::InputRequired(questions.clone());
        }
        if error.downcast_ref::<Detached>().is_some() {
            return CallError::Detached;
        }
        if let Some(&MissingCapability(capability)) = error.downcast_ref::<MissingCapability>() {
            return CallError::MissingCapability(capability);
        }
        if error.downcast_ref::<DeadlineExceeded>().is_some() {
            return CallError::DeadlineExceeded(self.limits.deadline);
        }
        if let (Some(units), Some(wasmtime::Trap::OutOfFuel)) =
            (self.limits.fuel, error.downcast_ref::<wasmtime::Trap>())
        {
            return CallError::OutOfFuel(units);
        }
        let hostcall_fuel_spent = error
            .chain()
            .any(|cause| cause.to_string().contains("fuel allocated for hostcalls"));
        if hostcall_fuel_spent {
            return CallError::BadResult(format!(
                "the guest handed over more than the {} bytes allowed at once",
                self.limits.max_result_bytes
            ));
        }
        CallError::Trap {
            message: trap_message(error),
            stderr: last_lines(stderr, 10),
        }
    }

    /// Waits for one of the plugin's call slots, in a bounded queue: when the queue is full, or the
    /// wait outlasts the call's deadline, the call fails instead of piling up.
    async fn take_slot(&self) -> Result<SemaphorePermit<'_>, CallError> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        let busy = || CallError::Busy {
            running: self.limits.max_concurrent_calls,
            queued: self.queued.load(Ordering::Relaxed),
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.limits.max_queued_calls {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(busy());
        }
        let permit = tokio::time::timeout(self.limits.deadline, self.slots.acquire()).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(busy()),
        }
    }
}

/// A result turned into a tool error that names the call's denials first, then whatever the
/// guest itself answered.
fn with_denials(result: CallToolResult, denials: &[String]) -> CallToolResult {
    if denials.is_empty() {
        return result;
    }
    let mut content = vec![rmcp::model::ContentBlock::text(denials.join("\n"))];
    content.extend(result.content);
    CallToolResult::error(content)
}

/// Roughly how many bytes a value takes once it is JSON: enough to refuse a giant result before
/// it is copied again.
fn value_size(val: &Val) -> usize {
    match val {
        Val::String(s) => s.len() + 2,
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            items.iter().map(value_size).sum::<usize>() + items.len() + 2
        }
        Val::Record(fields) => fields
            .iter()
            .map(|(name, v)| name.len() + 4 + value_size(v))
            .sum(),
        Val::Map(entries) => entries
            .iter()
            .map(|(k, v)| value_size(k) + value_size(v) + 2)
            .sum(),
        Val::Variant(name, payload) => name.len() + 20 + payload.as_deref().map_or(0, value_size),
        Val::Option(inner) => inner.as_deref().map_or(4, value_size),
        Val::Result(Ok(inner) | Err(inner)) => 8 + inner.as_deref().map_or(4, value_size),
        Val::Flags(names) => names.iter().map(|n| n.len() + 3).sum(),
        Val::Enum(name) => name.len() + 2,
        _ => 8,
    }
}

/// A trap's cause, without wasmtime's backtrace noise.
fn trap_message(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        return trap.to_string();
    }
    // The outermost layer is often only the wasm backtrace; the cause (such as "forcing trap
    // when growing memory to …") sits deeper in the chain.
    let mut message = error
        .chain()
        .map(|cause| cause.to_string())
        .find(|text| !text.starts_with("error while executing at wasm backtrace"))
        .unwrap_or_else(|| error.to_string());
    if message.contains("maximum concurrent") {
        message.push_str(" (too many calls at once; try again)");
    }
    message
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
