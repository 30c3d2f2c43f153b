//! The `time` plugin: the current time (checked against the host's clock), known conversions,
//! daylight-saving-aware arithmetic, differences, and the errors a model may run into.

use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use moat::plugin::Plugin;
use moat_tests::{load, plugins, try_call};
use serde_json::{Value, json};

use crate::text::{assert_documented, fails, ok};

fn plugin() -> Arc<Plugin> {
    static TIME: OnceLock<Arc<Plugin>> = OnceLock::new();
    TIME.get_or_init(|| load("time", plugins::TIME)).clone()
}

/// Seconds from `+HH:MM` (or `-HH:MM`).
fn offset_seconds(offset: &str) -> i64 {
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let (hours, minutes) = offset[1..].split_once(':').unwrap();
    sign * (hours.parse::<i64>().unwrap() * 3600 + minutes.parse::<i64>().unwrap() * 60)
}

/// Checks that the fields of a `zoned-time` agree with one another.
fn assert_consistent(time: &Value) {
    let field = |name: &str| time[name].as_str().unwrap();
    let offset = field("utcOffset");
    assert_eq!(
        field("iso8601"),
        format!("{}T{}{offset}", field("date"), field("time"))
    );
    let unix = time["unixSeconds"].as_i64().unwrap();
    let clock: Vec<i64> = field("time")
        .split(':')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(
        (unix + offset_seconds(offset)).rem_euclid(86_400),
        clock[0] * 3600 + clock[1] * 60 + clock[2],
        "{time}"
    );
}

#[tokio::test]
async fn every_tool_is_documented() {
    let time = plugin();
    let names: Vec<&str> = time.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["time_add", "time_convert", "time_difference", "time_now"]
    );
    assert_documented(&time);
}

#[tokio::test]
async fn now_is_the_host_time() {
    let time = plugin();
    let host = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;

    let utc = ok(&time, "time_now", json!({})).await;
    assert_eq!(utc["timezone"], "UTC");
    assert_eq!(utc["utcOffset"], "+00:00");
    assert_eq!(utc["dst"], false);
    let unix = utc["unixSeconds"].as_i64().unwrap();
    assert!((unix - host).abs() < 60, "{unix} is not close to {host}");
    assert_consistent(&utc);

    let paris = ok(&time, "time_now", json!({"timezone": "Europe/Paris"})).await;
    assert_eq!(paris["timezone"], "Europe/Paris");
    let (offset, abbreviation, dst) = match paris["dst"].as_bool().unwrap() {
        true => ("+02:00", "CEST", true),
        false => ("+01:00", "CET", false),
    };
    assert_eq!(paris["utcOffset"], offset);
    assert_eq!(paris["abbreviation"], abbreviation);
    assert_eq!(paris["dst"], dst);
    let unix = paris["unixSeconds"].as_i64().unwrap();
    assert!((unix - host).abs() < 60, "{unix} is not close to {host}");
    assert_consistent(&paris);

    let fixed = ok(&time, "time_now", json!({"timezone": "+05:30"})).await;
    assert_eq!(fixed["timezone"], "+05:30");
    // The offset itself, and the host's instant: with both, `assert_consistent` proves the wall
    // clock is five and a half hours ahead of UTC.
    assert_eq!(fixed["utcOffset"], "+05:30");
    assert_eq!(fixed["dst"], false);
    let unix = fixed["unixSeconds"].as_i64().unwrap();
    assert!((unix - host).abs() < 60, "{unix} is not close to {host}");
    assert_consistent(&fixed);
}

#[tokio::test]
async fn an_unknown_time_zone_is_a_tool_error() {
    let time = plugin();
    let message = "unknown time zone \"Mars/Olympus_Mons\"";
    let error = fails(&time, "time_now", json!({"timezone": "Mars/Olympus_Mons"})).await;
    assert!(error.contains(message), "{error}");
    let convert = json!({"time": "2024-03-10T12:00:00Z", "timezone": "Mars/Olympus_Mons"});
    let error = fails(&time, "time_convert", convert).await;
    assert!(error.contains(message), "{error}");
    let add =
        json!({"time": "2024-03-10T12:00:00Z", "duration": {}, "timezone": "Mars/Olympus_Mons"});
    let error = fails(&time, "time_add", add).await;
    assert!(error.contains(message), "{error}");
    let in_brackets = json!({"time": "2024-03-10T12:00[Mars/Olympus_Mons]", "timezone": "UTC"});
    let error = fails(&time, "time_convert", in_brackets).await;
    assert!(error.contains("Mars/Olympus_Mons"), "{error}");
}

