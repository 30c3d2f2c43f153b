import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

const apiKey = process.env.WEATHER_API_KEY;

const server = new McpServer({ name: "env-at-load", version: "0.1.0" });

server.registerTool("has_key", { description: "Says whether the API key is set" }, async () => ({
  content: [{ type: "text", text: apiKey ? "yes" : "no" }],
}));

await server.connect(new StdioServerTransport());
