/** A chat's MCP tools as the model is offered them (src/renderer/lib/mcp-tools.ts), and their route back. */
import { describe, expect, it } from 'vitest';
import { autoRunCalls, chatTools, MAX_AUTO_ROUNDS } from '../../../src/renderer/lib/mcp-tools';
import type { McpStatus, StoredMessage, Thread } from '../../../src/shared/api';
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

describe('autoRunCalls', () => {
  const routes = { add: { server: 'calc', tool: 'add' }, rm: { server: 'files', tool: 'rm' } };
  const reply = (id: string, names: string[]): StoredMessage => ({
    id,
    role: 'assistant',
    content: '',
    createdAt: 0,
    toolCalls: names.map((name, i) => ({ id: `${id}-${i}`, name, arguments: '{}' })),
    toolRoutes: routes,
  });
  const answer = (id: string): StoredMessage => ({
    id: `t-${id}`,
    role: 'tool',
    content: 'ok',
    createdAt: 0,
    toolCallId: id,
  });
  const thread = (messages: StoredMessage[], allowed?: string[]): Thread => ({
    id: 't',
    title: 't',
    createdAt: 0,
    updatedAt: 0,
    messages,
    ...(allowed ? { toolsAllowed: allowed } : {}),
  });
  const user: StoredMessage = { id: 'u', role: 'user', content: 'hi', createdAt: 0 };

  it("runs the calls of the chat's allowed tools only", () => {
    const t = thread([user, reply('a', ['add', 'rm'])], ['calc/add']);
    expect(autoRunCalls(t, 'a')).toEqual({ calls: [{ id: 'a-0', name: 'add', arguments: '{}' }], capped: false });
    expect(autoRunCalls(thread([user, reply('a', ['add'])]), 'a').calls).toEqual([]);
    // A refused reply's calls never run.
    const refused = { ...reply('a', ['add']), stats: { error: { code: 'QUEUE_FULL', message: 'full' } } };
    expect(autoRunCalls(thread([user, refused], ['calc/add']), 'a').calls).toEqual([]);
  });

  it(`stops after ${MAX_AUTO_ROUNDS} rounds of calls since the person last wrote`, () => {
    const rounds = (n: number) =>
      Array.from({ length: n }, (_, i) => [reply(`r${i}`, ['add']), answer(`r${i}-0`)]).flat();
    const five = thread([user, ...rounds(MAX_AUTO_ROUNDS - 1), reply('last', ['add'])], ['calc/add']);
    expect(autoRunCalls(five, 'last')).toMatchObject({ capped: false, calls: [{ name: 'add' }] });
    const six = thread([user, ...rounds(MAX_AUTO_ROUNDS), reply('last', ['add'])], ['calc/add']);
    expect(autoRunCalls(six, 'last')).toEqual({ calls: [], capped: true });
    // The person wrote since: counting starts over.
    const again = thread([user, ...rounds(MAX_AUTO_ROUNDS), user, reply('last', ['add'])], ['calc/add']);
    expect(autoRunCalls(again, 'last').capped).toBe(false);
  });
});
