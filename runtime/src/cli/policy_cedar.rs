//! `moat policy schema`, `test`, and the Cedar half of `check` and `explain`: the policies of
//! a config against the tools it serves, without serving them.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::{Map, Value};

use moat::access::{Principal, Via};
use moat::plugin::registry::Registry;
use moat::policy::{Completed, Facts, Outgoing, Policies, Settings, Verdict};
use moat::serve::config;
use moat::supply::policy::Policy;
use moat::supply::source::{Fetcher, fetch_all};

use super::print_out;

/// What a config serves, loaded as `moat serve` loads it, and its policies' settings.
pub struct Served {
    pub registry: Registry,
    pub settings: Settings,
    pub sources: HashMap<String, String>,
    pub config: config::Config,
}

impl Served {
    /// Loads every plugin of `config_path` under `policy` (compiled code from the cache).
    pub async fn load(config_path: &Path, policy: &Policy) -> Result<Self> {
        let config = config::load(config_path, None)?;
        let settings = config.policy.settings(policy)?;
        let sources = config.plugins.clone();
        let fetched = fetch_all(&Fetcher::from_env(), &sources).await;
        let engine = moat::sandbox::engine::new_engine_with_fuel(true)?;
        let cache = super::serve::open_cache();
        let (registry, errors) = tokio::task::block_in_place(|| {
            Registry::load_fetched(&engine, &sources, fetched, cache.as_ref(), None, policy)
        })?;
        if let Some(error) = errors.first() {
            bail!(
                "plugin \"{}\" does not load: {:#}",
                error.plugin,
                error.error
            );
        }
        Ok(Self {
            registry,
            settings,
            sources: moat::serve::watch::source_texts(&sources),
            config,
        })
    }

    pub fn policies(&self) -> Result<Policies> {
        Policies::load(&self.settings, &self.registry, &self.sources)
    }
}

/// `moat policy schema`: the Cedar schema of what the config serves.
pub async fn schema(config_path: &Path, policy: &Policy) -> Result<ExitCode> {
    let served = Served::load(config_path, policy).await?;
    print_out(moat::policy::model::schema(&served.registry, &served.settings.claims).trim_end());
    Ok(ExitCode::SUCCESS)
}

/// The Cedar part of `moat policy check`: the policies validate against what is served. A
/// config that names none has nothing to check; one whose plugins do not all load cannot be
/// checked, which fails the check (the plugins' refusals are printed above).
pub async fn check(config_path: &Path, policy: &Policy) -> Result<bool> {
    let settings = config::load(config_path, None)?.policy.settings(policy)?;
    if settings.files.is_empty() {
        return Ok(true);
    }
    let served = match Served::load(config_path, policy).await {
        Ok(served) => served,
        Err(error) => {
            print_out(&format!(
                "Cedar: not checked, as not every plugin loads: {error:#}"
            ));
            return Ok(false);
        }
    };
    match served.policies() {
        Ok(policies) if policies.is_given() => {
            let files: Vec<String> = (served.settings.files.iter())
                .map(|f| f.path.display().to_string())
                .collect();
            print_out(&format!(
                "Cedar: {} policies in {} are valid for what is served",
                policies.len(),
                files.join(", ")
            ));
            Ok(true)
        }
        Ok(_) => Ok(true),
        Err(error) => {
            print_out(&format!("Cedar: {error:#}"));
            Ok(false)
        }
    }
}

/// Who a case or `explain` asks for.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Who {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub client_id: Option<String>,
    pub subject: Option<String>,
    pub key: Option<String>,
    /// `jwt` unless said: `api-key`, `introspection`, `local-token`, `stdio`, `none`.
    pub authenticated_by: Option<String>,
    #[serde(default)]
    pub claims: Map<String, Value>,
}

