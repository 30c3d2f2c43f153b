import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { readNote } from "./lib/notes.js";

const server = new McpServer({ name: "uses-fs", version: "0.1.0" });

server.registerTool(
  "read_note",
  { description: "Reads a note", inputSchema: { name: z.string() } },
  async ({ name }) => ({ content: [{ type: "text", text: readNote("/notes", name) }] }),
);

await server.connect(new StdioServerTransport());
