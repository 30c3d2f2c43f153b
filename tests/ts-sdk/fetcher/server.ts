import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "fetcher", version: "0.1.0" });

server.registerTool(
  "fetch_url",
  {
    description: "Fetches a URL and returns the status and the body",
    inputSchema: { url: z.string().url(), method: z.enum(["GET", "POST"]).default("GET") },
  },
  async ({ url, method }) => {
    const response = await fetch(url, { method });
    const body = await response.text();
    return { content: [{ type: "text", text: `${response.status}\n${body}` }] };
  },
);

server.registerTool(
  "greeting",
  { description: "Returns the FETCHER_GREETING environment variable, read when called" },
  async () => {
    const greeting = process.env.FETCHER_GREETING;
    return { content: [{ type: "text", text: greeting ?? "FETCHER_GREETING is not set" }] };
  },
);

const transport = new StdioServerTransport();
await server.connect(transport);
