//! P13: what Cedar policies cost a call: P2's load (64 sessions over Streamable HTTP) on a moat
//! deciding every call by a set of 20 policies, against the same moat with none, rounds
//! alternating. The set is what an enterprise writes: group, scope and claim conditions, argument
//! conditions on the tool called, annotation conditions and `reach` rules, every one of which
//! the authorizer evaluates on each call.

use anyhow::{Context, Result};

use crate::http::{HttpServer, free_addr};
use crate::report::{Row, Target};
use crate::stats::median;
use crate::{Bench, CLIENTS};

/// The policies; the caller (the local token's `local`) is permitted echo by one of them.
fn twenty_policies() -> String {
    let mut text = String::from(
        r#"@id("local-echoes")
permit (principal, action == Moat::Action::"call_tool:echo_echo", resource)
when { principal.name == "local" && principal.authenticated_by == "local-token" };

@id("no-secrets")
forbid (principal, action == Moat::Action::"call_tool:echo_echo", resource)
when { context.arguments.message like "*secret*" };

@id("no-destructive-for-contractors")
forbid (principal in Moat::Group::"contractors", action in Moat::Action::"call_tool", resource)
when { resource.annotations.destructive };

@id("reach-intranet")
permit (principal in Moat::Group::"engineers", action == Moat::Action::"reach", resource)
when { resource.host like "*.intranet.example" };

@id("office-hours")
forbid (principal in Moat::Group::"interns", action in Moat::Action::"call_tool", resource)
unless { context.time.toTime() >= duration("9h") && context.time.toTime() < duration("17h") };
"#,
    );
    for n in 0..15 {
        text += &format!(
            r#"
@id("team-{n}")
permit (principal in Moat::Group::"team-{n}", action == Moat::Action::"call_tool:echo_repeat", resource)
when {{ principal.scopes.contains("tools") && context.arguments.times < {n} && context.arguments.message like "team-{n}*" }};
"#
        );
    }
    text
}

impl Bench {
    fn policy_server(&self, name: &str, policies: Option<&str>) -> Result<HttpServer> {
        let mut extra = String::new();
        if let Some(policies) = policies {
            let file = self.work.join(format!("{name}.cedar"));
            std::fs::write(&file, policies)?;
            extra = format!(
                "[policy]\ncedar = [{:?}]\n",
                file.to_str().context("a non-UTF-8 path")?
            );
        }
        self.echo_server(name, &extra)
    }

    /// A moat serving the bundled echo plugin over HTTP, with `extra` tables in its moat.toml.
    pub(crate) fn echo_server(&self, name: &str, extra: &str) -> Result<HttpServer> {
        let echo = self.plugin("echo").canonicalize()?;
        let config = format!(
            "[plugins.echo]\npath = {:?}\n{extra}",
            echo.to_str().context("a non-UTF-8 path")?
        );
        let config_path = self.work.join(format!("{name}.toml"));
        std::fs::write(&config_path, config)?;
        let addr = free_addr()?;
        let command = self.moat_command(
            &[
                "serve",
                "--http",
                &addr.to_string(),
                "--config",
                config_path.to_str().context("a non-UTF-8 path")?,
            ],
            &self.warm_cache(),
        );
        HttpServer::spawn(command, addr, &self.log(name))
    }

    /// P13: P2 with 20 Cedar policies against none.
    pub(crate) fn policy_cost(&mut self) -> Result<()> {
        self.warm_bundled("echo")?;
        let policies = twenty_policies();
        assert_eq!(policies.matches("@id(").count(), 20);
        let with = self.policy_server("moat-p13-policies", Some(&policies))?;
        let without = self.policy_server("moat-p13-none", None)?;
        let tools = ["echo_echo".to_string()];
        let [with_rate, without_rate] =
            self.alternate_rates([&with, &without], crate::http::TOKEN, &tools)?;
        self.rows.push(Row {
            id: "P13",
            what: format!(
                "HTTP tools/call echo, {CLIENTS} sessions, every call decided by 20 Cedar \
                 policies against none, calls/s (median of {} rounds)",
                with_rate.len()
            ),
            unit: "calls/s",
            moat: Some(median(with_rate)),
            baseline: Some(("no policy", median(without_rate))),
            target: Target::RatioAtLeast(0.95),
        });
        Ok(())
    }
}
