//! What is served now: the operator's `moat.toml` ([`config`], its service tables in
//! [`service`]), the reloads that keep the served
//! plugins in step with it ([`reload`]), and the watch that starts them ([`watch`]).

pub mod config;
pub mod exposure;
pub mod reload;
pub mod service;
pub mod watch;