#[tokio::test]
async fn convert_follows_daylight_saving_time() {
    let time = plugin();
    let convert =
        |at: &str, zone: &str| ok(&time, "time_convert", json!({"time": at, "timezone": zone}));
    // New York moved its clocks forward at 2024-03-10T07:00:00Z.
    assert_eq!(
        convert("2024-03-10T12:00:00Z", "America/New_York").await,
        json!({
            "iso8601": "2024-03-10T08:00:00-04:00",
            "timezone": "America/New_York",
            "date": "2024-03-10",
            "time": "08:00:00",
            "weekday": "sunday",
            "utcOffset": "-04:00",
            "abbreviation": "EDT",
            "dst": true,
            "unixSeconds": 1_710_072_000,
        })
    );
    let before = convert("2024-03-10T06:00:00Z", "America/New_York").await;
    assert_eq!(before["iso8601"], "2024-03-10T01:00:00-05:00");
    assert_eq!(before["abbreviation"], "EST");
    assert_eq!(before["dst"], false);

    // A local time in its zone, to another zone.
    let tokyo = convert("2024-07-01T09:00[Europe/Paris]", "Asia/Tokyo").await;
    assert_eq!(tokyo["iso8601"], "2024-07-01T16:00:00+09:00");
    assert_eq!(tokyo["weekday"], "monday");
    // An offset, to UTC and to a fixed offset.
    let utc = convert("2024-03-10T13:00:00+01:00", "UTC").await;
    assert_eq!(utc["iso8601"], "2024-03-10T12:00:00+00:00");
    assert_eq!(utc["timezone"], "UTC");
    let india = convert("2024-03-10T12:00:00.25Z", "+05:30").await;
    assert_eq!(india["iso8601"], "2024-03-10T17:30:00.25+05:30");
    assert_eq!(india["timezone"], "+05:30");
    assert_eq!(india["unixSeconds"], 1_710_072_000);
}

#[tokio::test]
async fn convert_explains_unreadable_times() {
    let time = plugin();
    let error = fails(
        &time,
        "time_convert",
        json!({"time": "2024-03-10T12:00", "timezone": "UTC"}),
    )
    .await;
    assert!(
        error.contains("says neither its UTC offset nor its zone"),
        "{error}"
    );
    let error = fails(
        &time,
        "time_convert",
        json!({"time": "next tuesday", "timezone": "UTC"}),
    )
    .await;
    assert!(
        error.starts_with("cannot read the time \"next tuesday\""),
        "{error}"
    );
    // An offset that the zone in brackets never had.
    let conflict =
        json!({"time": "2024-03-10T12:00:00+05:00[America/New_York]", "timezone": "UTC"});
    let error = fails(&time, "time_convert", conflict).await;
    assert!(error.starts_with("cannot read the time"), "{error}");
}

#[tokio::test]
async fn add_counts_days_on_the_local_calendar() {
    let time = plugin();
    let add = |args| ok(&time, "time_add", args);
    // The day New York moves its clocks forward is 23 hours long.
    let day = json!({
        "time": "2024-03-09T12:00:00-05:00",
        "duration": {"days": 1},
        "timezone": "America/New_York",
    });
    assert_eq!(add(day).await["iso8601"], "2024-03-10T12:00:00-04:00");
    let hours = json!({
        "time": "2024-03-09T12:00:00-05:00",
        "duration": {"hours": 24},
        "timezone": "America/New_York",
    });
    assert_eq!(add(hours).await["iso8601"], "2024-03-10T13:00:00-04:00");
    // The zone in brackets is the default.
    let bracketed = json!({"time": "2024-03-09T12:00[America/New_York]", "duration": {"days": 1}});
    let result = add(bracketed).await;
    assert_eq!(result["iso8601"], "2024-03-10T12:00:00-04:00");
    assert_eq!(result["timezone"], "America/New_York");
    // With only an offset, a day is 24 hours.
    let fixed = json!({"time": "2024-03-09T12:00:00-05:00", "duration": {"days": 1}});
    let result = add(fixed).await;
    assert_eq!(result["iso8601"], "2024-03-10T12:00:00-05:00");
    assert_eq!(result["timezone"], "-05:00");
    // Back across the change.
    let back =
        json!({"time": "2024-03-10T12:00:00-04:00[America/New_York]", "duration": {"days": -1}});
    assert_eq!(add(back).await["iso8601"], "2024-03-09T12:00:00-05:00");
}

#[tokio::test]
async fn add_clamps_to_the_end_of_the_month() {
    let time = plugin();
    let add = |args| ok(&time, "time_add", args);
    // A local date in `timezone` is read at midnight.
    let month = json!({"time": "2024-01-31", "duration": {"months": 1}, "timezone": "UTC"});
    assert_eq!(add(month).await["iso8601"], "2024-02-29T00:00:00+00:00");
    let leap = json!({"time": "2024-02-29T00:00Z", "duration": {"years": 1}});
    let result = add(leap).await;
    assert_eq!(result["date"], "2025-02-28");
    assert_eq!(result["weekday"], "friday");
    let mixed_units = json!({
        "time": "2024-03-01T00:00:00Z",
        "duration": {"weeks": 2, "minutes": 30, "seconds": 15, "years": null},
    });
    assert_eq!(
        add(mixed_units).await["iso8601"],
        "2024-03-15T00:30:15+00:00"
    );
    let nothing = json!({"time": "2024-03-01T00:00:00Z", "duration": {}});
    assert_eq!(add(nothing).await["iso8601"], "2024-03-01T00:00:00+00:00");
}

