import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer(
  { name: "asker", version: "0.1.0" },
  { capabilities: { logging: {} } },
);

server.registerTool(
  "count",
  {
    description: "Counts to n, reporting progress at each step",
    inputSchema: { n: z.number().int().min(1).max(100) },
  },
  async ({ n }, extra) => {
    const progressToken = extra._meta?.progressToken;
    for (let i = 1; i <= n; i++) {
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken, progress: i, total: n, message: `step ${i}` },
        });
      }
    }
    await server.sendLoggingMessage({ level: "info", data: `counted to ${n}` }, extra.sessionId);
    return { content: [{ type: "text", text: `counted to ${n}` }] };
  },
);

server.registerTool(
  "ask",
  {
    description: "Asks the user a question and returns the answer",
    inputSchema: { question: z.string() },
  },
  async ({ question }) => {
    const result = await server.server.elicitInput({
      message: question,
      requestedSchema: {
        type: "object",
        properties: { answer: { type: "string", description: "Your answer" } },
        required: ["answer"],
      },
    });
    if (result.action !== "accept") {
      return { content: [{ type: "text", text: `the user chose to ${result.action}` }] };
    }
    return { content: [{ type: "text", text: `the user answered: ${result.content?.answer}` }] };
  },
);

await server.connect(new StdioServerTransport());
