//! What an instance may touch, and how much it may use: the engine and its pooling allocator, the
//! limits of a call, the grants (directories, environment, network) and the host functions that
//! enforce them, the guest's log, and the fresh instance each call runs in. It is handed grants
//! already decided (by `supply`'s policy and `serve`'s config) and never widens them.

pub mod config_store;
pub mod descriptors;
pub mod engine;
pub mod footprint;
pub mod grants;
pub mod guest_log;
pub mod host;
pub mod instances;
pub mod limits;
mod mcp_client;
pub mod network;
pub mod offered;
