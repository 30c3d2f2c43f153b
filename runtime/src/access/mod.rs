//! Who is calling, and what they may do: credentials checked into a [`Principal`], the tools
//! each principal may see and call, and how much each may ask of moat.
//!
//! - [`credentials`]: the local bearer token and static API keys;
//! - [`oauth`]: OAuth 2.1 access tokens: JWTs checked against the issuer's keys, opaque tokens
//!   by introspection;
//! - [`authenticator`]: a bearer credential to a principal, or the reason it is refused;
//! - [`tool_sets`]: per-principal allow and deny rules over plugins and tools;
//! - [`quotas`]: requests per minute and concurrent calls, per principal.
//!
//! Nothing here knows HTTP or MCP; `mcp::http` puts it in front of `/mcp`.

pub mod authenticator;
pub mod credentials;
pub mod glob;
pub mod oauth;
pub mod principal;
pub mod quotas;
pub mod tool_sets;

pub use principal::{AccessToken, Principal, Via};
