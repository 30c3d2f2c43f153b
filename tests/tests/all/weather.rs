//! The `weather` plugin against an Open-Meteo-shaped server on loopback, its URL granted through
//! `moat.toml` (`WEATHER_API_URL` and a network grant).

use std::sync::Arc;

use moat::plugin::Plugin;
use moat_tests::{load_source, plugins, structured, try_call};
use serde_json::{Value, json};

use crate::loopback::{ConfigDir, Server, respond};

const CURRENT: &str = r#"{"latitude":52.52,"longitude":13.42,"timezone":"Europe/Berlin",
  "current_units":{"temperature_2m":"°C"},
  "current":{"time":"2026-11-30T10:00","interval":900,"temperature_2m":3.5,
    "relative_humidity_2m":81,"apparent_temperature":0.4,"precipitation":0.2,
    "weather_code":61,"wind_speed_10m":14.8,"wind_direction_10m":250}}"#;

const DAILY: &str = r#"{"latitude":52.52,"longitude":13.42,"timezone":"Europe/Berlin",
  "daily":{"time":["2026-11-30","2026-12-01"],"weather_code":[3,71],
    "temperature_2m_max":[5.1,2.0],"temperature_2m_min":[-0.5,-3.2],
    "precipitation_sum":[0.0,4.3],"precipitation_probability_max":[10,null]}}"#;

async fn api() -> Server {
    Server::start(|seen| {
        if !seen.uri.starts_with("/v1/forecast?") {
            respond(404, "text/plain", "not found")
        } else if seen.uri.contains("latitude=45") {
            respond(
                400,
                "application/json",
                r#"{"error":true,"reason":"Latitude must be in range of -90 to 90°."}"#,
            )
        } else if seen.uri.contains("current=") {
            respond(200, "application/json", CURRENT)
        } else {
            respond(200, "application/json", DAILY)
        }
    })
    .await
}

fn weather_plugin(dir: &ConfigDir, server: &Server) -> Arc<Plugin> {
    load_source(dir.source(
        "weather",
        plugins::WEATHER,
        "",
        &format!(
            "network = [\"http://127.0.0.1:{port}\"]\nenv = {{ WEATHER_API_URL = \"http://127.0.0.1:{port}/\" }}",
            port = server.port()
        ),
    ))
}

#[tokio::test]
async fn current_conditions() {
    let server = api().await;
    let dir = ConfigDir::new();
    let plugin = weather_plugin(&dir, &server);
    let result = try_call(
        &plugin,
        "weather_current",
        json!({ "latitude": 52.52, "longitude": 13.41 }),
    )
    .await
    .unwrap();
    let now = structured(&result);
    assert_eq!(now["temperatureC"], 3.5);
    assert_eq!(now["feelsLikeC"], 0.4);
    assert_eq!(now["humidityPercent"], 81.0);
    assert_eq!(now["description"], "Slight rain");
    assert_eq!(now["timezone"], "Europe/Berlin");
    assert_eq!(now["windDirectionDeg"], 250.0);
    let uri = &server.seen()[0].uri;
    assert!(
        uri.starts_with("/v1/forecast?latitude=52.52&longitude=13.41&current="),
        "{uri}"
    );
    assert!(uri.ends_with("&timezone=auto"), "{uri}");
}

#[tokio::test]
async fn daily_forecast() {
    let server = api().await;
    let dir = ConfigDir::new();
    let plugin = weather_plugin(&dir, &server);
    let result = try_call(
        &plugin,
        "weather_forecast",
        json!({ "latitude": 52.52, "longitude": 13.41, "days": 2 }),
    )
    .await
    .unwrap();
    let days = structured(&result);
    let days = &days["value"];
    assert_eq!(days[0]["date"], "2026-11-30");
    assert_eq!(days[0]["description"], "Overcast");
    assert_eq!(days[0]["precipitationChancePercent"], 10.0);
    assert_eq!(days[1]["description"], "Slight snowfall");
    assert_eq!(days[1]["minC"], -3.2);
    assert_eq!(days[1]["precipitationChancePercent"], Value::Null);
    assert!(server.seen()[0].uri.contains("forecast_days=2"));
}

#[tokio::test]
async fn bad_places_and_api_errors_are_clear() {
    let server = api().await;
    let dir = ConfigDir::new();
    let plugin = weather_plugin(&dir, &server);
    for (tool, args, expected) in [
        (
            "weather_current",
            json!({ "latitude": 95.0, "longitude": 0.0 }),
            "latitude: 95.0 is greater than the maximum of 90",
        ),
        (
            "weather_forecast",
            json!({ "latitude": 0.0, "longitude": 0.0, "days": 17 }),
            "days: 17 is greater than the maximum of 16",
        ),
    ] {
        // The schema's bounds refuse them before the plugin runs.
        let error = try_call(&plugin, tool, args).await.unwrap_err();
        assert!(error.contains(expected), "{error}");
    }
    assert!(server.seen().is_empty(), "bad input never reaches the API");

    // The API's own refusal (this server refuses latitude 45), passed on with its reason.
    let result = try_call(
        &plugin,
        "weather_current",
        json!({ "latitude": 45.0, "longitude": 0.0 }),
    )
    .await
    .unwrap();
    assert_eq!(result.is_error, Some(true));
    let text = &result.content[0].as_text().unwrap().text;
    assert!(
        text.contains(
            "the weather API answered HTTP 400: Latitude must be in range of -90 to 90°."
        ),
        "{text}"
    );

    // Without the grant, the default public API is out of reach, and moat says so.
    let ungranted = load_source(dir.source("weather", plugins::WEATHER, "", ""));
    let result = try_call(
        &ungranted,
        "weather_current",
        json!({ "latitude": 52.52, "longitude": 13.41 }),
    )
    .await
    .unwrap();
    assert_eq!(result.is_error, Some(true));
    let text = &result.content[0].as_text().unwrap().text;
    assert!(
        text.contains(
            "network access to api.open-meteo.com:443 denied: not granted to plugin \"weather\""
        ),
        "{text}"
    );
}
