//! What is served now: the operator's `moat.toml` ([`config`]) the reloads that keep the served
//! plugins in step with it ([`reload`]), and the watch that starts them ([`watch`]).

pub mod config;
pub mod reload;
pub mod watch;
