//! P8: what a question to the client costs a 2026-07-28 caller. The `conformance` plugin's
//! `test_input_required_result_elicitation` asks one question: its first call ends with
//! `input_required` and a sealed state, and the call that brings the answer opens the state and
//! replays the guest in a fresh instance. Both rounds together, over stdio, against one plain
//! call of the same plugin (`test_simple_text`); calls alternate.

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use std::time::Instant;

use crate::Bench;
use crate::report::{Row, Target};
use crate::stats::{interleaved, micros};
use crate::stdio::StdioServer;

/// What every 2026-07-28 request of P8 carries: a client that can be asked a form.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "moat-perf", "version": "0"},
    })
}

impl Bench {
    /// P8: a call that asks one question (both rounds) against a plain call.
    pub(crate) fn asking_round_trip(&mut self) -> Result<()> {
        self.warm_bundled("conformance")?;
        let plugin = self.plugin("conformance").canonicalize()?;
        let config = self.work.join("asking.toml");
        std::fs::write(&config, format!("[plugins.test]\npath = {plugin:?}\n"))?;
        let config = config.to_str().context("a non-UTF-8 temp folder")?;
        let mut moat = StdioServer::spawn(
            self.moat_command(&["serve", "--config", config], &self.warm_cache()),
            &self.log("moat-asking"),
        )?;
        let call = |moat: &mut StdioServer, name: &str, extra: Value| -> Result<Value> {
            let mut params = json!({"name": name, "arguments": {}, "_meta": meta()});
            if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
                params.extend(extra);
            }
            moat.request("tools/call", params)
        };
        let answer = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
        let calls = self.settings.stdio_calls / 5;
        let [asked, plain] = interleaved(calls, |which| {
            let start = Instant::now();
            if which == 0 {
                let asked = call(
                    &mut moat,
                    "test_input_required_result_elicitation",
                    json!({}),
                )?;
                ensure!(
                    asked["resultType"] == "input_required",
                    "no question: {asked}"
                );
                let state = asked["requestState"].clone();
                let extra = json!({"inputResponses": answer, "requestState": state});
                let done = call(&mut moat, "test_input_required_result_elicitation", extra)?;
                ensure!(
                    done["content"][0]["text"] == "Hello, Ada!",
                    "the answered call said {done}"
                );
            } else {
                let plain = call(&mut moat, "test_simple_text", json!({}))?;
                ensure!(plain["content"][0]["type"] == "text", "{plain}");
            }
            Ok(start.elapsed())
        })?;
        self.rows.push(Row {
            id: "P8",
            what: format!(
                "a 2026-07-28 call that asks one question, both rounds, p50 ({} each)",
                asked.count
            ),
            unit: "µs",
            moat: Some(micros(asked.p50)),
            baseline: Some(("one plain call", micros(plain.p50))),
            target: Target::None,
        });
        Ok(())
    }
}
