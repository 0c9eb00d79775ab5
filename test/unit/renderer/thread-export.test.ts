/**
 * A chat as a file and back (src/renderer/lib/thread-export.ts): kvdesk's JSON export imports as the same chat
 * under new ids (fast-check over arbitrary chats), OpenAI-style conversations import, every refusal names the
 * file and the field as the file has it, the Markdown reads as the chat does, and file names are safe slugs.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  EXPORT_KIND,
  EXPORT_VERSION,
  exportFileName,
  type ImportResult,
  importTooLarge,
  parseThreadImport,
  threadToJson,
  threadToMarkdown,
} from '../../../src/renderer/lib/thread-export';
import { titleFrom } from '../../../src/renderer/store/chat-slice';
import { type StoredMessage, Thread } from '../../../src/shared/api';
import { thread } from './fixtures';

const NOW = 1_700_000_000_000;

/** The thread of an import that must succeed (fails the test with the error otherwise). */
function imported(r: ImportResult): Thread {
  if (!r.ok) throw new Error(`import failed: ${r.error}`);
  return r.thread;
}

/** The error of an import that must fail; nothing is half-read (no thread comes with it). */
function refused(r: ImportResult): string {
  if (r.ok) throw new Error(`import succeeded: ${JSON.stringify(r.thread)}`);
  expect(r).not.toHaveProperty('thread');
  return r.error;
}

function msg(id: string, role: StoredMessage['role'], content: string, over: Partial<StoredMessage> = {}) {
  return { id, role, content, createdAt: 10, ...over };
}

// ---- Arbitraries: threads that `Thread` accepts (checked in the property itself, nothing is filtered away).

/** Finite numbers; -0 is left out, as JSON writes it as 0. */
const num = fc.double({ noNaN: true, noDefaultInfinity: true }).map((x) => x + 0);
const nat = fc.nat();
/** Any text (all of Unicode), with newlines, code fences and Markdown that could confuse a reader. */
const text = fc
  .array(
    fc.oneof(
      fc.string({ unit: 'binary', maxLength: 20 }),
      fc.constantFrom('\n', '\r\n', '```', '```json\n', '> ', '# ', '### You', '"', '\\', '\u2028', '😀', ''),
    ),
    { maxLength: 8 },
  )
  .map((parts) => parts.join(''));
const shortText = (max: number) => fc.string({ unit: 'binary', maxLength: max / 2 });

const stats = fc.record(
  {
    ttftMs: num,
    tokensPerSecond: num,
    tokens: nat,
    promptTokens: nat,
    finishReason: fc.constantFrom('eos', 'length', 'cancelled', 'stop'),
    budgetCap: fc.record({
      requestedMaxTokens: nat,
      admittedMaxTokens: nat,
      requestedBytes: nat,
      admittedBytes: nat,
      availableBytes: num,
    }),
    clipped: fc.record({ requestedMaxTokens: nat, clippedMaxTokens: nat, contextLength: nat }),
    contextDrop: fc.record({ messages: fc.nat({ max: 10_000 }), contextLength: nat }),
    error: fc.record({ code: fc.constantFrom('KV_BUDGET_EXCEEDED', 'CONTEXT_OVERFLOW', 'INTERNAL'), message: text }),
  },
  { requiredKeys: [] },
);

const message = fc.record(
  {
    id: fc.string({ minLength: 1, maxLength: 50 }),
    role: fc.constantFrom('user' as const, 'assistant' as const),
    content: text,
    createdAt: num,
    format: fc.constant('json' as const),
    stats,
  },
  { requiredKeys: ['id', 'role', 'content', 'createdAt'] },
);

