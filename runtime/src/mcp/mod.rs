//! The protocol face: MCP over stdio ([`server`]) and Streamable HTTP ([`http`]), the tool list
//! being served ([`catalogue`]), and the audit log of every call ([`audit`]).

pub mod audit;
pub mod catalogue;
pub mod http;
pub mod server;
