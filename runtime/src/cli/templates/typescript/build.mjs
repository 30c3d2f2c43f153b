// Bundles plugin.ts with its npm dependencies (esbuild), then builds the bundle into a WASI 0.2
// component of the world in wit/: `node build.mjs OUT.wasm WORLD` (`moat build` runs it, then
// embeds the WIT docs and the manifest). WASI features the plugin does not use are left out,
// so that it imports only what it needs.
import { componentize } from "@bytecodealliance/componentize-js";
import { build } from "esbuild";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

const [out, world] = process.argv.slice(2);
await build({
    entryPoints: ["plugin.ts"],
    bundle: true,
    format: "esm",
    platform: "neutral",
    outfile: "build/plugin.js",
    logLevel: "warning",
});
const { component } = await componentize({
    sourcePath: "build/plugin.js",
    witPath: "wit",
    worldName: world,
    disableFeatures: ["random", "clocks", "http", "fetch-event"],
});
await mkdir(dirname(out), { recursive: true });
await writeFile(out, component);
