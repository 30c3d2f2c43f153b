//! One file per console page.

pub mod audit;
pub mod callers;
pub mod config;
pub mod credentials;
pub mod live;
pub mod overview;
pub mod plugins;
pub mod tool;
