//! The `shapes` test plugin: every WIT type shape, mostly sent back unchanged, so that tests can
//! compare what comes out with what went in.

// `integers` takes one parameter of every integer type.
#![allow(clippy::too_many_arguments)]

moat_guest::generate!("shapes");

use exports::moat::shapes::handles::{self, CounterBorrow, GuestCounter};
use exports::moat::shapes::roundtrip::{
    self, Color, ContentBlock, Job, Outer, Permissions, Person, Point, Problem, Shape, UserId,
};
use moat::plugin::content::{Image, ResourceLink};

struct Shapes;

impl Guest for Shapes {
    fn negate(b: bool) -> bool {
        !b
    }

    fn integers(a: u8, b: i8, c: u16, d: i16, e: u32, f: i32, g: u64, h: i64) -> AllIntegers {
        AllIntegers {
            a,
            b,
            c,
            d,
            e,
            f,
            g,
            h,
        }
    }

    fn unsigned(n: u64) -> u64 {
        n
    }

    fn signed(n: i64) -> i64 {
        n
    }

    fn floats(single: f32, double: f64) -> (f32, f64) {
        (single, double)
    }

    fn ratio(a: f64, b: f64) -> f64 {
        a / b
    }

    fn character(c: char) -> char {
        c
    }

    fn text(s: String) -> String {
        s
    }

    fn noop() {}
}

impl roundtrip::Guest for Shapes {
    fn echo_point(p: Point) -> Point {
        p
    }

    fn echo_person(p: Person) -> Person {
        p
    }

    fn echo_color(c: Color) -> Color {
        c
    }

    fn echo_permissions(p: Permissions) -> Permissions {
        p
    }

    fn echo_shape(s: Shape) -> Shape {
        s
    }

    fn echo_nest(a: Outer) -> Outer {
        a
    }

    fn echo_job(j: Job) -> Job {
        j
    }

    fn echo_list(items: Vec<String>) -> Vec<String> {
        items
    }

    fn echo_grid(grid: Vec<Vec<i32>>) -> Vec<Vec<i32>> {
        grid
    }

    fn echo_bytes(data: Vec<u8>) -> Vec<u8> {
        data
    }

    fn echo_tuple(t: (String, u32, bool)) -> (String, u32, bool) {
        t
    }

    fn echo_option(o: Option<Point>) -> Option<Point> {
        o
    }

    fn echo_option_option(o: Option<Option<u32>>) -> Option<Option<u32>> {
        o
    }

    fn echo_result(r: Result<u32, String>) -> Result<u32, String> {
        r
    }

    fn echo_user(id: UserId) -> UserId {
        id
    }

    fn lookup(id: u32) -> Result<Person, String> {
        match id {
            0 => Err("there is no person 0".into()),
            _ => Ok(Person {
                name: format!("person {id}"),
                age: None,
                favourite: Some(Color::Green),
                tags: vec!["found".into()],
            }),
        }
    }

    fn check(value: i32) -> Result<(), String> {
        if value < 0 {
            Err(format!("{value} is negative"))
        } else {
            Ok(())
        }
    }

    fn validate(value: i32) -> Result<(), Problem> {
        if value < 0 {
            Err(Problem {
                code: 422,
                message: format!("{value} is negative"),
            })
        } else {
            Ok(())
        }
    }

    fn render(caption: String) -> Vec<ContentBlock> {
        vec![
            ContentBlock::Text(caption),
            ContentBlock::Image(Image {
                data: vec![0x89, b'P', b'N', b'G', 0, 255],
                mime_type: "image/png".into(),
            }),
            ContentBlock::ResourceLink(ResourceLink {
                uri: "file:///shapes/readme.md".into(),
                name: "readme".into(),
                description: Some("What the shapes are".into()),
                mime_type: None,
            }),
        ]
    }

    fn badge(label: String) -> ContentBlock {
        ContentBlock::Text(format!("[{label}]"))
    }

    fn render_or_fail(fail: bool) -> Result<Vec<ContentBlock>, String> {
        if fail {
            Err("asked to fail".into())
        } else {
            Ok(Self::render("rendered".into()))
        }
    }
}

/// The guest side of the `counter` resource.
struct Counter(u32);

impl GuestCounter for Counter {
    fn new(start: u32) -> Self {
        Counter(start)
    }

    fn value(&self) -> u32 {
        self.0
    }
}

impl handles::Guest for Shapes {
    type Counter = Counter;

    fn read(c: CounterBorrow<'_>) -> u32 {
        c.get::<Counter>().value()
    }

    fn ping() -> String {
        "pong".into()
    }
}

impl exports::moat::shapes::english::Guest for Shapes {
    fn greet(name: String) -> String {
        format!("Hello, {name}!")
    }
}

impl exports::french::Guest for Shapes {
    fn greet(name: String) -> String {
        format!("Bonjour, {name} !")
    }
}

export!(Shapes);