impl Who {
    fn principal(&self) -> Result<Principal> {
        let via = match self.authenticated_by.as_deref().unwrap_or("jwt") {
            "jwt" => Via::Jwt,
            "introspection" => Via::Introspection,
            "api-key" => Via::ApiKey,
            "local-token" => Via::LocalToken,
            "stdio" => Via::Stdio,
            "none" => Via::Unauthenticated,
            other => bail!("authenticated_by `{other}` is not one moat knows"),
        };
        let mut principal = Principal::anonymous();
        principal.name = self.name.clone();
        principal.via = via;
        principal.groups = self.groups.clone();
        principal.scopes = self.scopes.clone();
        principal.client_id = self.client_id.clone();
        principal.subject = self.subject.clone();
        principal.key = self.key.clone();
        principal.claims = self.claims.clone();
        Ok(principal)
    }
}

/// One case of a test file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub principal: Who,
    /// `call_tool`, `get_prompt`, `read_resource`, `complete` or `reach`.
    pub action: String,
    /// The tool, prompt or resource by its MCP name; for `reach`, the URL requested.
    pub resource: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// `read_resource`: the URI read.
    pub uri: Option<String>,
    /// `reach`: the tool whose call sends the request, and its method (GET unless said).
    pub tool: Option<String>,
    pub method: Option<String>,
    /// `complete`: the argument completed and what is typed so far.
    pub argument: Option<String>,
    pub value: Option<String>,
    pub protocol_version: Option<String>,
    pub client_address: Option<std::net::IpAddr>,
    pub replica: Option<String>,
    /// `allow` or `deny`.
    pub expect: String,
    /// The policies expected to decide, when given.
    pub policies: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(default)]
    case: Vec<Case>,
}

impl Case {
    fn decide(&self, served: &Served, policies: &Policies) -> Result<Verdict> {
        let principal = self.principal.principal()?;
        let facts = Facts {
            protocol_version: self.protocol_version.clone(),
            client_address: self.client_address,
            replica: self.replica.clone().unwrap_or_default(),
        };
        let name = self.resource.as_str();
        Ok(match self.action.as_str() {
            "call_tool" => {
                served
                    .registry
                    .find(name)
                    .with_context(|| format!("no tool `{name}` is served"))?;
                policies.call_tool(&principal, name, Some(&self.arguments), &facts)
            }
            "get_prompt" => policies.get_prompt(&principal, name, Some(&self.arguments), &facts),
            "read_resource" => {
                let uri = self
                    .uri
                    .as_deref()
                    .context("a read_resource case names its `uri`")?;
                policies.read_resource(&principal, name, uri, &facts)
            }
            "complete" => {
                let of = match served.registry.find_prompt(name) {
                    Some(_) => Completed::Prompt(name),
                    None => Completed::Resource(name),
                };
                let argument = self
                    .argument
                    .as_deref()
                    .context("a complete case names its `argument`")?;
                policies.complete(
                    &principal,
                    of,
                    argument,
                    self.value.as_deref().unwrap_or(""),
                    &facts,
                )
            }
            "reach" => {
                let tool = self
                    .tool
                    .as_deref()
                    .context("a reach case names the `tool` whose call sends it")?;
                let (plugin, _) = served
                    .registry
                    .find(tool)
                    .with_context(|| format!("no tool `{tool}` is served"))?;
                let url: http::Uri = name
                    .parse()
                    .with_context(|| format!("`{name}` is not a URL"))?;
                let scheme = url.scheme_str().unwrap_or("https");
                let port = url
                    .port_u16()
                    .unwrap_or(if scheme == "http" { 80 } else { 443 });
                let host = url
                    .host()
                    .unwrap_or_default()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let outgoing = Outgoing {
                    scheme,
                    host,
                    port,
                    method: self.method.as_deref().unwrap_or("GET"),
                    path: url.path(),
                };
                policies.reach(&principal, &plugin.name, tool, &outgoing, &facts)
            }
            other => bail!(
                "action `{other}` is not call_tool, get_prompt, read_resource, complete or reach"
            ),
        })
    }
}