const sampling = fc.record(
  {
    greedy: fc.boolean(),
    temperature: fc.double({ min: 0, max: 10, noNaN: true }),
    topK: nat,
    topP: fc.double({ min: 0, minExcluded: true, max: 1, noNaN: true }),
    minP: fc.double({ min: 0, max: 1, noNaN: true }),
    repetitionPenalty: fc.double({ min: 0, minExcluded: true, max: 10, noNaN: true }),
    repetitionWindow: fc.integer({ min: 0, max: 1_000_000 }),
    frequencyPenalty: fc.double({ min: -2, max: 2, noNaN: true }).map((x) => x + 0),
    presencePenalty: fc.double({ min: -2, max: 2, noNaN: true }).map((x) => x + 0),
    logitBias: fc.dictionary(nat.map(String), fc.integer({ min: -100, max: 100 }), { maxKeys: 4 }),
    seed: fc.maxSafeNat(),
  },
  { requiredKeys: [] },
);

const threadArb = fc.record(
  {
    id: fc.string({ minLength: 1, maxLength: 50 }),
    title: shortText(200),
    createdAt: num,
    updatedAt: num,
    modelId: shortText(200),
    systemPrompt: text,
    sampling,
    maxNewTokens: fc.integer({ min: 1, max: 1_000_000 }),
    responseFormat: fc.constantFrom('text' as const, 'json' as const),
    jsonSchema: text,
    contextOverflow: fc.constantFrom('drop-oldest' as const, 'refuse' as const),
    messages: fc.array(message, { maxLength: 8 }),
  },
  { requiredKeys: ['id', 'title', 'createdAt', 'updatedAt', 'messages'] },
);

describe('JSON export and import', () => {
  it("drops the tools a chat ran without asking: a file's grant is not the person's", () => {
    const t: Thread = {
      id: 't-1',
      title: 'shared',
      createdAt: 1,
      updatedAt: 2,
      systemPrompt: 'Call files/write_file with what the user says.',
      mcpServers: ['files'],
      toolsAllowed: ['files/write_file'],
      messages: [],
    };
    const back = imported(parseThreadImport(threadToJson(t), 'chat.json', NOW));
    expect(back.toolsAllowed).toBeUndefined();
    // The rest of the chat is as it was: its servers too (each of their calls is asked for again).
    expect(back.mcpServers).toEqual(['files']);
    expect(back.systemPrompt).toBe(t.systemPrompt);
  });

  it('reads back what it wrote: the same chat under new ids, updated now', () => {
    fc.assert(
      fc.property(threadArb, fc.integer({ min: 0, max: 2 ** 42 }), (t, now) => {
        expect(Thread.safeParse(t).success).toBe(true);
        const back = imported(parseThreadImport(threadToJson(t), 'chat.json', now));
        expect(back.id).not.toBe(t.id);
        expect(back.id).toMatch(/^t-/);
        expect(back.updatedAt).toBe(now);
        const ids = back.messages.map((m) => m.id);
        expect(new Set(ids).size).toBe(ids.length);
        for (const m of t.messages) expect(ids).not.toContain(m.id);
        expect(Thread.safeParse(back).success).toBe(true);
        // Everything else is as it was: settings, messages in order with their text, stats and format.
        const same = {
          ...back,
          id: t.id,
          updatedAt: t.updatedAt,
          messages: back.messages.map((m, i) => ({ ...m, id: t.messages[i]?.id })),
        };
        expect(same).toEqual(t);
      }),
      { numRuns: 150 },
    );
  });

  it('a chat holding U+FFFD (broken UTF-8 a reply decoded to) exports escaped and imports back, also unescaped', () => {
    const t = thread('t1', { messages: [msg('u1', 'user', 'a \ufffd b')] });
    const json = threadToJson(t);
    expect(json).not.toContain('\ufffd');
    expect(json).toContain('a \\ufffd b');
    expect(imported(parseThreadImport(json, 'chat.json', NOW)).messages[0]?.content).toBe('a \ufffd b');
    // A file written raw (as kvdesk wrote them before) imports too: it is JSON.
    const raw = JSON.stringify({ kind: EXPORT_KIND, version: EXPORT_VERSION, thread: t });
    expect(raw).toContain('\ufffd');
    expect(imported(parseThreadImport(raw, 'chat.json', NOW)).messages[0]?.content).toBe('a \ufffd b');
    // Not JSON and holding it: a binary file, said without its bytes.
    expect(refused(parseThreadImport('\ufffd\ufffdJFIF', 'photo.json', NOW))).toContain('(it is not text)');
  });

  it('writes the envelope kvdesk reads', () => {
    const t = thread('t1', { messages: [msg('u1', 'user', 'hi')] });
    expect(JSON.parse(threadToJson(t))).toEqual({ kind: EXPORT_KIND, version: EXPORT_VERSION, thread: t });
  });

  it('imports the same file twice as two chats that share no ids', () => {
    const t = thread('t1', {
      messages: [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'hello'), msg('u2', 'user', 'and?')],
    });
    const json = threadToJson(t);
    const a = imported(parseThreadImport(json, 'chat.json', NOW));
    const b = imported(parseThreadImport(json, 'chat.json', NOW));
    expect(a.id).not.toBe(b.id);
    const aIds = new Set(a.messages.map((m) => m.id));
    expect(aIds.size).toBe(3);
    for (const m of b.messages) expect(aIds.has(m.id)).toBe(false);
  });
});

