/**
 * The tools of the test MCP server (the Model Context Protocol's official SDK), whatever carries it — stdio
 * (test/helpers/mcp-server.ts) or HTTP (test/helpers/mcp-http-server.ts): `echo` says the text back, `add` adds two
 * numbers, `fail` answers with an error, `slow` waits `ms` (at most 200) before answering. With `only` it offers
 * that tool alone (`big`, 20,000 words of answer, and `exit`, which dies mid-call, only so).
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

export function testMcpServer(only?: string): McpServer {
  const offers = (name: string) => only === undefined || only === name;
  const server = new McpServer({ name: 'kvdesk-test', version: '1.0.0' });
  if (offers('echo')) {
    server.registerTool(
      'echo',
      { description: 'Says the text back', inputSchema: { text: z.string() } },
      async ({ text }) => ({ content: [{ type: 'text', text: `You said: ${text}` }] }),
    );
  }
  if (offers('add')) {
    server.registerTool(
      'add',
      { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } },
      async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] }),
    );
  }
  if (offers('fail')) {
    server.registerTool('fail', { description: 'Always fails' }, async () => ({
      content: [{ type: 'text', text: 'it broke' }],
      isError: true,
    }));
  }
  if (offers('slow')) {
    server.registerTool(
      'slow',
      { description: 'Answers after a while', inputSchema: { ms: z.number() } },
      async ({ ms }) => {
        // At most 200 ms: a model's arguments can be any number.
        await new Promise((r) => setTimeout(r, Math.min(Math.max(ms, 0), 200)));
        return { content: [{ type: 'text', text: `waited ${ms} ms` }] };
      },
    );
  }
  // Offered only when asked for alone: a server that dies in the middle of a call, saying why on stderr.
  if (only === 'exit') {
    server.registerTool('exit', { description: 'Exits while it answers' }, async () => {
      process.stderr.write('out of memory: dying now\n');
      setTimeout(() => process.exit(7), 20);
      return new Promise<never>(() => {});
    });
  }
  // Offered only when asked for alone: a long answer (20,000 words), more than the default model's context.
  if (only === 'big') {
    server.registerTool('big', { description: 'Answers at length' }, async () => ({
      content: [{ type: 'text', text: 'word '.repeat(20_000) }],
    }));
  }
  return server;
}
