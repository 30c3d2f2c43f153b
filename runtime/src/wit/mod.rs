//! How WIT becomes MCP, and back: the names of tools, the JSON Schemas of their parameters and
//! results, the checked conversion of arguments into component values, results into MCP content,
//! and the doc comments that describe them. Pure functions of types and values: nothing here
//! touches a file, a socket or an instance.

pub mod constraints;
pub mod defs;
pub mod docs;
pub mod naming;
pub mod output;
pub mod prose;
pub mod references;
pub mod schema;
pub mod tags;
pub mod uri_template;
pub mod values;
pub mod world;
