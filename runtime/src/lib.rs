//! moat runs MCP tools as sandboxed WebAssembly components.
//!
//! A plugin is a WASI 0.2 component; each function it exports is an MCP tool whose JSON Schema
//! comes from the function's WIT types and whose descriptions come from its doc comments.
//! Every call runs in a fresh instance that can reach only what the operator granted.
//!
//! The layers, each using only those below it (ARCHITECTURE.md draws them):
//! - [`serve`]: what is served now: `moat.toml`, reloads;
//! - [`mcp`]: the protocol face: MCP on stdio and HTTP, the tool list, the audit log;
//! - [`policy`]: policies in Cedar over each call, each list and each request a call sends;
//! - [`upstream`]: the credentials a call's requests carry upstream for its caller: token
//!   exchange, per-principal secrets;
//! - [`access`]: who is calling and what they may do: credentials, OAuth access tokens, tool
//!   sets per caller, quotas;
//! - [`cluster`]: the state replicas share through Redis, when they do: quotas, sessions,
//!   consents;
//! - [`shared`]: one interface per kind of state more than one process may share, with its
//!   backends in this process or a file (Redis's are in `cluster`);
//! - [`plugin`]: a loaded plugin, its tools and the call of one; the set of plugins served;
//! - [`supply`]: where a plugin comes from and whether it may load: sources, digests, the lock,
//!   signatures, the policy, manifests, the compiled-code cache;
//! - [`sandbox`]: what an instance may touch and use: engine, limits, grants, host functions,
//!   instances;
//! - [`wit`]: WIT ⇄ JSON: tool names, schemas, values, results, docs.
//!
//! [`parallel`] and [`memory`] are leaves every layer may use.

pub mod access;
pub mod cluster;
pub mod console;
pub mod mcp;
pub mod memory;
pub mod parallel;
pub mod plugin;
pub mod policy;
pub mod sandbox;
pub mod serve;
pub mod shared;
pub mod supply;
pub mod upstream;
pub mod wit;
