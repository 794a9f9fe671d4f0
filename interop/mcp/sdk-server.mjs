// sdk-server.mjs — an MCP server written with the official TypeScript SDK, for testing agentd's MCP client.
//
// usage: node sdk-server.mjs stdio   (serves stdin/stdout)
//        node sdk-server.mjs http    (prints "listening <url>" on stdout, then serves streamable HTTP)
// Tools: echo {text}, fail (an isError result), hang (never answers; counts the cancellations it
// receives), cancellations (that count), add_tool (registers `late`, which sends tools/list_changed).
import http from "node:http";
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";

let cancellations = 0;
const text = (t) => ({ content: [{ type: "text", text: t }] });

function makeServer() {
  const server = new McpServer({ name: "sdk-fixture", version: "1.0.0" });
  server.registerTool("echo", { title: "Echo", description: "Echo the text back", inputSchema: { text: z.string() } },
    async ({ text: t }) => text(`echo: ${t}`));
  server.registerTool("fail", { title: "Fail", description: "Always fails" },
    async () => ({ ...text("the fixture tool failed on purpose"), isError: true }));
  server.registerTool("hang", { title: "Hang", description: "Never answers until cancelled" },
    async (extra) => new Promise((resolve) => {
      extra.signal.addEventListener("abort", () => { cancellations++; resolve(text("cancelled")); });
    }));
  server.registerTool("cancellations", { title: "Cancellations", description: "How many hang calls were cancelled" },
    async () => text(`cancellations: ${cancellations}`));
  server.registerTool("add_tool", { title: "Add a tool", description: "Registers the tool late" },
    async () => {
      server.registerTool("late", { title: "Late", description: "Added after the start" }, async () => text("late tool ran"));
      return text("added late");
    });
  return server;
}

const mode = process.argv[2];
if (mode === "stdio") {
  await makeServer().connect(new StdioServerTransport());
} else if (mode === "http") {
  const transports = {};
  const srv = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports[sid] : undefined;
    if (!transport && !sid && req.method === "POST" && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => { transports[id] = transport; },
      });
      transport.onclose = () => { if (transport.sessionId) delete transports[transport.sessionId]; };
      await makeServer().connect(transport);
    }
    if (!transport) {
      res.writeHead(sid ? 404 : 400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no such session" } }));
      return;
    }
    await transport.handleRequest(req, res, body);
  });
  srv.listen(0, "127.0.0.1", () => console.log(`listening http://127.0.0.1:${srv.address().port}/mcp`));
} else {
  console.error("usage: node sdk-server.mjs stdio|http");
  process.exit(2);
}