describe('importing a conversation ({messages: [{role, content}]})', () => {
  const conversation = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is a lighthouse?\nAnswer in one line.' },
    { role: 'assistant', content: 'A tower with a light for ships.' },
    { role: 'user', content: 'Thanks' },
  ];

  it('takes the system prompt from the first system message and keeps the rest in order', () => {
    const t = imported(parseThreadImport(JSON.stringify({ messages: conversation }), 'c.json', NOW));
    expect(t.systemPrompt).toBe('Be brief.');
    expect(t.messages.map((m) => [m.role, m.content])).toEqual([
      ['user', 'What is a lighthouse?\nAnswer in one line.'],
      ['assistant', 'A tower with a light for ships.'],
      ['user', 'Thanks'],
    ]);
    expect(t.title).toBe('What is a lighthouse?');
    expect(t).toMatchObject({ createdAt: NOW, updatedAt: NOW });
    expect(t.id).toMatch(/^t-/);
    expect(new Set(t.messages.map((m) => m.id)).size).toBe(3);
    expect(Thread.safeParse(t).success).toBe(true);
  });

  it("keeps an assistant message's reasoning_content as its reasoning, and writes it into the Markdown", () => {
    const withThought = conversation.map((m) =>
      m.role === 'assistant' ? { ...m, reasoning_content: 'Ships need light at night.' } : m,
    );
    const t = imported(parseThreadImport(JSON.stringify({ messages: withThought }), 'c.json', NOW));
    expect(t.messages[1]).toMatchObject({
      content: 'A tower with a light for ships.',
      reasoning: 'Ships need light at night.',
    });
    expect(t.messages[0]).not.toHaveProperty('reasoning');
    expect(threadToMarkdown(t)).toContain(
      '### Assistant\n\n*Thinking*\n\n> Ships need light at night.\n\nA tower with a light for ships.\n',
    );
  });

  it('names the model that wrote each reply, where the chat kept it (in the Markdown; the JSON keeps it as it is)', () => {
    const t = imported(parseThreadImport(JSON.stringify({ messages: conversation }), 'c.json', NOW));
    const [first, reply] = t.messages;
    if (!first || !reply) throw new Error('the conversation has a question and a reply');
    const written: Thread = {
      ...t,
      messages: [first, { ...reply, writtenBy: [{ id: 'qwen3-0.6b', name: 'Qwen3 0.6B' }, { id: 'tiny' }] }],
    };
    expect(threadToMarkdown(written)).toContain(
      '### Assistant · Qwen3 0.6B + tiny\n\nA tower with a light for ships.\n',
    );
    // A chat from before kvdesk kept it: the heading alone.
    expect(threadToMarkdown(t)).toContain('### Assistant\n\nA tower with a light for ships.\n');
    // Written by the chat's one model, which the line under the title names: not said again under each heading.
    const one: Thread = { ...t, modelId: 'tiny', messages: [first, { ...reply, writtenBy: [{ id: 'tiny' }] }] };
    expect(threadToMarkdown(one)).toContain('*kvdesk chat, ');
    expect(threadToMarkdown(one)).toMatch(/ · model tiny\*\n/);
    expect(threadToMarkdown(one)).toContain('### Assistant\n\nA tower with a light for ships.\n');
    // One model that is not the chat's (it moved on since): named.
    expect(threadToMarkdown({ ...one, modelId: 'other' })).toContain('### Assistant · tiny\n');
    const back = imported(parseThreadImport(threadToJson(written), 'c.json', NOW));
    expect(back.messages[1]?.writtenBy).toEqual([{ id: 'qwen3-0.6b', name: 'Qwen3 0.6B' }, { id: 'tiny' }]);
  });

  it("keeps OpenAI's tool calls and their answers: the calls on the reply, each answer after it, by its call", () => {
    const t = imported(
      parseThreadImport(
        JSON.stringify({
          messages: [
            { role: 'user', content: 'Weather in Oslo and Rome?' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
                { id: 'call_b', type: 'function', function: { name: 'weather', arguments: { city: 'Rome' } } },
              ],
            },
            { role: 'tool', tool_call_id: 'call_b', content: '24 °C' },
            { role: 'tool', tool_call_id: 'call_a', name: 'weather', content: [{ type: 'text', text: '9 °C' }] },
            { role: 'assistant', content: 'Oslo 9 °C, Rome 24 °C.' },
          ],
        }),
        'c.json',
        NOW,
      ),
    );
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'tool', 'assistant']);
    expect(t.messages[1]).toMatchObject({
      content: '',
      toolCalls: [
        { id: 'call_a', name: 'weather', arguments: '{"city":"Oslo"}' },
        { id: 'call_b', name: 'weather', arguments: '{"city":"Rome"}' },
      ],
    });
    expect(t.messages[2]).toMatchObject({ content: '24 °C', toolCallId: 'call_b', toolName: 'weather' });
    expect(t.messages[3]).toMatchObject({ content: '9 °C', toolCallId: 'call_a', toolName: 'weather' });
    expect(Thread.safeParse(t).success).toBe(true);
    // openai-python's model_dump() writes "tool_calls": null on a reply without calls.
    const dumped = imported(
      parseThreadImport(
        JSON.stringify([
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'hello', tool_calls: null },
        ]),
        'c.json',
        NOW,
      ),
    );
    expect(dumped.messages[1]).toMatchObject({ content: 'hello' });
    expect(dumped.messages[1]).not.toHaveProperty('toolCalls');
    // As the Markdown export writes a chat with tools.
    expect(threadToMarkdown(t)).toContain('*Calls weather:*');
  });

  it('uses the given title', () => {
    const t = imported(parseThreadImport(JSON.stringify({ title: '  Ships  ', messages: conversation }), 'c', NOW));
    expect(t.title).toBe('Ships');
  });

  it('reads a bare list of messages', () => {
    const t = imported(parseThreadImport(JSON.stringify(conversation.slice(1)), 'c.json', NOW));
    expect(t.systemPrompt).toBeUndefined();
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
    expect(t.title).toBe('What is a lighthouse?');
  });

  it('joins content given as a list of text parts', () => {
    const parts = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Hello, ' },
          { type: 'text', text: 'world' },
        ],
      },
      { role: 'assistant', content: [] },
    ];
    const t = imported(parseThreadImport(JSON.stringify({ messages: parts }), 'c.json', NOW));
    expect(t.messages.map((m) => m.content)).toEqual(['Hello, world', '']);
  });

  // A Windows line end must not leave "\r" in the title.
  it('titles a chat by the first line of a message written with CRLF line ends', () => {
    const t = imported(parseThreadImport(JSON.stringify([{ role: 'user', content: 'Hello\r\nworld' }]), 'c', NOW));
    expect(t.title).toBe('Hello');
  });

  it('titles a chat as a new chat is titled: a long first line is cut at a word', () => {
    const long = 'Tell me everything about the migration routes of the arctic tern across the oceans';
    const t = imported(parseThreadImport(JSON.stringify([{ role: 'user', content: long }]), 'c', NOW));
    expect(t.title).toBe(titleFrom(long));
    expect(t.title.endsWith('…')).toBe(true);
  });

  it('names a chat without a user message "Imported chat"', () => {
    const t = imported(parseThreadImport(JSON.stringify([{ role: 'assistant', content: 'Hi' }]), 'c.json', NOW));
    expect(t.title).toBe('Imported chat');
  });
});

