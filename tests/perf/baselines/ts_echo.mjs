// ts-sdk-echo: the `echo_echo` tool of moat's `echo` plugin on the official TypeScript SDK
// (@modelcontextprotocol/sdk), served over stdio, or with `--http HOST:PORT` over Streamable HTTP
// (a transport per session, as the SDK's examples keep them; JSON answers): the same name, input
// schema and result as native-echo, no output schema.
//
// The low-level `Server`, not `McpServer`: McpServer derives the input schema from a zod object,
// which does not come out as the same JSON Schema; here it is given as it is.
//
// Run with the Node 22 `./dev` installs:
//   tests/npm/node_modules/.bin/node tests/perf/baselines/ts_echo.mjs

import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// The SDK is installed in tests/npm/node_modules, which is not on this file's resolution path;
// resolved from there, it is the SDK's CommonJS build (the same code as its ES module one).
const npm = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "npm", "package.json");
const sdk = (path) => {
  const file = createRequire(npm).resolve(`@modelcontextprotocol/sdk/${path}`);
  return import(pathToFileURL(file).href);
};
const { Server } = await sdk("server/index.js");
const { StdioServerTransport } = await sdk("server/stdio.js");
const { StreamableHTTPServerTransport } = await sdk("server/streamableHttp.js");
const { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, isInitializeRequest } =
  await sdk("types.js");

const ECHO = {
  name: "echo_echo",
  description: "Returns `message` exactly as it was given.",
  inputSchema: {
    type: "object",
    properties: { message: { type: "string", description: "the text to send back." } },
    required: ["message"],
    additionalProperties: false,
  },
};

function echoServer() {
  const server = new Server({ name: "ts-sdk-echo", version: "1" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [ECHO] }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    if (request.params.name !== ECHO.name) {
      throw new McpError(ErrorCode.InvalidParams, `unknown tool "${request.params.name}"`);
    }
    const message = request.params.arguments?.message;
    if (typeof message !== "string") {
      throw new McpError(ErrorCode.InvalidParams, "`message` must be a string");
    }
    // As moat renders a string result: text alone.
    return { content: [{ type: "text", text: message }] };
  });
  return server;
}

async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
}

function serveHttp(address) {
  const [host, port] = [address.slice(0, address.lastIndexOf(":")), address.slice(address.lastIndexOf(":") + 1)];
  const sessions = new Map();
  createServer(async (request, response) => {
    const message = request.method === "POST" ? await body(request) : undefined;
    let transport = sessions.get(request.headers["mcp-session-id"]);
    if (!transport) {
      if (!isInitializeRequest(message)) {
        response.writeHead(404).end();
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        enableJsonResponse: true,
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => sessions.delete(transport.sessionId);
      await echoServer().connect(transport);
    }
    await transport.handleRequest(request, response, message);
  }).listen(Number(port), host);
}

if (process.argv[2] === "--http") {
  serveHttp(process.argv[3]);
} else {
  await echoServer().connect(new StdioServerTransport());
}
