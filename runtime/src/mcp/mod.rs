//! The protocol face: MCP over stdio ([`server`], its tool calls in `call`, [`stdio`]) and Streamable HTTP ([`http`]), the tool list
//! being served ([`catalogue`]), the audit log of every call ([`audit`]) and the metrics
//! ([`metrics`]).

pub mod asking;
pub mod audit;
mod call;
pub mod catalogue;
pub mod http;
pub mod instructions;
pub mod live_calls;
pub mod metrics;
pub mod request_state;
pub mod server;
mod session_settings;
pub mod stdio;
mod surface;
pub mod tasks;
pub mod traces;