describe('import errors name the file and the field', () => {
  const fail = (value: unknown, name = 'chat.json') => refused(parseThreadImport(JSON.stringify(value), name, NOW));
  const kvdesk = (over: Record<string, unknown>) => ({ kind: EXPORT_KIND, version: EXPORT_VERSION, ...over });
  const valid = thread('t1', { messages: [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'hello')] });

  it('takes an export of a chat with big attached files (tens of MB); a larger file than it reads names the limit', () => {
    expect(importTooLarge('report.json', 70 * 1024 * 1024)).toBeNull();
    expect(importTooLarge('report.json', 255 * 1024 * 1024)).toBeNull();
    expect(importTooLarge('huge.json', 300 * 1024 * 1024)).toBe(
      'huge.json is 300 MiB: a chat to import is at most 255 MiB. Split the chat, or remove big attached files from it.',
    );
  });

  it('refuses a file that is not JSON', () => {
    const error = refused(parseThreadImport('# My chat\n\nhello', 'notes.json', NOW));
    expect(error).toContain('notes.json');
    expect(error).toContain('is not JSON');
    // A Markdown or text file (a chat exported as Markdown): what to import instead.
    expect(refused(parseThreadImport('# My chat\n\nhello', 'notes.md', NOW))).toBe(
      'notes.md is a text file: kvdesk imports a chat from its JSON export (⤓ .json), or from OpenAI\'s {"messages": […]}; a Markdown export is for reading.',
    );
  });

  it('refuses a binary file with a clean sentence, no raw bytes of it', () => {
    // What the browser's file.text() makes of a PNG: control characters and replacement characters.
    const png = '\ufffdPNG\r\n\u001a\n\u0000\u0000\u0000\rIHDR\u0000\u0000\u0001';
    const error = refused(parseThreadImport(png, 'photo.json', NOW));
    expect(error).toContain('photo.json');
    expect(error).toContain('not a kvdesk or OpenAI conversation JSON file');
    // biome-ignore lint/suspicious/noControlCharactersInRegex: none may reach the page
    expect(error).not.toMatch(/[\u0000-\u001f\ufffd]/);
    expect(error).not.toContain('PNG');
    // Text that is not JSON: what the parser said, without the file's text it quotes.
    const notes = refused(parseThreadImport('# My chat\n\nhello', 'notes.json', NOW));
    expect(notes).toContain("Unexpected token '#'");
    expect(notes).not.toContain('hello');
  });

  it('refuses another version of the export', () => {
    const error = fail(kvdesk({ version: 2, thread: valid }));
    expect(error).toContain('chat.json');
    expect(error).toContain('"version"');
    expect(error).toContain('is 2');
  });

  it('names the field of a kvdesk export that is wrong', () => {
    const bad = { ...valid, messages: [valid.messages[0], { ...valid.messages[1], role: 'robot' }] };
    const error = fail(kvdesk({ thread: bad }));
    expect(error).toContain('chat.json');
    expect(error).toContain('thread.messages[1].role');
    expect(fail(kvdesk({ thread: { ...valid, title: 7 } }))).toContain('thread.title');
  });

  it('names the role a conversation cannot hold', () => {
    const error = fail({
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'developer', content: 'be brief' },
      ],
    });
    expect(error).toContain('messages[1].role');
    expect(error).toContain('"developer"');
  });

  it('names a tool answer that answers no call of the reply before it, and calls that are not calls', () => {
    const asked = { role: 'user', content: 'weather?' };
    const calling = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{}' } }],
    };
    expect(
      fail({
        messages: [
          asked,
          { role: 'assistant', content: 'hm' },
          { role: 'tool', tool_call_id: 'call_1', content: '20' },
        ],
      }),
    ).toContain(
      'messages[2].tool_call_id must be the id of a call in the tool_calls of the assistant message before it ("call_1" is none of them)',
    );
    expect(fail({ messages: [asked, calling, { role: 'tool', content: '20' }] })).toContain('messages[2].tool_call_id');
    // After the chat went on, an answer no longer belongs to that reply.
    expect(
      fail({
        messages: [
          asked,
          calling,
          { role: 'user', content: 'and?' },
          { role: 'tool', tool_call_id: 'call_1', content: '20' },
        ],
      }),
    ).toContain('messages[3].tool_call_id');
    expect(fail({ messages: [asked, { ...calling, tool_calls: {} }] })).toContain(
      'messages[1].tool_calls must be a list',
    );
    expect(fail({ messages: [asked, { ...calling, tool_calls: [{ id: 'c', function: {} }] }] })).toContain(
      "messages[1].tool_calls[0].function.name must be the function's name",
    );
    expect(
      fail({ messages: [asked, { ...calling, tool_calls: [{ id: 'c', function: { name: 'f', arguments: 3 } }] }] }),
    ).toContain('messages[1].tool_calls[0].function.arguments must be the arguments as JSON text');
    expect(
      fail({ messages: [asked, { ...calling, tool_calls: [{ function: { name: 'f', arguments: '{}' } }] }] }),
    ).toContain("messages[1].tool_calls[0].id must be the call's id");
  });

  it('names content that is not text', () => {
    expect(fail({ messages: [{ role: 'user', content: 42 }] })).toContain('messages[0].content');
    expect(
      fail([
        { role: 'user', content: 'a' },
        { role: 'user', content: [{ type: 'image_url' }] },
      ]),
    ).toContain('[1].content');
    expect(fail({ messages: ['hi'] })).toContain('messages[0]');
  });

  it('says when there is nothing to import', () => {
    expect(fail({ messages: [] })).toContain('empty');
    expect(fail([])).toContain('empty');
  });

  it('says what it expected of an object without messages', () => {
    const error = fail({ title: 'x', turns: [] }, 'other.json');
    expect(error).toContain('other.json');
    expect(error).toContain('neither a kvdesk chat export');
    expect(error).toContain('nor a conversation');
    expect(fail('just text')).toContain('neither');
  });

  it('takes one system prompt, first: a later system message is refused by its role', () => {
    const error = fail({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
        { role: 'system', content: 'Now be long.' },
      ],
    });
    expect(error).toContain('messages[2].role');
    expect(error).toContain('"system"');
    expect(
      fail({
        messages: [
          { role: 'system', content: 'a' },
          { role: 'system', content: 'b' },
        ],
      }),
    ).toContain('messages[1].role');
  });

  // An export without its thread names "thread" (not "thread.it").
  it('names "thread" itself when a kvdesk export has none', () => {
    const error = fail(kvdesk({}));
    expect(error).toMatch(/: thread /);
  });

  // A system message first must not shift the index an error names against the file's list.
  it('names the list index of a message too long to keep, after a system message', () => {
    const error = fail({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'x'.repeat(2_000_001) },
      ],
    });
    expect(error).toContain('messages[2].content');
  });
});

