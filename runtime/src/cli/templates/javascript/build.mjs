// Builds plugin.js into a WASI 0.2 component of the world in wit/: `node build.mjs OUT.wasm`
// (`moat build` runs it, then embeds the WIT docs and the manifest). WASI features the plugin
// does not use are left out, so that it imports only what it needs.
import { componentize } from "@bytecodealliance/componentize-js";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

const [out, world] = process.argv.slice(2);
const { component } = await componentize({
    sourcePath: "plugin.js",
    witPath: "wit",
    worldName: world,
    disableFeatures: ["random", "clocks", "http", "fetch-event"],
});
await mkdir(dirname(out), { recursive: true });
await writeFile(out, component);
