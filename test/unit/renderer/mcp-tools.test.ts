/** A chat's MCP tools as the model is offered them (src/renderer/lib/mcp-tools.ts), and their route back. */
import { describe, expect, it } from 'vitest';
import { chatTools } from '../../../src/renderer/lib/mcp-tools';
import type { McpStatus } from '../../../src/shared/api';
import { ToolDefinition } from '../../../src/shared/contract';

const schema = { type: 'object', properties: { a: { type: 'number' } } };
const status: McpStatus = {
  configPath: '/data/mcp.json',
  servers: [
    {
      name: 'calc',
      state: 'ready',
      tools: [
        { name: 'add', description: 'Adds', inputSchema: schema },
        { name: 'search', inputSchema: schema },
      ],
    },
    { name: 'web search', state: 'ready', tools: [{ name: 'search', inputSchema: schema }] },
    { name: 'odd', state: 'ready', tools: [{ name: 'get/weather', inputSchema: schema }] },
    { name: 'down', state: 'failed', error: 'exit 3', tools: [] },
    { name: 'later', state: 'idle', tools: [] },
  ],
};

describe('chatTools', () => {
  it("offers the chosen servers' tools by their names, server-named where two meet or a name is not valid", () => {
    const t = chatTools(status, ['calc', 'web search', 'odd']);
    expect(t.definitions.map((d) => d.name)).toEqual(['add', 'calc.search', 'web_search.search', 'odd.get_weather']);
    expect(t.definitions[0]).toEqual({ name: 'add', description: 'Adds', parameters: schema });
    for (const d of t.definitions) expect(ToolDefinition.safeParse(d).success).toBe(true);
    expect(t.routes).toEqual({
      add: { server: 'calc', tool: 'add' },
      'calc.search': { server: 'calc', tool: 'search' },
      'web_search.search': { server: 'web search', tool: 'search' },
      'odd.get_weather': { server: 'odd', tool: 'get/weather' },
    });
    expect(t.missing).toEqual([]);
  });

  it('only the chosen servers; those not running are said, with why', () => {
    const t = chatTools(status, ['calc', 'down', 'later', 'gone']);
    expect(t.definitions.map((d) => d.name)).toEqual(['add', 'search']);
    expect(t.missing).toEqual([
      { server: 'down', why: 'exit 3' },
      { server: 'later', why: 'it is idle' },
      { server: 'gone', why: '/data/mcp.json names no server "gone"' },
    ]);
  });

  it('keeps names apart when cleaning makes them meet, within 64 characters', () => {
    const long = 'x'.repeat(70);
    const s: McpStatus = {
      configPath: '/m',
      servers: [
        {
          name: 'a',
          state: 'ready',
          tools: [
            { name: 'b c', inputSchema: {} },
            { name: 'b_c', inputSchema: {} },
          ],
        },
        { name: 'z', state: 'ready', tools: [{ name: long, inputSchema: {} }] },
      ],
    };
    const names = chatTools(s, ['a', 'z']).definitions.map((d) => d.name);
    expect(names).toEqual(['a.b_c', 'b_c', `z.${'x'.repeat(62)}`]);
    expect(new Set(names).size).toBe(names.length);
    for (const n of names) expect(n.length).toBeLessThanOrEqual(64);
  });
});