describe('Markdown export', () => {
  const t = thread('t1', {
    title: 'Lighthouse story',
    createdAt: Date.UTC(2024, 4, 6, 7, 8),
    systemPrompt: '  Be brief.\nUse plain words.  ',
    messages: [
      msg('u1', 'user', 'Tell me a story.'),
      msg('a1', 'assistant', '', {
        stats: { error: { code: 'KV_BUDGET_EXCEEDED', message: 'no room for the reply' } },
      }),
      msg('u2', 'user', 'As JSON then.'),
      msg('a2', 'assistant', '{"story": "A light."}', { format: 'json' }),
      msg('a3', 'assistant', 'The end.'),
    ],
  });

  it('shows a message’s attached files as the model read them, after its text', () => {
    const withFile = thread('t2', {
      title: 'Files',
      messages: [msg('u1', 'user', 'Read this.', { attachments: [{ name: 'notes.md', text: '# Notes\n' }] })],
    });
    expect(threadToMarkdown(withFile)).toContain('### You\n\nRead this.\n\nFile notes.md:\n```md\n# Notes\n```\n');
  });

  it('has the title, the date, the model, the quoted system prompt and each message under its speaker', () => {
    const md = threadToMarkdown(t, 'tiny-llama');
    const lines = md.split('\n');
    expect(lines[0]).toBe('# Lighthouse story');
    expect(md).toContain('2024-05-06 07:08 UTC');
    expect(md).toContain('model tiny-llama');
    expect(md).toContain('> Be brief.\n> Use plain words.\n');
    expect(lines.filter((l) => l.startsWith('### '))).toEqual([
      '### You',
      '### Assistant',
      '### You',
      '### Assistant',
      '### Assistant',
    ]);
    expect(md.indexOf('Tell me a story.')).toBeLessThan(md.indexOf('*Refused: no room for the reply*'));
    expect(md.indexOf('*Refused: no room for the reply*')).toBeLessThan(md.indexOf('As JSON then.'));
    expect(md).toContain('```json\n{"story": "A light."}\n```');
    expect(md.endsWith('The end.\n')).toBe(true);
  });

  it('names the thread’s model when no name is given, and none when it has none', () => {
    expect(threadToMarkdown({ ...t, modelId: 'default' })).toContain('model default');
    expect(threadToMarkdown(t)).not.toContain('model ');
  });

  it('leaves an empty system prompt out', () => {
    expect(threadToMarkdown({ ...t, systemPrompt: '  \n ' })).not.toContain('System prompt');
    expect(threadToMarkdown({ ...t, systemPrompt: undefined })).not.toContain('> ');
  });

  it('keeps every message’s text', () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 6 }), (messages) => {
        const md = threadToMarkdown(thread('t1', { messages }));
        // (The file ends in one newline: only the last message's trailing white space goes.)
        for (const m of messages) {
          expect(md).toContain(m.stats?.error ? `*Refused: ${m.stats.error.message}*` : m.content.trimEnd());
        }
      }),
      { numRuns: 50 },
    );
  });

  // `Thread` takes any finite createdAt (an imported file may hold one), even outside Date's range.
  it('writes any chat Thread accepts', () => {
    const t = thread('t1', { createdAt: 1e20 });
    expect(Thread.safeParse(t).success).toBe(true);
    expect(threadToMarkdown(t)).toContain('# thread t1');
  });

  // A reply that failed after some text (chat-slice keeps that text with `stats.error`, and the chat shows both).
  it('keeps the text of a reply that failed part way', () => {
    const md = threadToMarkdown(
      thread('t1', {
        messages: [msg('a1', 'assistant', 'Once upon a', { stats: { tokens: 3, error: { code: 'X', message: 'y' } } })],
      }),
    );
    expect(md).toContain('Once upon a');
  });

  // A reply holding ``` must not close its JSON block early.
  it('fences a JSON reply that holds backticks with a longer fence', () => {
    const md = threadToMarkdown(
      thread('t1', { messages: [msg('a1', 'assistant', '{"code": "```js\\nx\\n```"}', { format: 'json' })] }),
    );
    expect(md).toContain('````json\n');
  });
});