#[tokio::test]
async fn add_refuses_what_it_cannot_do() {
    let time = plugin();
    let mixed = json!({"time": "2024-03-01T00:00Z", "duration": {"days": 1, "hours": -1}});
    let error = fails(&time, "time_add", mixed).await;
    assert!(error.contains("mixes positive and negative"), "{error}");
    let huge = json!({"time": "2024-03-01T00:00Z", "duration": {"years": 30_000}});
    let error = fails(&time, "time_add", huge).await;
    assert!(error.contains("too long"), "{error}");
    let past_the_range = json!({"time": "2024-03-01T00:00Z", "duration": {"years": 19_998}});
    let error = fails(&time, "time_add", past_the_range).await;
    assert!(error.starts_with("cannot add"), "{error}");
    let local = json!({"time": "2024-03-01T09:00", "duration": {"days": 1}});
    let error = fails(&time, "time_add", local).await;
    assert!(
        error.contains("says neither its UTC offset nor its zone"),
        "{error}"
    );
    // A field that is not an integer never reaches the plugin.
    let float = json!({"time": "2024-03-01T00:00Z", "duration": {"days": 1.5}});
    let error = try_call(&time, "time_add", float).await.unwrap_err();
    assert!(error.starts_with("invalid arguments: "), "{error}");
}

#[tokio::test]
async fn difference_splits_into_units() {
    let time = plugin();
    let difference = |args| ok(&time, "time_difference", args);
    let days = json!({"start": "2024-01-01T00:00:00Z", "end": "2024-03-10T12:30:15.9Z"});
    assert_eq!(
        difference(days).await,
        json!({
            "years": 0, "months": 0, "weeks": 0, "days": 69,
            "hours": 12, "minutes": 30, "seconds": 15,
            "totalSeconds": 6_006_615,
            "iso8601": "P69DT12H30M15S",
        })
    );
    let age =
        json!({"start": "1990-05-17T00:00Z", "end": "2024-03-10T00:00Z", "largestUnit": "years"});
    let age = difference(age).await;
    assert_eq!(age["iso8601"], "P33Y9M22D");
    assert_eq!(
        (&age["years"], &age["months"], &age["days"]),
        (&json!(33), &json!(9), &json!(22))
    );
    let weeks =
        json!({"start": "2024-03-01T00:00Z", "end": "2024-03-20T00:00Z", "largestUnit": "weeks"});
    assert_eq!(difference(weeks).await["iso8601"], "P2W5D");
    let backwards =
        json!({"start": "2024-03-10T12:00Z", "end": "2024-03-09T10:00Z", "largestUnit": "hours"});
    let backwards = difference(backwards).await;
    assert_eq!(backwards["hours"], -26);
    assert_eq!(backwards["totalSeconds"], -93_600);
    assert_eq!(backwards["iso8601"], "-PT26H");
    let minutes = json!({
        "start": "2024-03-10T12:00Z",
        "end": "2024-03-10T13:30Z",
        "largestUnit": "minutes",
    });
    assert_eq!(difference(minutes).await["minutes"], 90);
}

#[tokio::test]
async fn difference_knows_short_days() {
    let time = plugin();
    let difference = |args| ok(&time, "time_difference", args);
    let start = "2024-03-09T12:00[America/New_York]";
    let end = "2024-03-10T12:00[America/New_York]";
    let in_days = difference(json!({"start": start, "end": end})).await;
    assert_eq!(in_days["iso8601"], "P1D");
    assert_eq!(in_days["totalSeconds"], 23 * 3600);
    let in_hours = difference(json!({"start": start, "end": end, "largestUnit": "hours"})).await;
    assert_eq!(in_hours["iso8601"], "PT23H");
    // Local times read in `timezone`.
    let local = json!({
        "start": "2024-03-09T12:00",
        "end": "2024-03-10T12:00",
        "timezone": "America/New_York",
    });
    assert_eq!(difference(local).await["iso8601"], "P1D");
    // Two zones: the same instants, whatever the clocks say.
    let zones = json!({
        "start": "2024-03-10T09:00:00+01:00[Europe/Paris]",
        "end": "2024-03-10T08:00:00-04:00[America/New_York]",
    });
    assert_eq!(difference(zones).await["iso8601"], "PT4H");
}

#[tokio::test]
async fn difference_errors() {
    let time = plugin();
    let unknown = json!({
        "start": "2024-03-10T12:00Z",
        "end": "2024-03-10T13:00Z",
        "timezone": "Nowhere/Town",
    });
    let error = fails(&time, "time_difference", unknown).await;
    assert!(
        error.contains("unknown time zone \"Nowhere/Town\""),
        "{error}"
    );
    let unreadable = json!({"start": "2024-03-10T12:00Z", "end": "tomorrow"});
    let error = fails(&time, "time_difference", unreadable).await;
    assert!(
        error.starts_with("cannot read the time \"tomorrow\""),
        "{error}"
    );
    let unit = json!({
        "start": "2024-03-10T12:00Z",
        "end": "2024-03-10T13:00Z",
        "largestUnit": "decades",
    });
    let error = try_call(&time, "time_difference", unit).await.unwrap_err();
    assert!(error.starts_with("invalid arguments: "), "{error}");
}
