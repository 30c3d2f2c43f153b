import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

const server = new McpServer({ name: "stuck", version: "0.1.0" });

server.registerTool("never", { description: "Returns a promise that never settles" }, () => new Promise(() => {}));

server.registerTool("spin_timer", { description: "Waits on a timer that keeps rescheduling itself" }, () => {
  setInterval(() => {}, 1000);
  return new Promise(() => {});
});

server.registerTool("throw_later", { description: "Throws from a timer, where nothing catches it" }, async () => {
  setTimeout(() => {
    throw new Error("thrown from a timer");
  }, 0);
  return new Promise(() => {});
});

server.registerTool("fine", { description: "Answers at once" }, async () => ({
  content: [{ type: "text", text: "fine" }],
}));

await server.connect(new StdioServerTransport());
