import { McpServer } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import * as z from "zod";

const server = new McpServer({ name: "v2", version: "0.1.0" });

server.registerTool(
  "shout",
  {
    description: "Says it louder",
    inputSchema: z.object({ text: z.string().min(1), times: z.number().int().min(1).max(5).default(1) }),
    outputSchema: z.object({ loud: z.string() }),
  },
  async ({ text, times }) => {
    const loud = `${text.toUpperCase()}${"!".repeat(times)}`;
    return { content: [{ type: "text", text: loud }], structuredContent: { loud } };
  },
);

await server.connect(new StdioServerTransport());
