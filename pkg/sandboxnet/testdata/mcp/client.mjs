// The MCP client of TestMCPAndGraphQLClientsInSandbox, run inside the
// sandbox: the MCP TypeScript SDK's Client over its streamable HTTP
// transport to MCP_URL. Node 20's fetch does not read HTTPS_PROXY, so
// the transport is given undici's fetch with a ProxyAgent for the
// sandbox's proxy (the SDK's documented fetch option). Prints
// "name=result" lines: "ok ..." or "STATUS REASON" for a refusal.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ProxyAgent, fetch as undiciFetch } from "undici";

const dispatcher = new ProxyAgent(process.env.HTTPS_PROXY || process.env.https_proxy);
const proxiedFetch = (url, init) => undiciFetch(url, { ...init, dispatcher });
const out = (k, v) => console.log(`${k}=${v}`);
const why = (e) => {
  const m = /"reason":"([^"]+)"/.exec(String(e?.message));
  return `${e?.code ?? "error"} ${m ? m[1] : String(e?.message).replace(/\s+/g, " ").slice(0, 300)}`;
};

const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), { fetch: proxiedFetch });
const client = new Client({ name: "palisade-sandbox-client", version: "1.0.0" });
try {
  await client.connect(transport);
  out("connect", `ok ${transport.protocolVersion}`);
} catch (e) {
  out("connect", why(e));
  process.exit(0);
}
try {
  const t = await client.listTools();
  out("tools", `ok ${t.tools.map((x) => x.name).sort().join(",")}`);
} catch (e) {
  out("tools", why(e));
}
for (const name of ["read_file", "write_file", "read_secrets"]) {
  try {
    const r = await client.callTool({ name, arguments: { path: "/etc/hostname" } });
    out(name, `ok ${r.content[0].text}`);
  } catch (e) {
    out(name, why(e));
  }
}
try {
  await client.listResources();
  out("resources", "ok");
} catch (e) {
  out("resources", why(e));
}
// A registry revision outside mcp.versions (403), then no revision at all (400).
for (const [k, v] of [["version_outside", "2025-06-18"], ["version_unknown", "1999-01-01"]]) {
  transport.setProtocolVersion(v);
  try {
    await client.listTools();
    out(k, "ok");
  } catch (e) {
    out(k, why(e));
  }
}
await client.close();
