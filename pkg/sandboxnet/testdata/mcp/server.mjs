// The servers of TestMCPAndGraphQLClientsInSandbox, on 127.0.0.1 (the
// test's TLS front in the test internet forwards to them): the MCP
// TypeScript SDK's McpServer over its streamable HTTP transport
// (stateless: one server and transport per request) with three tools,
// and graphql-js executing a schema with a query and a mutation. Each
// tool call and operation that arrives is printed ("call=NAME",
// "graphql=..."), so the test sees what the proxy let through.
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import { graphql, buildSchema } from "graphql";

function mcpServer() {
  const s = new McpServer({ name: "palisade-test-server", version: "1.0.0" });
  for (const name of ["read_file", "write_file", "read_secrets"]) {
    s.registerTool(name, { description: name, inputSchema: { path: z.string() } }, async ({ path }) => {
      console.log(`call=${name} ${path}`);
      return { content: [{ type: "text", text: `${name}:${path}` }] };
    });
  }
  return s;
}

const schema = buildSchema("type Query { viewer: String } type Mutation { deleteRepo(name: String): Boolean }");
const rootValue = {
  viewer: () => "octocat",
  deleteRepo: ({ name }) => { console.log(`mutation=deleteRepo ${name}`); return true; },
};

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks).toString();
}

const srv = http.createServer(async (req, res) => {
  try {
    if (req.url.startsWith("/mcp")) {
      const body = req.method === "POST" ? JSON.parse(await readBody(req)) : undefined;
      const server = mcpServer();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on("close", () => { transport.close(); server.close(); });
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
      return;
    }
    if (req.url.startsWith("/graphql")) {
      let source, variableValues, operationName;
      if (req.method === "GET") {
        source = new URL(req.url, "http://x").searchParams.get("query");
      } else {
        ({ query: source, variables: variableValues, operationName } = JSON.parse(await readBody(req)));
      }
      console.log(`graphql=${req.method} ${String(source).replace(/\s+/g, " ")}`);
      const result = await graphql({ schema, source, rootValue, variableValues, operationName });
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(result));
      return;
    }
    res.writeHead(404);
    res.end();
  } catch (e) {
    res.writeHead(500);
    res.end(String(e));
  }
});
srv.listen(0, "127.0.0.1", () => console.log(`port=${srv.address().port}`));
