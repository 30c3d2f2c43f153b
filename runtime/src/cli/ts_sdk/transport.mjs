// moat's stand-in for the MCP SDK's stdio transport, and the component's export.
//
// `moat build` bundles a server with the SDK's `server/stdio` module aliased to this file, so
// the author's `new StdioServerTransport()` and `server.connect(transport)` stay as they are.
// moat calls `mcpServer.handle` with one JSON-RPC message at a time; what the server sends
// back goes out as the response, or through the `mcp-client` import while it works.
// build.mjs adds wasi:cli/environment to the world, for `process.env` below.
import { getEnvironment } from "wasi:cli/environment@0.2.3";
import { notify, request } from "moat:plugin/mcp-client@0.1.0";

let connected; // the transport `server.connect` started last
const pending = new Map(); // request id → resolve, until the server answers it

export class StdioServerTransport {
    // The SDK's constructor takes stdin and stdout streams: there are none to take here.
    constructor(_stdin, _stdout) {
        this.onmessage = undefined;
        this.onclose = undefined;
        this.onerror = undefined;
    }

    async start() {
        connected = this;
        warmed ??= warmUp(this);
    }

    async send(message) {
        if (message.method === undefined) {
            pending.get(message.id)?.(message);
            pending.delete(message.id);
        } else if (message.id === undefined) {
            notify(JSON.stringify(message));
        } else {
            // The client's answer, awaited synchronously by moat, comes back as a message
            // would; after a tick, once the SDK waits for it.
            const reply = JSON.parse(request(JSON.stringify(message)));
            queueMicrotask(() => this.onmessage?.(reply));
        }
    }

    async close() {
        if (connected === this) connected = undefined;
        this.onclose?.();
    }
}

// The server's first `start` runs while componentize-js loads the server, at build time, and the
// engine's snapshot keeps what that run left. A handshake, the lists and a call of no tool then
// leave the SDK's request paths compiled and zod's schemas built in the snapshot, where each
// fresh instance finds them instead of making them again for its one call. No handler of the
// author's runs; moat's own handshake, as each instance is made, overrides this one.
let warmed;
async function warmUp(transport) {
    const ask = (id, method, params) => {
        const answered = new Promise((resolve) => pending.set(id, resolve));
        transport.onmessage?.({ jsonrpc: "2.0", id, method, params });
        return answered;
    };
    await ask("moat-warm-up-1", "initialize", {
        protocolVersion: "2025-11-25",
        capabilities: { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} },
        clientInfo: { name: "moat build", version: "0" },
    });
    transport.onmessage?.({ jsonrpc: "2.0", method: "notifications/initialized" });
    await ask("moat-warm-up-2", "tools/list", {});
    await ask("moat-warm-up-3", "tools/call", { name: "", arguments: {} });
}

function error(id, code, message) {
    return JSON.stringify({ jsonrpc: "2.0", id, error: { code, message } });
}

export const mcpServer = {
    async handle(text) {
        let message;
        try {
            message = JSON.parse(text);
        } catch (e) {
            return error(null, -32700, `not JSON: ${e.message}`);
        }
        const isRequest = message.method !== undefined && message.id !== undefined;
        if (!connected) {
            return isRequest
                ? error(message.id, -32603, "the server never called `connect` with a StdioServerTransport")
                : "";
        }
        if (!isRequest) {
            connected.onmessage?.(message);
            return "";
        }
        await warmed;
        const response = new Promise((resolve) => pending.set(message.id, resolve));
        connected.onmessage?.(message);
        return JSON.stringify(await response);
    },
};

// Node's `process`, as far as a sandboxed server needs it. `env` asks the host at each read, so
// a handler sees what moat grants to this call, never what the build saw.
const written = new Map(); // what the server set itself; `undefined` for deleted
function lookup(name) {
    if (written.has(name)) return written.get(name);
    return getEnvironment().find(([key]) => key === name)?.[1];
}
function names() {
    const all = new Set(getEnvironment().map(([key]) => key));
    for (const [key, value] of written) value === undefined ? all.delete(key) : all.add(key);
    return [...all];
}
const env = new Proxy(
    {},
    {
        get: (_, name) => (typeof name === "string" ? lookup(name) : undefined),
        has: (_, name) => typeof name === "string" && lookup(name) !== undefined,
        set: (_, name, value) => {
            written.set(name, String(value));
            return true;
        },
        deleteProperty: (_, name) => {
            written.set(name, undefined);
            return true;
        },
        ownKeys: () => names(),
        getOwnPropertyDescriptor: (_, name) => {
            const value = typeof name === "string" ? lookup(name) : undefined;
            return value === undefined
                ? undefined
                : { value, writable: true, enumerable: true, configurable: true };
        },
    },
);

export const process = {
    env,
    argv: ["moat", "server"],
    platform: "wasi",
    versions: {},
    cwd: () => "/",
    nextTick: (callback, ...args) => queueMicrotask(() => callback(...args)),
    // Servers listen for SIGINT and the like to close cleanly: no signal ever comes.
    on() {
        return process;
    },
    once() {
        return process;
    },
    off() {
        return process;
    },
    exit(code = 0) {
        throw new Error(`the server called process.exit(${code})`);
    },
    stderr: { write: (text) => (console.error(String(text).replace(/\n$/, "")), true) },
};
