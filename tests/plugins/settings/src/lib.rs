//! The `settings` test plugin: a component made with plain `wit-bindgen` that reads what other
//! hosts give such components, `wasi:config/store` settings and files by relative path.

wit_bindgen::generate!({
    world: "settings",
    path: "wit",
    generate_all,
});

use wasi::config::store;

struct Settings;

impl Guest for Settings {
    fn setting(key: String) -> Option<String> {
        store::get(&key).unwrap_or(None)
    }

    fn all_settings() -> Vec<(String, String)> {
        store::get_all().unwrap_or_default()
    }

    fn read_relative(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
    }
}

export!(Settings);
