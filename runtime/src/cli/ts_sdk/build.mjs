// Makes an MCP server written with the TypeScript SDK into a WASI 0.2 component of the world
// `mcp-server-plugin` (wit/plugin.wit):
//
//   node build.mjs [--wit DIR] PROJECT OUT.wasm
//
// DIR holds plugin.wit (default: wit/ beside this file). The server stays as its author wrote
// it: esbuild bundles its entry with the SDK's stdio transport swapped for transport.mjs, which
// answers moat's calls of `mcp-server.handle`; componentize-js makes the bundle a component.
// Before that, what cannot work in the sandbox is refused with the chain of imports that brought
// it in, and what the build would freeze (environment reads while the modules load) is refused
// with where it happens. Exit code 1 for a server that cannot be built, 2 for a wrong command.
import { componentize } from "@bytecodealliance/componentize-js";
import { build } from "esbuild";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const transport = join(here, "transport.mjs");

const args = process.argv.slice(2);
let witDir = join(here, "wit");
if (args[0] === "--wit") {
    witDir = resolve(args[1] ?? "");
    args.splice(0, 2);
}
if (args.length !== 2) {
    console.error("usage: node build.mjs [--wit DIR] PROJECT OUT.wasm");
    process.exit(2);
}
const project = resolve(args[0]);
const out = resolve(args[1]);

class BuildError extends Error {}

// Node modules a sandboxed server cannot use, and what to do instead.
const NO_FILES =
    "the sandbox has no file system for JavaScript: take the data as a tool argument, or fetch it over a granted network host";
const NO_PROCESSES = "a component cannot start processes: do the work in JavaScript, or call a service over a granted network host";
const NO_SOCKETS = "a component has no raw sockets: use fetch() with the host in the package.json's moat.network";
const NO_SERVING = "moat serves HTTP itself: keep StdioServerTransport and server.connect(transport)";
const REFUSED = {
    fs: NO_FILES,
    "fs/promises": NO_FILES,
    child_process: NO_PROCESSES,
    cluster: NO_PROCESSES,
    worker_threads: "a component runs one thread: do the work in the handler (async functions are fine)",
    net: NO_SOCKETS,
    tls: NO_SOCKETS,
    dgram: NO_SOCKETS,
    http: `${NO_SOCKETS}; to serve, ${NO_SERVING}`,
    https: `${NO_SOCKETS}; to serve, ${NO_SERVING}`,
    http2: `${NO_SOCKETS}; to serve, ${NO_SERVING}`,
};
const SERVERS = /^(express|hono|fastify|@hono\/node-server|@modelcontextprotocol\/(express|hono|node))(\/|$)|^@modelcontextprotocol\/sdk\/server\/(sse|streamableHttp|webStandardStreamableHttp|express)(\.js)?$/;
const STDIO = /^@modelcontextprotocol\/(sdk\/server\/stdio(\.js)?|server\/stdio)$/;
const NODE = new Set(builtinModules);
const WRAPPER = "moat-entry.js"; // imports the entry, exports what the world exports

const problems = []; // what the sandbox cannot give: { importer, spec, what, advice }
const warnings = [];

async function run(temp) {
    const pkg = await readJson(join(project, "package.json"));
    const entry = findEntry(pkg);
    const asksForNetwork = (pkg.moat?.network ?? []).length > 0;
    const bundle = join(temp, "server.js");
    reportProblems(await bundleFor(entry, bundle, { asksForNetwork }));
    await checkEnvironmentReads(entry, temp);
    const modules = splitModules(await readFile(bundle, "utf8"));
    warnUnicode(modules);
    for (const warning of warnings) console.error(`moat build: warning: ${warning}`);

    let component;
    try {
        ({ component } = await componentize({
            sourcePath: bundle,
            witPath: await witFolder(temp),
            worldName: "mcp-server-plugin-build",
            // stdio prints console.error; clocks and random serve the SDK's timers and ids;
            // fetch() needs http, which a server that asks for no network is better without.
            disableFeatures: ["fetch-event", ...(asksForNetwork ? [] : ["http"])],
            // Browser builds (the SDK 2's JSON Schema validator) read `location` while loading,
            // which the engine refuses outside a request unless it is set for the build.
            runtimeArgs: "--init-location https://server.moat.invalid/",
        }));
    } catch (error) {
        throw new BuildError(explainLoadFailure(String(error.message ?? error), modules));
    }
    await mkdir(dirname(out), { recursive: true });
    await writeFile(`${out}.partial`, component);
    await rename(`${out}.partial`, out);
}

