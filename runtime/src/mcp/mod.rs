//! The protocol face: MCP over stdio ([`server`]) and Streamable HTTP ([`http`]), the tool list
//! being served ([`catalogue`]), the audit log of every call ([`audit`]) and the metrics
//! ([`metrics`]).

pub mod audit;
pub mod catalogue;
pub mod http;
pub mod metrics;
pub mod server;
pub mod traces;