/// `moat policy test FILE`: each case decided as moat would, against its expectation.
pub async fn test(file: &Path, config_path: &Path, policy: &Policy) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let cases: CasesFile =
        toml::from_str(&text).with_context(|| format!("in {}", file.display()))?;
    let served = Served::load(config_path, policy).await?;
    let policies = served.policies()?;
    let (mut passed, mut failed) = (0, 0);
    let mut out = String::new();
    for case in &cases.case {
        let verdict = case
            .decide(&served, &policies)
            .with_context(|| format!("case \"{}\"", case.name))?;
        let (got, by) = match &verdict {
            Verdict::Allowed { by } => ("allow", by.clone()),
            Verdict::Denied { by, .. } => ("deny", by.clone()),
            Verdict::Invalid(why) => bail!("case \"{}\": {why}", case.name),
        };
        if !matches!(case.expect.as_str(), "allow" | "deny") {
            bail!(
                "case \"{}\": expect is `allow` or `deny`, not `{}`",
                case.name,
                case.expect
            );
        }
        let mut wrong = Vec::new();
        if got != case.expect {
            wrong.push(format!("expected {}, got {got}", case.expect));
        }
        if let Some(expected) = &case.policies {
            let (mut expected, mut by) = (expected.clone(), by.clone());
            expected.sort();
            by.sort();
            if expected != by {
                wrong.push(format!("expected policies {expected:?}, decided by {by:?}"));
            }
        }
        if wrong.is_empty() {
            passed += 1;
            out.push_str(&format!("ok    {} ({got}{})\n", case.name, by_text(&by)));
        } else {
            failed += 1;
            out.push_str(&format!("FAIL  {}: {}\n", case.name, wrong.join("; ")));
        }
    }
    out.push_str(&format!("{passed} passed, {failed} failed"));
    print_out(&out);
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn by_text(by: &[String]) -> String {
    if by.is_empty() {
        String::new()
    } else {
        format!(" by {}", by.join(", "))
    }
}

/// `moat policy explain --tool T`: why `who` may or may not call the tool with `arguments`.
pub async fn explain_call(
    config_path: &Path,
    policy: &Policy,
    who: Who,
    tool: &str,
    arguments: Map<String, Value>,
) -> Result<ExitCode> {
    let served = Served::load(config_path, policy).await?;
    let policies = served.policies()?;
    let principal = who.principal()?;
    let mut out = String::new();
    let sets = served.config.service.tool_sets(&policy.deny_tools);
    let (plugin, _) = served
        .registry
        .find(tool)
        .with_context(|| format!("no tool `{tool}` is served"))?;
    let allowed_by_access = sets.allows(&principal, &plugin.name, tool);
    out.push_str(&format!(
        "[[access]]: {} {} see and call `{tool}`\n",
        principal.name,
        if allowed_by_access { "may" } else { "may not" }
    ));
    let verdict = policies.call_tool(&principal, tool, Some(&arguments), &Facts::default());
    out.push_str(&match (&verdict, policies.is_given()) {
        (_, false) => "Cedar: no policy is given; [[access]] alone decides".to_string(),
        (Verdict::Allowed { by }, _) => format!("Cedar: allowed{}", by_text(by)),
        (Verdict::Denied { message, .. }, _) => format!("Cedar: {message}"),
        (Verdict::Invalid(why), _) => format!("Cedar: the arguments do not fit the tool: {why}"),
    });
    if policies.is_given() {
        let listed = policies.lists_tool(&principal, tool, &Facts::default());
        out.push_str(&format!(
            "\nlisted for {}: {}",
            principal.name,
            if listed && allowed_by_access {
                "yes"
            } else {
                "no"
            }
        ));
    }
    print_out(&out);
    let allowed = allowed_by_access && matches!(verdict, Verdict::Allowed { .. });
    Ok(if allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The `[[access]]` rules of the config (and the policy's `deny_tools`) as Cedar.
pub fn access_as_cedar(config_path: &Path, policy: &Policy) -> Result<String> {
    let service = config::read_service(config_path, None)?;
    Ok(moat::policy::explain::tool_sets(
        &service.tool_sets(&policy.deny_tools),
    ))
}

/// Claims given on the command line as JSON.
pub fn json_object(text: Option<&str>, what: &str) -> Result<Map<String, Value>> {
    match text {
        None => Ok(Map::new()),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(map),
            _ => bail!("{what} is a JSON object, such as '{{\"url\": \"https://…\"}}'"),
        },
    }
}
