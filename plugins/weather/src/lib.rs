//! The `weather` plugin: current conditions and daily forecasts from an Open-Meteo-shaped API,
//! whose base URL is `WEATHER_API_URL` (granted by the operator) or the public one.

use moat_guest::http;
use serde::Deserialize;

moat_guest::generate!("weather");

use exports::moat::weather::tools::{Conditions, Day, Guest};

const DEFAULT_API: &str = "https://api.open-meteo.com";
/// The most bytes of an API answer read; a forecast is a few KiB.
const MAX_ANSWER: usize = 1 << 20;

struct Weather;

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    timezone: String,
    current: Option<Current>,
    daily: Option<Daily>,
}

#[derive(Deserialize)]
struct Current {
    time: String,
    temperature_2m: f64,
    apparent_temperature: f64,
    relative_humidity_2m: f64,
    precipitation: f64,
    weather_code: u8,
    wind_speed_10m: f64,
    wind_direction_10m: f64,
}

#[derive(Deserialize)]
struct Daily {
    time: Vec<String>,
    weather_code: Vec<u8>,
    temperature_2m_max: Vec<f64>,
    temperature_2m_min: Vec<f64>,
    precipitation_sum: Vec<f64>,
    #[serde(default)]
    precipitation_probability_max: Vec<Option<f64>>,
}

/// The API's own error answer: `{"error": true, "reason": "…"}`.
#[derive(Deserialize)]
struct ApiError {
    reason: String,
}

impl Guest for Weather {
    fn current(latitude: f64, longitude: f64) -> Result<Conditions, String> {
        let answer = query(
            latitude,
            longitude,
            "current=temperature_2m,relative_humidity_2m,apparent_temperature,precipitation,\
             weather_code,wind_speed_10m,wind_direction_10m",
        )?;
        let c = answer
            .current
            .ok_or("the weather API's answer has no current conditions")?;
        Ok(Conditions {
            time: c.time,
            timezone: answer.timezone,
            description: describe(c.weather_code).to_string(),
            temperature_c: c.temperature_2m,
            feels_like_c: c.apparent_temperature,
            humidity_percent: c.relative_humidity_2m,
            precipitation_mm: c.precipitation,
            wind_speed_kmh: c.wind_speed_10m,
            wind_direction_deg: c.wind_direction_10m,
        })
    }

    fn forecast(latitude: f64, longitude: f64, days: Option<u8>) -> Result<Vec<Day>, String> {
        let days = days.unwrap_or(7);
        if !(1..=16).contains(&days) {
            return Err(format!("days must be from 1 to 16, not {days}"));
        }
        let answer = query(
            latitude,
            longitude,
            &format!(
                "daily=weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,\
                 precipitation_probability_max&forecast_days={days}"
            ),
        )?;
        let d = answer
            .daily
            .ok_or("the weather API's answer has no daily forecast")?;
        let n = d.time.len();
        if [
            d.weather_code.len(),
            d.temperature_2m_max.len(),
            d.temperature_2m_min.len(),
            d.precipitation_sum.len(),
        ]
        .iter()
        .any(|&len| len != n)
        {
            return Err("the weather API's daily series differ in length".into());
        }
        Ok((0..n)
            .map(|i| Day {
                date: d.time[i].clone(),
                description: describe(d.weather_code[i]).to_string(),
                max_c: d.temperature_2m_max[i],
                min_c: d.temperature_2m_min[i],
                precipitation_mm: d.precipitation_sum[i],
                precipitation_chance_percent: d
                    .precipitation_probability_max
                    .get(i)
                    .copied()
                    .flatten(),
            })
            .collect())
    }
}

/// Asks the forecast endpoint for `fields` at a place.
fn query(latitude: f64, longitude: f64, fields: &str) -> Result<Answer, String> {
    if !(-90.0..=90.0).contains(&latitude) {
        return Err(format!("latitude must be from -90 to 90, not {latitude}"));
    }
    if !(-180.0..=180.0).contains(&longitude) {
        return Err(format!(
            "longitude must be from -180 to 180, not {longitude}"
        ));
    }
    let base = std::env::var("WEATHER_API_URL").unwrap_or_else(|_| DEFAULT_API.into());
    let url = format!(
        "{}/v1/forecast?latitude={latitude}&longitude={longitude}&{fields}&timezone=auto",
        base.trim_end_matches('/')
    );
    let response = http::get(&url, &[("accept", "application/json")], MAX_ANSWER)
        .map_err(|e| format!("asking the weather API at {base}: {e}"))?;
    if response.truncated {
        return Err(format!(
            "the weather API's answer is over {MAX_ANSWER} bytes"
        ));
    }
    if response.status != 200 {
        let reason = serde_json::from_slice::<ApiError>(&response.body)
            .map(|e| e.reason)
            .unwrap_or_else(|_| {
                String::from_utf8_lossy(&response.body)
                    .chars()
                    .take(200)
                    .collect()
            });
        return Err(format!(
            "the weather API answered HTTP {}: {reason}",
            response.status
        ));
    }
    serde_json::from_slice(&response.body)
        .map_err(|e| format!("the weather API's answer is not what was expected: {e}"))
}

/// A WMO weather interpretation code in words.
fn describe(code: u8) -> &'static str {
    match code {
        0 => "Clear sky",
        1 => "Mainly clear",
        2 => "Partly cloudy",
        3 => "Overcast",
        45 => "Fog",
        48 => "Depositing rime fog",
        51 => "Light drizzle",
        53 => "Moderate drizzle",
        55 => "Dense drizzle",
        56 => "Light freezing drizzle",
        57 => "Dense freezing drizzle",
        61 => "Slight rain",
        63 => "Moderate rain",
        65 => "Heavy rain",
        66 => "Light freezing rain",
        67 => "Heavy freezing rain",
        71 => "Slight snowfall",
        73 => "Moderate snowfall",
        75 => "Heavy snowfall",
        77 => "Snow grains",
        80 => "Slight rain showers",
        81 => "Moderate rain showers",
        82 => "Violent rain showers",
        85 => "Slight snow showers",
        86 => "Heavy snow showers",
        95 => "Thunderstorm",
        96 => "Thunderstorm with slight hail",
        99 => "Thunderstorm with heavy hail",
        _ => "Unknown weather",
    }
}

export!(Weather);
