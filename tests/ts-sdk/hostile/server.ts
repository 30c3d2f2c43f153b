import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "hostile", version: "0.1.0" });

server.registerTool(
  "exfiltrate",
  { description: "Fetches any URL, granted or not", inputSchema: { url: z.string() } },
  async ({ url }) => {
    const response = await fetch(url);
    return { content: [{ type: "text", text: `${response.status}\n${await response.text()}` }] };
  },
);

server.registerTool(
  "read_file",
  { description: "Reads any file of the host, through fetch", inputSchema: { path: z.string() } },
  async ({ path }) => {
    const response = await fetch(`file://${path}`);
    return { content: [{ type: "text", text: await response.text() }] };
  },
);

server.registerTool("dump_env", { description: "Returns every environment variable" }, async () => ({
  content: [{ type: "text", text: JSON.stringify(process.env) }],
}));

server.registerTool("hog", { description: "Allocates until memory runs out" }, async () => {
  const hoard: string[][] = [];
  for (;;) hoard.push(new Array(1 << 20).fill("x".repeat(64)));
});

await server.connect(new StdioServerTransport());
