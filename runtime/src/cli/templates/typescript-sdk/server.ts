// The {{name}} MCP server, written as for any MCP client: `moat build` bundles it with its npm
// dependencies and makes it a WebAssembly component, where StdioServerTransport talks to moat.
// In the sandbox there is no file system and no Node module that reaches the machine (fs,
// child_process, net, http): fetch() reaches the hosts package.json's moat.network lists, and
// process.env holds the variables its moat.env lists. Read process.env inside a handler: the
// server's top level runs once, when it is built.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "{{name}}", version: "0.1.0" });

server.registerTool(
  "greet",
  {
    description: "Greets someone by name",
    inputSchema: { name: z.string().describe("Who to greet") },
  },
  async ({ name }) => ({ content: [{ type: "text", text: `Hello, ${name}!` }] }),
);

server.registerTool(
  "add",
  {
    description: "Adds two numbers",
    inputSchema: { a: z.number(), b: z.number() },
    outputSchema: { sum: z.number() },
  },
  async ({ a, b }) => ({
    content: [{ type: "text", text: String(a + b) }],
    structuredContent: { sum: a + b },
  }),
);

await server.connect(new StdioServerTransport());
