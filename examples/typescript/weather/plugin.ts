// The weather plugin of plugins/weather, in TypeScript: current conditions and daily forecasts
// from an Open-Meteo-shaped API, whose base URL is WEATHER_API_URL (granted by the operator) or
// the public one. An error is thrown as a string: it becomes the `err` of the WIT's `result`.
/// <reference path="./wasi.d.ts" />
import { getEnvironment } from "wasi:cli/environment@0.2.3";
import type { Conditions, Day } from "moat:weather/tools@0.1.0";

const DEFAULT_API = "https://api.open-meteo.com";
/** The most characters of an API answer read; a forecast is a few KiB. */
const MAX_ANSWER = 1 << 20;

async function current(latitude: number, longitude: number): Promise<Conditions> {
    const answer = await query(
        latitude,
        longitude,
        "current=temperature_2m,relative_humidity_2m,apparent_temperature,precipitation," +
            "weather_code,wind_speed_10m,wind_direction_10m",
    );
    const c = answer.current;
    if (!c) throw "the weather API's answer has no current conditions";
    return {
        time: c.time,
        timezone: answer.timezone ?? "",
        description: describe(c.weather_code),
        temperatureC: c.temperature_2m,
        feelsLikeC: c.apparent_temperature,
        humidityPercent: c.relative_humidity_2m,
        precipitationMm: c.precipitation,
        windSpeedKmh: c.wind_speed_10m,
        windDirectionDeg: c.wind_direction_10m,
    };
}

async function forecast(latitude: number, longitude: number, days = 7): Promise<Day[]> {
    if (!(days >= 1 && days <= 16)) throw `days must be from 1 to 16, not ${days}`;
    const answer = await query(
        latitude,
        longitude,
        "daily=weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum," +
            `precipitation_probability_max&forecast_days=${days}`,
    );
    const d = answer.daily;
    if (!d) throw "the weather API's answer has no daily forecast";
    const series = [d.weather_code, d.temperature_2m_max, d.temperature_2m_min, d.precipitation_sum];
    if (series.some((s) => s.length !== d.time.length)) {
        throw "the weather API's daily series differ in length";
    }
    return d.time.map((date, i) => ({
        date,
        description: describe(d.weather_code[i]),
        maxC: d.temperature_2m_max[i],
        minC: d.temperature_2m_min[i],
        precipitationMm: d.precipitation_sum[i],
        precipitationChancePercent: d.precipitation_probability_max?.[i] ?? undefined,
    }));
}

export const tools = { current, forecast };

/** The API's answer, as far as the tools read it. */
interface Answer {
    timezone?: string;
    current?: {
        time: string;
        temperature_2m: number;
        apparent_temperature: number;
        relative_humidity_2m: number;
        precipitation: number;
        weather_code: number;
        wind_speed_10m: number;
        wind_direction_10m: number;
    };
    daily?: {
        time: string[];
        weather_code: number[];
        temperature_2m_max: number[];
        temperature_2m_min: number[];
        precipitation_sum: number[];
        precipitation_probability_max?: (number | null)[];
    };
}

/** Asks the forecast endpoint for `fields` at a place. */
async function query(latitude: number, longitude: number, fields: string): Promise<Answer> {
    if (!(latitude >= -90 && latitude <= 90)) {
        throw `latitude must be from -90 to 90, not ${latitude}`;
    }
    if (!(longitude >= -180 && longitude <= 180)) {
        throw `longitude must be from -180 to 180, not ${longitude}`;
    }
    const base = new Map(getEnvironment()).get("WEATHER_API_URL") ?? DEFAULT_API;
    const url = `${base.replace(/\/+$/, "")}/v1/forecast?latitude=${latitude}&longitude=${longitude}&${fields}&timezone=auto`;
    let response: Response;
    let body: string;
    try {
        response = await fetch(url, { headers: { accept: "application/json" } });
        body = await response.text();
    } catch (e) {
        throw `asking the weather API at ${base}: ${e instanceof Error ? e.message : e}`;
    }
    if (body.length > MAX_ANSWER) throw `the weather API's answer is over ${MAX_ANSWER} characters`;
    if (response.status !== 200) {
        let reason = body.slice(0, 200);
        try {
            reason = JSON.parse(body).reason ?? reason;
        } catch {}
        throw `the weather API answered HTTP ${response.status}: ${reason}`;
    }
    try {
        return JSON.parse(body) as Answer;
    } catch (e) {
        throw `the weather API's answer is not what was expected: ${e}`;
    }
}

/** A WMO weather interpretation code in words. */
function describe(code: number): string {
    return WMO_CODES[code] ?? "Unknown weather";
}

const WMO_CODES: Record<number, string> = {
    0: "Clear sky",
    1: "Mainly clear",
    2: "Partly cloudy",
    3: "Overcast",
    45: "Fog",
    48: "Depositing rime fog",
    51: "Light drizzle",
    53: "Moderate drizzle",
    55: "Dense drizzle",
    56: "Light freezing drizzle",
    57: "Dense freezing drizzle",
    61: "Slight rain",
    63: "Moderate rain",
    65: "Heavy rain",
    66: "Light freezing rain",
    67: "Heavy freezing rain",
    71: "Slight snowfall",
    73: "Moderate snowfall",
    75: "Heavy snowfall",
    77: "Snow grains",
    80: "Slight rain showers",
    81: "Moderate rain showers",
    82: "Violent rain showers",
    85: "Slight snow showers",
    86: "Heavy snow showers",
    95: "Thunderstorm",
    96: "Thunderstorm with slight hail",
    99: "Thunderstorm with heavy hail",
};