async function readJson(path) {
    try {
        return JSON.parse(await readFile(path, "utf8"));
    } catch (error) {
        if (error.code === "ENOENT") return {};
        throw new BuildError(`  ${path}: ${error.message}`);
    }
}

// The server's entry: package.json's `main`, else its `bin`, else a usual name. A compiled
// entry that is not there (dist/index.js before `tsc`) is taken from its TypeScript source.
function findEntry(pkg) {
    const named = [pkg.main, ...(typeof pkg.bin === "string" ? [pkg.bin] : Object.values(pkg.bin ?? {}))];
    for (const path of named.filter(Boolean)) {
        const stem = path.replace(/^\.\//, "").replace(/\.[cm]?js$/, "");
        const source = stem.replace(/^(dist|build|lib|out)\//, "src/");
        const found = [path, `${stem}.ts`, `${stem}.mts`, `${source}.ts`, `${source}.mts`].find((candidate) =>
            existsSync(join(project, candidate)),
        );
        if (found) return join(project, found);
    }
    const usual = ["src/index.ts", "src/index.js", "index.ts", "index.js", "src/server.ts", "server.ts", "server.js"];
    const found = usual.find((candidate) => existsSync(join(project, candidate)));
    if (!found) {
        throw new BuildError(`  no entry: set \`main\` in package.json, or write one of ${usual.join(", ")}`);
    }
    return join(project, found);
}

// Bundles the server for componentize-js (ESM for an engine without Node) or, given `stubs`,
// for Node with moat's imports stubbed and `process.env` recording reads. Returns the import
// graph: each module → the module that first imported it.
async function bundleFor(entry, outfile, { stubs, asksForNetwork }) {
    const graph = new Map();
    const component = !stubs;
    // Without wasi:http, the engine's fetch() traps the instance: let it reject instead.
    const noFetch = component && !asksForNetwork
        ? `globalThis.fetch = async () => { throw new TypeError("fetch: this server asks for no network (package.json's moat.network)"); };\n`
        : "";
    const processShim = component ? transport : join(stubs, "process.mjs");
    const sandbox = {
        name: "moat-sandbox",
        setup(build) {
            build.onResolve({ filter: /.*/ }, async (args) => {
                if (args.pluginData === "moat-resolve") return undefined;
                const found = await classify(build, args, stubs);
                if (found.path && !found.external && args.importer) graph.set(found.path, args.importer);
                return found;
            });
            build.onLoad({ filter: /.*/, namespace: "moat-process" }, () => ({
                contents: `import { process } from ${JSON.stringify(processShim)};\nexport default process;\nexport const env = process.env;\n`,
                resolveDir: here,
            }));
        },
    };
    await build({
        stdin: {
            contents: `import ${JSON.stringify(entry)};\nexport { mcpServer } from ${JSON.stringify(transport)};\n${noFetch}`,
            resolveDir: project,
            sourcefile: WRAPPER,
        },
        absWorkingDir: project,
        bundle: true,
        format: "esm",
        platform: component ? "neutral" : "node",
        mainFields: component ? ["module", "main"] : undefined,
        conditions: component ? ["browser"] : undefined,
        outfile,
        sourcemap: component ? false : "inline",
        inject: [processShim],
        define: { "process.env.NODE_ENV": '"production"' },
        // A `\p{…}` regex literal is a syntax error for the engine, which would refuse the
        // whole bundle: as `new RegExp(…)` it fails only where it runs.
        supported: { "regexp-unicode-property-escapes": false },
        external: component ? ["moat:*", "wasi:*"] : [],
        plugins: [sandbox],
        logLevel: "silent",
    }).catch((failure) => {
        throw new BuildError(failure.errors.map((e) => `  ${formatMessage(e)}`).join("\n"));
    });
    return graph;
}

const STUBS = {
    client: `export function notify() {}\nexport function request() { return '{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"no client while building"}}'; }\n`,
    environment: `export function getEnvironment() { return []; }\n`,
    // Records every environment read, with where it came from, while the modules load.
    process: `const reads = (globalThis.__moatEnvReads = []);
function note(name) { reads.push({ name, stack: new Error().stack }); }
const env = new Proxy({}, {
    get(_, name) { if (typeof name === "string") note(name); return undefined; },
    has(_, name) { if (typeof name === "string") note(name); return false; },
    ownKeys() { note("(all of them)"); return []; },
});
export const process = new Proxy(globalThis.process, { get: (real, key) => (key === "env" ? env : real[key]) });
`,
};

// Where an import goes: transport.mjs for the SDK's stdio transport, moat's process shim for
// Node's, and a recorded problem (left external, so that every problem is found) for what the
// sandbox does not have.
async function classify(build, args, stubs) {
    const spec = args.path;
    const name = spec.replace(/^node:/, "");
    if (STDIO.test(spec)) return { path: transport };
    if (name === "process") return { path: "process", namespace: "moat-process" };
    if (/^(moat|wasi):/.test(spec)) {
        if (!stubs) return { path: spec, external: true };
        return { path: join(stubs, spec.startsWith("moat:") ? "client.mjs" : "environment.mjs") };
    }
    if (stubs && NODE.has(name)) return { path: spec, external: true };
    if (REFUSED[name] && NODE.has(name)) return refuse(args, `Node's \`${spec}\` module`, REFUSED[name]);
    if (SERVERS.test(spec)) return refuse(args, `\`${spec}\``, NO_SERVING);
    const found = await build.resolve(spec, {
        kind: args.kind,
        importer: args.importer,
        resolveDir: args.resolveDir,
        namespace: args.namespace,
        pluginData: "moat-resolve",
    });
    if (found.errors.length === 0) return found;
    if (spec.startsWith("node:") || NODE.has(name)) {
        return refuse(args, `Node's \`${spec}\` module`, "the component runs JavaScript without Node: use web APIs (fetch, URL, TextEncoder, crypto.getRandomValues)");
    }
    return refuse(args, `\`${spec}\``, "it cannot be found: is it installed (`npm install`)?");
}

function refuse(args, what, advice) {
    if (!problems.some((p) => p.importer === args.importer && p.what === what)) {
        problems.push({ importer: args.importer, spec: args.path, what, advice });
    }
    return { path: args.path, external: true };
}

function reportProblems(graph) {
    if (problems.length === 0) return;
    const chainTo = (module) => {
        const chain = [];
        for (let at = module; at && at !== join(project, WRAPPER); at = graph.get(at)) chain.unshift(shortName(at));
        return chain.join(" → ");
    };
    throw new BuildError(
        problems
            .map(({ importer, spec, what, advice }) => `  ${what}: ${chainTo(importer)} → ${spec}\n    ${advice}`)
            .join("\n"),
    );
}

function shortName(path) {
    const short = relative(project, path);
    const dependency = short.lastIndexOf(`node_modules${sep}`);
    return short.startsWith("..") && dependency >= 0 ? short.slice(dependency) : short;
}

// Loads the server, bundled for Node, in a child Node process and fails the build on each
// environment variable the server's own modules read while loading: componentize-js runs that
// code at build time and keeps what it got (nothing: the build has no environment), so the
// server must read it in its handlers, where moat passes what it grants. Reads by dependencies
// are only warned about: their authors, not the server's, can move them.
async function checkEnvironmentReads(entry, temp) {
    const stubs = join(temp, "stubs");
    await mkdir(stubs);
    for (const [name, code] of Object.entries(STUBS)) await writeFile(join(stubs, `${name}.mjs`), code);
    const preflight = join(temp, "preflight.mjs");
    await bundleFor(entry, preflight, { stubs });
    const runner = join(temp, "preflight-run.mjs");
    await writeFile(
        runner,
        `await import(${JSON.stringify(pathToFileURL(preflight).href)});\n` +
            // What the entry's own promises do next still runs before the snapshot.
            `await new Promise((resolve) => setTimeout(resolve, 100));\n` +
            `console.log("\\u0000moat" + JSON.stringify(globalThis.__moatEnvReads));\nprocess.exit(0);\n`,
    );
    const output = await new Promise((resolve) =>
        execFile(
            process.execPath,
            ["--enable-source-maps", runner],
            { cwd: project, timeout: 30_000, maxBuffer: 1 << 24 },
            (_error, stdout) => resolve(stdout),
        ),
    );
    const marker = output.lastIndexOf("\u0000moat");
    if (marker < 0) return; // loading failed in Node: componentize-js says why, if it fails there too
    const reads = JSON.parse(output.slice(marker + 5));
    const own = [];
    for (const { name, stack } of reads) {
        const frame = stack
            .split("\n")
            .slice(1)
            .map((line) => line.match(/\(?((?:file:\/\/)?\/[^()]*?):(\d+):\d+\)?$/))
            .find((match) => match && !match[1].includes(temp));
        const file = frame ? fileURLToPath(pathToFileURL(frame[1].replace(/^file:\/\//, ""))) : undefined;
        const where = file ? `${shortName(file)}:${frame[2]}` : "a module";
        if (file?.includes(`${sep}node_modules${sep}`)) {
            warnings.push(`${where} reads process.env.${name} while loading, at build time: it will always see it unset`);
        } else {
            own.push(`  process.env.${name} is read at ${where} while the server loads, which happens at build time: the component would keep its build-time value (unset)\n    read it inside the tool handler, where moat passes the variables the server is granted`);
        }
    }
    if (own.length > 0) throw new BuildError([...new Set(own)].join("\n"));
}

// The bundle's modules, from the `// path` line esbuild writes before each one.
function splitModules(code) {
    const modules = [];
    let line = 1;
    for (const text of code.split("\n")) {
        const marker = text.match(/^\/\/ ((?:\.\.\/)*[\w@.\-/]+\.[cm]?[jt]sx?)$/);
        if (marker) modules.push({ path: resolve(project, marker[1]), firstLine: line, code: "" });
        else if (modules.length > 0) modules.at(-1).code += `${text}\n`;
        line++;
    }
    return modules;
}

function packageOf(path) {
    return path.match(/node_modules[\\/]((?:@[^\\/]+[\\/])?[^\\/]+)/)?.[1]?.replace("\\", "/");
}

function describe(path) {
    const name = packageOf(path);
    return name ? `${shortName(path)} (dependency ${name})` : `${shortName(path)} (the project's own code)`;
}

// The engine has no Unicode data: a `\p{…}` regex throws a SyntaxError where it is built, and
// strings have no normalize(). Both fail only where they run, so the build goes on, naming the
// project's own modules one by one and its dependencies by package (most carry such code on
// paths a server rarely takes, like zod's emoji check).
function warnUnicode(modules) {
    const uses = (pattern) => {
        const found = modules.filter((m) => pattern.test(m.code));
        const own = found.filter((m) => !packageOf(m.path)).map((m) => `\n    ${shortName(m.path)}`);
        const packages = [...new Set(found.map((m) => packageOf(m.path)).filter(Boolean))];
        if (packages.length > 0) own.push(`\n    in the dependencies ${packages.join(", ")}`);
        return own;
    };
    const escapes = uses(/\\\\?[pP]\{/);
    if (escapes.length > 0) {
        warnings.push(`Unicode property escapes (\\p{…}) throw a SyntaxError in the component where the regex is built; used:${escapes.join("")}`);
    }
    const normalize = uses(/\.normalize\(/);
    if (normalize.length > 0) {
        warnings.push(`String.prototype.normalize does not exist in the component (calling it throws a TypeError); called:${normalize.join("")}`);
    }
}

// componentize-js runs the bundle's top level to snapshot it: an exception there names a line
// of the bundle, which names the module.
function explainLoadFailure(message, modules) {
    const at = message.match(/server\.js:(\d+):\d+/);
    const module = at && modules.findLast((m) => m.firstLine <= Number(at[1]));
    const where = module ? `\n  while loading ${describe(module.path)}` : "";
    return `  the server fails while loading (componentize-js runs its top level at build time):${where}\n  ${message.replace(/\n/g, "\n  ")}`;
}

// plugin.wit, with a world that adds the environment import transport.mjs reads process.env from.
async function witFolder(temp) {
    const wit = join(temp, "wit");
    await mkdir(join(wit, "deps", "cli"), { recursive: true });
    for (const file of await readdir(witDir)) {
        if (file.endsWith(".wit")) await copyFile(join(witDir, file), join(wit, file));
    }
    await writeFile(
        join(wit, "moat-build.wit"),
        `package moat:plugin@0.1.0;\n\nworld mcp-server-plugin-build {\n    include mcp-server-plugin;\n    import wasi:cli/environment@0.2.3;\n}\n`,
    );
    await writeFile(
        join(wit, "deps", "cli", "environment.wit"),
        `package wasi:cli@0.2.3;\n\ninterface environment {\n    get-environment: func() -> list<tuple<string, string>>;\n    get-arguments: func() -> list<string>;\n    initial-cwd: func() -> option<string>;\n}\n`,
    );
    return wit;
}

function formatMessage({ text, location }) {
    return location ? `${location.file}:${location.line}:${location.column}: ${text}` : text;
}

// Last, once every constant above is set.
try {
    const temp = await mkdtemp(join(tmpdir(), "moat-ts-sdk-"));
    try {
        await run(temp);
    } finally {
        await rm(temp, { recursive: true, force: true });
    }
} catch (error) {
    if (!(error instanceof BuildError)) throw error;
    console.error(`moat build: cannot build ${project}:\n${error.message}`);
    process.exit(1);
}
