//! moat runs MCP tools as sandboxed WebAssembly components.
//!
//! A plugin is a WASI 0.2 component; each function it exports is an MCP tool whose JSON Schema
//! comes from the function's WIT types and whose descriptions come from its doc comments.
//! Every call runs in a fresh instance that can reach only what the operator granted.
//!
//! The data path, module by module:
//! [`config`] (what to load) → [`source`] (fetch it; [`lock`] pins it) → [`registry`] (plugins
//! and tool names) → [`plugin`] (compile, discover, call, each call in an instance [`instances`]
//! made for it) → [`values`] (arguments checked and converted) → [`host`] (what the guest may
//! touch) → [`output`] (the result as MCP content) → [`server`] (MCP over stdio, or [`http`]).

pub mod audit;
pub mod cache;
pub mod catalogue;
pub mod config;
pub mod descriptors;
pub mod docs;
pub mod engine;
pub mod grants;
pub mod guest_log;
pub mod host;
pub mod hosts;
pub mod http;
pub mod instances;
pub mod lock;
pub mod manifest;
pub mod naming;
pub mod network;
pub mod output;
pub mod parallel;
pub mod plugin;
pub mod policy;
pub mod registry;
pub mod reload;
pub mod schema;
pub mod server;
pub mod signing;
pub mod source;
pub mod values;
