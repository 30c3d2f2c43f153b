// Makes plugin.ts into a WASI 0.2 component of the world in wit/: `node build.mjs OUT.wasm WORLD`
// (`moat build` runs it, then embeds the WIT docs and the manifest), or `node build.mjs --check`
// to stop after the type check:
//   1. types/ gets the TypeScript declarations of the world and of what it imports from moat
//      (`moat:plugin/log@0.1.0`…), generated from the WIT by jco;
//   2. tsc checks plugin.ts against them: each export of the world there, with the WIT's types;
//   3. esbuild bundles plugin.ts with its npm dependencies;
//   4. componentize-js makes the bundle a component, leaving out the WASI features the plugin
//      does not use, so that it imports only what it needs.
import { componentize } from "@bytecodealliance/componentize-js";
import { generateGuestTypes } from "@bytecodealliance/jco-transpile";
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const check = process.argv[2] === "--check";
const [out, world] = check ? [] : process.argv.slice(2); // no world: the WIT's one

// The type generator is itself a component, on its own WASI shim (newer than the one
// componentize-js needs): it may read this project's folder alone.
const require = createRequire(import.meta.url);
const shim = createRequire(require.resolve("@bytecodealliance/jco-transpile"))
    .resolve("@bytecodealliance/preview2-shim/filesystem");
const { _setPreopens } = await import(pathToFileURL(shim));
_setPreopens({ [process.cwd()]: process.cwd() });
const types = await generateGuestTypes("wit", {
    worldName: world,
    name: "world",
    guest: true,
    outDir: "types/",
});
await rm("types", { recursive: true, force: true });
for (const [path, text] of Object.entries(types)) {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, text);
}
const module = new TextDecoder().decode(types["types/world.d.ts"]).match(/declare module '([^']+)'/)[1];
await writeFile(
    "types/exports.ts",
    `// Fails the type check unless plugin.ts exports each function of the world, typed as its WIT\n` +
        `// says; one may be async (componentize-js waits for its promise).\n` +
        `import type * as World from "${module}";\nimport * as plugin from "../plugin";\n` +
        `type MayAwait<T> = {\n` +
        `    [K in keyof T]: T[K] extends (...args: infer A) => infer R\n` +
        `        ? (...args: A) => R | Promise<R>\n        : MayAwait<T[K]>;\n};\n` +
        `plugin satisfies MayAwait<typeof World>;\n`,
);
const tsc = require.resolve("typescript/bin/tsc");
try {
    execFileSync(process.execPath, [tsc, "--noEmit"], { stdio: "inherit" });
} catch {
    process.exit(1); // tsc said why
}
if (check) process.exit(0);

// fetch() needs wasi:http, which a plugin that asks for no network is better without.
const { moat = {} } = JSON.parse(await readFile("package.json", "utf8"));
const asksForNetwork = (moat.network ?? []).length > 0;
await build({
    entryPoints: ["plugin.ts"],
    bundle: true,
    format: "esm",
    platform: "neutral",
    outfile: join("build", "plugin.js"),
    external: ["moat:*", "wasi:*"], // the component's imports, which componentize-js links
    logLevel: "warning",
});
const { component } = await componentize({
    sourcePath: join("build", "plugin.js"),
    witPath: "wit",
    worldName: world,
    disableFeatures: ["random", "clocks", "fetch-event", ...(asksForNetwork ? [] : ["http"])],
});
await mkdir(dirname(out), { recursive: true });
await writeFile(out, component);
