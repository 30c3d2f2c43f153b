// Calls the built component through moat, as an MCP client would: `moat build`, then `npm test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

test("greet answers", () => {
    const out = execFileSync("moat", ["call", "build/{{name}}.wasm", "greet", JSON.stringify({ name: "moat" })]);
    assert.equal(JSON.parse(out).content[0].text, "Hello, moat!");
});
