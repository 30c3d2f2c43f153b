//! State that more than one process may share, one interface per kind, with the backends that
//! keep it in this process or in a file beside it; the Redis backends live in `cluster`, which
//! is the only layer that speaks to Redis. Each backend is chosen once, when what uses it is
//! built, and nothing that uses it knows which it has.
//!
//! - [`consents`]: callers' consented tokens, the turn to refresh them, and the steps of consent
//!   flows under way;
//! - [`seal`]: how a value kept where others can read it is sealed for the one key it is kept
//!   under.

pub mod consents;
pub mod seal;
