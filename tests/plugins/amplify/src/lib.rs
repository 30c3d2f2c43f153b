//! The `amplify` plugin: its one tool takes a type that is small in the component and
//! exponential once written out as JSON Schema, for the hostile case `schema-amplification`.

moat_guest::generate!("amplify");

struct Amplify;

impl Guest for Amplify {
    fn take(_value: A6) -> u32 {
        0
    }
}

export!(Amplify);
