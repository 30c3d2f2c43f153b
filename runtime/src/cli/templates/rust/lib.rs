//! The {{name}} plugin: each export of wit/{{name}}.wit is a function of `Guest` here, its
//! parameters in WIT order (kebab-case names become snake_case). `moat build` makes the
//! component (cargo, for wasm32-wasip2) and gives it its WIT docs and permission manifest.

wit_bindgen::generate!({ world: "{{name}}", path: "wit", generate_all });

struct Plugin;

impl Guest for Plugin {
    fn greet(name: String) -> String {
        format!("Hello, {name}!")
    }
}

export!(Plugin);
