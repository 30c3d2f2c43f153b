#!/usr/bin/env node
import { McpServer, ResourceTemplate } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "compute", version: "0.1.0" });

server.registerTool(
  "add",
  {
    title: "Add",
    description: "Adds two numbers",
    inputSchema: { a: z.number(), b: z.number() },
  },
  async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
);

server.registerTool(
  "convert",
  {
    description: "Converts a length between units",
    inputSchema: {
      value: z.number().describe("The length to convert"),
      from: z.enum(["m", "km", "mi", "ft"]),
      to: z.enum(["m", "km", "mi", "ft"]),
      precision: z.number().int().min(0).max(10).optional(),
    },
  },
  async ({ value, from, to, precision }) => {
    const metres = { m: 1, km: 1000, mi: 1609.344, ft: 0.3048 };
    const result = (value * metres[from]) / metres[to];
    return { content: [{ type: "text", text: result.toFixed(precision ?? 3) }] };
  },
);

server.registerTool(
  "stats",
  {
    description: "Summarises a list of numbers",
    inputSchema: {
      values: z.array(z.number()).min(1),
      options: z
        .object({ round: z.boolean().default(false), label: z.string().optional() })
        .optional(),
    },
    outputSchema: { count: z.number(), sum: z.number(), mean: z.number(), min: z.number(), max: z.number() },
  },
  async ({ values, options }) => {
    const sum = values.reduce((total, value) => total + value, 0);
    const mean = options?.round ? Math.round(sum / values.length) : sum / values.length;
    const summary = { count: values.length, sum, mean, min: Math.min(...values), max: Math.max(...values) };
    const label = options?.label ? `${options.label}: ` : "";
    return {
      content: [{ type: "text", text: `${label}${JSON.stringify(summary)}` }],
      structuredContent: summary,
    };
  },
);

server.registerTool(
  "divide",
  {
    description: "Divides a by b; refuses to divide by zero",
    inputSchema: { a: z.number(), b: z.number() },
  },
  async ({ a, b }) => {
    if (b === 0) throw new Error("division by zero");
    return { content: [{ type: "text", text: String(a / b) }] };
  },
);

server.registerResource(
  "constants",
  "compute://constants",
  { title: "Constants", description: "Mathematical constants", mimeType: "application/json" },
  async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "application/json", text: JSON.stringify({ pi: Math.PI, e: Math.E }) }],
  }),
);

server.registerResource(
  "table",
  new ResourceTemplate("compute://table/{n}", { list: undefined }),
  { title: "Multiplication table", description: "The multiplication table of n" },
  async (uri, { n }) => ({
    contents: [
      {
        uri: uri.href,
        text: Array.from({ length: 10 }, (_, i) => `${n} x ${i + 1} = ${Number(n) * (i + 1)}`).join("\n"),
      },
    ],
  }),
);

server.registerPrompt(
  "explain",
  {
    title: "Explain a calculation",
    description: "Asks the model to explain a calculation step by step",
    argsSchema: { expression: z.string() },
  },
  ({ expression }) => ({
    messages: [{ role: "user", content: { type: "text", text: `Explain step by step how to compute ${expression}.` } }],
  }),
);

async function main() {
  const transport = new StdioServerTransport();
  await server.connect(transport);
  console.error("compute MCP server running on stdio");
}

main().catch((error) => {
  console.error("Fatal error:", error);
  process.exit(1);
});
