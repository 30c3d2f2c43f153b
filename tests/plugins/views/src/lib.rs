//! The `views` test plugin: what a model sees of a plugin (JSON names, references between its
//! functions, `@schema` constraints). `plan-trip` echoes what it was given, so that tests can
//! see the names and values that reached the guest.

// The export shim of `plan-trip` flattens its records into many core parameters.
#![allow(clippy::too_many_arguments)]

moat_guest::generate!("views");

use moat::plugin::client::{Question, TypedForm, ask};

struct Views;

impl Guest for Views {
    fn plan_trip(
        _start_date: String,
        max_stops: u8,
        travel_mode: TravelMode,
        first_stop: Stop,
        options: TripOptions,
    ) -> Trip {
        Trip {
            travel_mode,
            stop_count: max_stops,
            first_stop,
            options,
        }
    }

    fn list_places() -> Vec<String> {
        vec!["Lisbon".into(), "Porto".into()]
    }

    fn cancel_trip(trip_id: String) -> Result<(), String> {
        Err(format!(
            "no trip {trip_id}: plan one with `plan-trip` first (at most `max-stops` stops)"
        ))
    }

    fn book_trip() -> Result<String, String> {
        let question = Question::ElicitTyped(TypedForm {
            name: "book".into(),
            message: "How many nights?".into(),
        });
        let answers = ask(&[("nights".to_string(), question)])?;
        Ok(answers
            .into_iter()
            .map(|(_, answer)| answer)
            .collect::<Vec<_>>()
            .join(""))
    }

    fn ping() -> String {
        "pong".into()
    }

    fn too_wide(_n: u8) {}

    fn wrong_keyword(_n: u8) {}

    fn no_such_param(_n: u8) {}

    fn required_default(_n: u8) {}
}

impl exports::forms::Guest for Views {
    fn book(_nights: Option<u8>) {}
}

export!(Views);
