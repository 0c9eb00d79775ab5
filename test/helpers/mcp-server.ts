/**
 * A small MCP server for tests over stdio, as a person's mcp.json would start one: the tools of
 * test/helpers/mcp-test-server.ts. With KVDESK_TEST_MCP_ONLY=<name> it offers that tool alone; with
 * KVDESK_TEST_MCP_CRASH set it exits before it answers anything (a server that does not start).
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { testMcpServer } from './mcp-test-server';

async function main(): Promise<void> {
  if (process.env.KVDESK_TEST_MCP_CRASH) {
    process.stderr.write('cannot open the database\n');
    process.exit(3);
  }
  await testMcpServer(process.env.KVDESK_TEST_MCP_ONLY).connect(new StdioServerTransport());
}

void main();
