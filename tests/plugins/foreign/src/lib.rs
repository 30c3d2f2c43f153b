//! The `foreign` test plugin: a component made with plain `wit-bindgen`, without moat's guest SDK,
//! so it carries no `moat:wit` section and its tools get generated descriptions.

wit_bindgen::generate!({
    world: "foreign",
    path: "wit",
});

struct Foreign;

impl Guest for Foreign {
    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }

    fn greet(who: Person) -> String {
        let end = if who.excited { "!" } else { "." };
        format!("Hello, {}{end}", who.name)
    }
}

impl exports::other::foreign::stats::Guest for Foreign {
    fn mean(values: Vec<f64>) -> Option<f64> {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}

export!(Foreign);
