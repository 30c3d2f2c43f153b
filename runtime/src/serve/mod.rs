//! What is served now: the operator's `moat.toml` ([`config`], its service tables in
//! [`service`] and [`cluster`], applied at start and by each reload in [`tables`]), the reloads that keep the
//! served plugins in step with it ([`reload`]), the watch that starts them ([`watch`]), and what it
//! serves now for the console ([`reloads`]).

pub mod cluster;
pub mod config;
mod credentials;
pub mod exposure;
pub mod reload;
pub mod reloads;
pub mod service;
pub mod tables;
pub mod watch;
