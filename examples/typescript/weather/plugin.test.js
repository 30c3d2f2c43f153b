// Calls the built component through moat, against an Open-Meteo-shaped server on loopback that
// moat.toml grants it: `moat build`, then `npm test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer } from "node:http";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const CURRENT = {
    timezone: "Europe/Berlin",
    current: {
        time: "2026-11-30T10:00", temperature_2m: 3.5, relative_humidity_2m: 81,
        apparent_temperature: 0.4, precipitation: 0.2, weather_code: 61,
        wind_speed_10m: 14.8, wind_direction_10m: 250,
    },
};

/** `moat call` of `tool` with `args`, the plugin granted the API at `port`: the MCP result. */
async function call(port, tool, args) {
    const dir = await mkdtemp(join(tmpdir(), "weather-"));
    const config = join(dir, "moat.toml");
    await writeFile(config, [
        "[plugins.weather]",
        `path = ${JSON.stringify(resolve("build/weather.wasm"))}`,
        `network = ["http://127.0.0.1:${port}"]`,
        `env = { WEATHER_API_URL = "http://127.0.0.1:${port}" }`,
    ].join("\n"));
    const run = promisify(execFile);
    const out = await run("moat", ["call", "-q", "--config", config, "weather", tool, JSON.stringify(args)])
        .catch((failed) => failed); // a tool error exits 1, its result still on stdout
    return JSON.parse(out.stdout);
}

test("the current weather comes from the granted API", async (t) => {
    const seen = [];
    const api = createServer((request, response) => {
        seen.push(request.url);
        const refused = request.url.includes("latitude=45");
        response.writeHead(refused ? 400 : 200, { "content-type": "application/json" });
        response.end(JSON.stringify(refused ? { error: true, reason: "Latitude out of range" } : CURRENT));
    });
    await new Promise((ready) => api.listen(0, "127.0.0.1", ready));
    t.after(() => api.close());
    const port = api.address().port;

    const now = await call(port, "weather_current", { latitude: 52.52, longitude: 13.41 });
    assert.equal(now.isError, false, JSON.stringify(now));
    assert.equal(now.structuredContent.description, "Slight rain");
    assert.equal(now.structuredContent.temperatureC, 3.5);
    assert.match(seen[0], /^\/v1\/forecast\?latitude=52.52&longitude=13.41&current=.*&timezone=auto$/);

    const refused = await call(port, "weather_current", { latitude: 45, longitude: 0 });
    assert.equal(refused.isError, true);
    assert.equal(refused.content[0].text, "the weather API answered HTTP 400: Latitude out of range");
});
