// Builds echo.js into a WASI 0.2 component of the world in wit/echo.wit:
//
//   node build.mjs OUT.wasm
//
// Every WASI feature of the engine is left out (echo needs none), so the component imports
// nothing: it loads under moat with no grants. Without `stdio` a JavaScript exception is not
// printed, but it still traps the call.
import { componentize } from "@bytecodealliance/componentize-js";
import { mkdir, rename, writeFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const out = process.argv[2];
if (!out || process.argv.length > 3) {
    console.error("usage: node build.mjs OUT.wasm");
    process.exit(2);
}

const here = dirname(fileURLToPath(import.meta.url));
const { component } = await componentize({
    sourcePath: resolve(here, "echo.js"),
    witPath: resolve(here, "wit"),
    worldName: "echo",
    disableFeatures: ["stdio", "random", "clocks", "http", "fetch-event"],
});
// Written beside OUT and renamed, so an interrupted build leaves no half component behind.
await mkdir(dirname(resolve(out)), { recursive: true });
await writeFile(`${out}.partial`, component);
await rename(`${out}.partial`, out);
