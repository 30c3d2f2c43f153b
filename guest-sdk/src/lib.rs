//! Write moat plugins in Rust.
//!
//! A moat plugin is a WebAssembly component whose exported functions are MCP tools. The author writes
//! a WIT world with `///` doc comments and implements it in Rust; this crate does the rest:
//!
//! * [`generate!`] makes the bindings for the world (including moat's own `moat:plugin` imports:
//!   `log`, `progress`, the `content` and `prompt` types, `resources`, `client` and `tasks`) and
//!   embeds the plugin's documented WIT in the
//!   component, so that moat can show the doc comments as tool and parameter descriptions;
//! * [`build::prepare`] (feature `build`, for `build.rs`) puts the `moat:plugin` package in the
//!   plugin's `wit/deps/` and encodes the plugin's WIT package for [`generate!`] to embed.
//!
//! Then `cargo build --target wasm32-wasip2 --release` produces a plugin ready for `moat serve`.
//!
//! ```ignore
//! // build.rs
//! fn main() { moat_guest::build::prepare().unwrap(); }
//!
//! // src/lib.rs
//! moat_guest::generate!("greeter");
//! struct Greeter;
//! impl Guest for Greeter {
//!     fn greet(name: String) -> String { format!("Hello, {name}!") }
//! }
//! export!(Greeter);
//! ```

#[cfg(feature = "build")]
pub mod build;
#[cfg(feature = "http")]
pub mod http;

/// Re-exported so that generated bindings need no direct dependency on `wit-bindgen`.
pub use wit_bindgen;

/// The name of the custom section that carries a plugin's encoded WIT package, doc comments included.
pub const WIT_SECTION: &str = "moat:wit";

/// The name of the custom section that carries a plugin's permission manifest (JSON).
pub const MANIFEST_SECTION: &str = "moat:manifest";

/// The `moat:plugin` WIT package, as plugins import it.
pub const PLUGIN_WIT: &str = include_str!("../../wit/plugin.wit");

/// Generates the bindings for `$world` from the crate's `wit/` folder and embeds the documented WIT
/// that [`build::prepare`] encoded.
///
/// Everything wit-bindgen generates lands in the calling module: the `Guest` traits, `export!`, and
/// the `moat::plugin::{log, progress, content, prompt, resources, client, tasks}` modules when the
/// world imports or uses them; an exported `prompts`, `resources` or `completions` interface gets
/// its own `exports::…::Guest` trait.
#[macro_export]
macro_rules! generate {
    ($world:literal) => {
        $crate::wit_bindgen::generate!({
            world: $world,
            path: "wit",
            generate_all,
            runtime_path: "::moat_guest::wit_bindgen::rt",
            bitflags_path: "::moat_guest::wit_bindgen::rt::bitflags",
        });
        $crate::embed_wit!();
    };
}

/// Embeds the WIT package that [`build::prepare`] encoded as the `moat:wit` custom section, and
/// the permission manifest it wrote (if any) as the `moat:manifest` section.
///
/// [`generate!`] calls this; use it directly only with bindings made some other way.
#[macro_export]
macro_rules! embed_wit {
    () => {
        #[cfg(target_family = "wasm")]
        #[unsafe(link_section = "moat:wit")]
        #[used]
        static MOAT_WIT: [u8; include_bytes!(concat!(env!("OUT_DIR"), "/moat-wit.bin")).len()] =
            *include_bytes!(concat!(env!("OUT_DIR"), "/moat-wit.bin"));

        // The permission manifest, when `[package.metadata.moat]` declares one.
        #[cfg(all(target_family = "wasm", moat_manifest))]
        #[unsafe(link_section = "moat:manifest")]
        #[used]
        static MOAT_MANIFEST: [u8; include_bytes!(concat!(
            env!("OUT_DIR"),
            "/moat-manifest.json"
        ))
        .len()] = *include_bytes!(concat!(env!("OUT_DIR"), "/moat-manifest.json"));
    };
}
