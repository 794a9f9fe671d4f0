// sdk-client.mjs — drives agentd's MCP server with the official TypeScript SDK client.
//
// usage: node sdk-client.mjs stdio <agentd binary> <agent name> [ok|refused]
//        node sdk-client.mjs http  <url of /mcp>    <agent name> [ok|refused]
// The last argument says what `shell` should do: run (ok), or be refused as a tool error (refused: the
// HTTP transport on a host whose only provider is the non-isolated local one).
// It lists the tools (the browser's among them, with their annotations), runs `shell`, gets isError for a failing command, runs `run_agent` with progress;
// over HTTP it also reads the agents as resources, creates an agent through /v1 and waits for
// tools/list_changed and resources/list_changed on the GET stream, and reads /mcp/info. It prints one
// JSON line of what it saw; any deviation exits 1 with the reason on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, agent, shellExpect = "ok"] = process.argv.slice(2);
if (!mode || !target || !agent) {
  console.error("usage: node sdk-client.mjs stdio|http <binary|url> <agent> [ok|refused]");
  process.exit(2);
}

function fail(msg) {
  console.error(`sdk-client (${mode}): ${msg}`);
  process.exit(1);
}

const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");

const transport =
  mode === "stdio"
    ? new StdioClientTransport({ command: target, args: ["mcp"], env: { ...process.env }, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target), {
        requestInit: process.env.AGENT_TOKEN ? { headers: { Authorization: `Bearer ${process.env.AGENT_TOKEN}` } } : {},
      });
const client = new Client({ name: "agentd-interop", version: "1.0.0" });
await client.connect(transport);
const seen = { mode, server: client.getServerVersion(), protocol: transport.protocolVersion ?? null };

const { tools } = await client.listTools();
seen.tools = tools.map((t) => t.name).sort();
for (const want of ["shell", "read_file", "write_file", "edit_file", "list_dir", "expose_port", "computer_info",
  "list_agents", "run_agent", "list_runs", "get_run", "list_computers",
  "browse", "browser_goto", "browser_snapshot", "browser_click", "browser_type", "browser_screenshot", "browser_wait_for",
  "browser_scroll", "browser_select", "browser_hover", "browser_navigate", "browser_tabs", "browser_status"]) {
  if (!seen.tools.includes(want)) fail(`tools/list lacks ${want}: ${seen.tools}`);
}
// The browser tools that change pages say so (annotations, as the SDK parsed them).
for (const t of tools.filter((t) => t.name.startsWith("browser_"))) {
  const destructive = ["browser_click", "browser_type", "browser_select", "browser_navigate"].includes(t.name);
  if (t.annotations?.destructiveHint !== destructive || t.annotations?.readOnlyHint !== !destructive) fail(`annotations of ${t.name}: ${JSON.stringify(t.annotations)}`);
}
for (const t of tools) {
  if (!/^[a-z0-9_]{1,64}$/.test(t.name) || !t.title || !t.description || t.inputSchema?.type !== "object") {
    fail(`tool ${JSON.stringify(t)}`);
  }
}

const sh = await client.callTool({ name: "shell", arguments: { command: "echo interop-shell-ok" } });
seen.shell = text(sh);
if (shellExpect === "ok") {
  if (sh.isError || !seen.shell.includes("interop-shell-ok") || !seen.shell.includes("provider")) fail(`shell: ${JSON.stringify(sh)}`);
  const bad = await client.callTool({ name: "shell", arguments: { command: "echo broken >&2; exit 7" } });
  seen.failing = text(bad);
  if (bad.isError !== true || !seen.failing.includes("exit code 7")) fail(`failing command: ${JSON.stringify(bad)}`);
} else {
  if (sh.isError !== true || !seen.shell.includes("isolated")) fail(`shell should be refused: ${JSON.stringify(sh)}`);
}
// A failing control-plane call is a tool error too.
const ghost = await client.callTool({ name: "run_agent", arguments: { name: "no-such-agent", input: "x" } });
if (ghost.isError !== true) fail(`run_agent of a missing agent: ${JSON.stringify(ghost)}`);

const progress = [];
const run = await client.callTool(
  { name: "run_agent", arguments: { name: agent, input: "interop run" } },
  undefined,
  { onprogress: (p) => progress.push(p), timeout: 120000 },
);
seen.run = text(run);
seen.runStructured = run.structuredContent ?? null;
seen.progress = progress.length;
if (run.isError || !seen.run.includes("stopReason complete")) fail(`run_agent: ${JSON.stringify(run)}`);
if (progress.length === 0) fail("run_agent sent no progress notifications");

if (mode === "http") {
  // Agents as resources (their YAML), and a change announced on the GET stream as list_changed.
  const { ToolListChangedNotificationSchema, ResourceListChangedNotificationSchema } = await import("@modelcontextprotocol/sdk/types.js");
  const toolsChanged = new Promise((resolve) => client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve(true)));
  const resourcesChanged = new Promise((resolve) => client.setNotificationHandler(ResourceListChangedNotificationSchema, () => resolve(true)));
  const { resources } = await client.listResources();
  seen.resources = resources.map((r) => r.uri);
  if (!seen.resources.includes(`agentd://agents/${agent}`)) fail(`resources/list: ${JSON.stringify(resources)}`);
  const read = await client.readResource({ uri: `agentd://agents/${agent}` });
  if (!read.contents?.[0]?.text?.includes(`name: ${agent}`)) fail(`resources/read: ${JSON.stringify(read)}`);
  const auth = process.env.AGENT_TOKEN ? { Authorization: `Bearer ${process.env.AGENT_TOKEN}` } : {};
  const created = await fetch(new URL("/v1/agents", target), { method: "POST", headers: { "Content-Type": "application/json", ...auth },
    body: JSON.stringify({ yaml: "name: interop-added\nmodel: auto\ncomputer: {enabled: false}\ntools: []\n" }) });
  if (created.status !== 201) fail(`creating an agent: ${created.status} ${await created.text()}`);
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no list_changed notifications within 30 s")), 30000));
  await Promise.race([Promise.all([toolsChanged, resourcesChanged]), timeout]).catch((e) => fail(e.message));
  seen.listChanged = true;
  const info = await (await fetch(new URL("/mcp/info", target), { headers: auth })).json();
  if (info.transport !== "streamable-http" || info.tools !== tools.length) fail(`/mcp/info: ${JSON.stringify(info)}`);
  seen.info = info;
}

await client.ping();
if (mode === "http") await transport.terminateSession();
await client.close();
console.log(JSON.stringify(seen));