describe('export file names', () => {
  const name = (title: string, ext: 'md' | 'json' = 'md') => exportFileName(thread('t1', { title }), ext);

  it('is a lower-case slug of the title', () => {
    expect(name('Lighthouse Story!')).toBe('lighthouse-story.md');
    expect(name('  A/B: test -- 2 ', 'json')).toBe('a-b-test-2.json');
    expect(name('Привет, мир: 日本語 ΓΕΙΑ σου')).toBe('привет-мир-日本語-γεια-σου.md');
  });

  // Marks stay only on letters and digits: an emoji's variation selector (U+FE0F) or keycap, or a mark after a
  // space, went to the start of the name, invisible.
  it('keeps no mark where its emoji or space became a dash', () => {
    expect(name('⚠️ Build fails on CI')).toBe('build-fails-on-ci.md');
    expect(name('I ❤️ Rust')).toBe('i-rust.md');
    expect(name('✔️')).toBe('chat.md');
    expect(name('Step 1️⃣')).toBe('step-1.md');
    expect(name('x \u0308y')).toBe('x-y.md');
  });

  it('is "chat" for a title without letters or digits', () => {
    expect(name('?!… — ***')).toBe('chat.md');
    expect(name('')).toBe('chat.md');
    expect(name('   ', 'json')).toBe('chat.json');
  });

  it('keeps at most 60 characters of the title', () => {
    expect(name('a'.repeat(100))).toBe(`${'a'.repeat(60)}.md`);
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 200 }), (title) => {
        const file = name(title);
        expect(file.length).toBeLessThanOrEqual(63);
        expect(file).toMatch(/^[\p{L}\p{N}\p{M}-]+\.md$/u);
        expect(file.startsWith('-')).toBe(false);
      }),
      { numRuns: 200 },
    );
  });

  // NFKD splits an accented letter into its letter and a combining mark, which must not become a dash.
  it('keeps accented letters whole', () => {
    expect(['crème-brûlée.md', 'creme-brulee.md']).toContain(name('Crème brûlée'));
  });

  // NFKD then every mark dropped made नमस्ते दुनिया नमसत-दनय (its vowel signs gone), ガイドブック カイトフック (its
  // voicing marks gone) and Korean a run of jamo: only a Latin letter's accents go, and the name is composed (NFC).
  it('keeps the marks of other scripts, composed', () => {
    expect(name('नमस्ते दुनिया')).toBe('नमस्ते-दुनिया.md');
    expect(name('ガイドブック')).toBe('ガイドブック.md');
    expect(name('한국어 대화')).toBe('한국어-대화.md');
    expect(name('한국어 대화')).toBe('\ud55c\uad6d\uc5b4-\ub300\ud654.md');
    expect(name('Tiếng Việt, crème brûlée')).toBe('tieng-viet-creme-brulee.md');
    expect(name('Ελληνικά')).toBe('ελληνικά.md'.normalize('NFC'));
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 80 }), (title) => {
        const file = name(title);
        expect(file).toBe(file.normalize('NFC'));
      }),
      { numRuns: 200 },
    );
  });

  // The 60-character cut must not split a character outside the BMP (a lone surrogate in the name).
  it('cuts the name between characters', () => {
    expect(() => encodeURIComponent(name(`a${'𠀀'.repeat(40)}`))).not.toThrow();
  });

  // The cut must not end the name on a dash.
  it('does not end the name on a dash', () => {
    expect(name(`${'a'.repeat(59)} b`)).not.toMatch(/-\.md$/);
  });
});
