/**
 * A reply that continues the final assistant message (continueFinal: Anthropic's prefill, vLLM's
 * continue_final_message), on the real engine with the default model, greedy: six tokens and then six more
 * continuing their text are the twelve tokens of one reply; an empty final message is a new reply; what cannot
 * be continued is refused, naming the messages.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import type { ChatMessage, GenerateRequest } from '../../../src/shared/contract';
import { defaultModelDir } from '../../helpers/fixtures';

let h: RunnerService;
beforeAll(async () => {
  h = new RunnerService({ intraOpNumThreads: 2 });
  await h.loadModel(defaultModelDir, { id: 'default' });
}, 60_000);
afterAll(async () => {
  await h.close();
});

const ASK: ChatMessage[] = [{ role: 'user', content: 'Tell me about the sea.' }];
const run = (req: Partial<GenerateRequest>) =>
  h.generate({ messages: ASK, sampling: { greedy: true }, maxNewTokens: 6, ...req }).result;

describe('continueFinal', () => {
  it('continues the reply where its text ends: two halves are the whole', async () => {
    const whole = await run({ maxNewTokens: 12 });
    const first = await run({});
    const rest = await run({ messages: [...ASK, { role: 'assistant', content: first.text }], continueFinal: true });
    expect([...first.tokenIds, ...rest.tokenIds]).toEqual(whole.tokenIds);
    // The prompt is the first prompt and the first half: nothing of an end of turn or a new reply between.
    expect(rest.promptTokens).toBe(first.promptTokens + first.tokenIds.length);
    // The reply's text is the continuation only.
    expect(first.text + rest.text).toBe(whole.text);
  });

  it('an empty final message is a new reply', async () => {
    const plain = await run({});
    const empty = await run({ messages: [...ASK, { role: 'assistant', content: '' }], continueFinal: true });
    expect(empty.tokenIds).toEqual(plain.tokenIds);
  });

  it('a request that lists tools (the model may call them, or not) continues too', async () => {
    const tools = [{ name: 'tide_table', parameters: { type: 'object', properties: { port: { type: 'string' } } } }];
    const prefill: ChatMessage[] = [...ASK, { role: 'assistant', content: 'The sea' }];
    for (const toolChoice of ['auto', 'none'] as const) {
      const r = await run({ messages: prefill, continueFinal: true, tools, toolChoice });
      expect(r.finishReason).toBeDefined();
    }
    await expect(run({ messages: prefill, continueFinal: true, tools, toolChoice: 'required' })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('cannot also be a forced tool call'),
    });
  });

  it('refuses what it cannot continue, naming the messages', async () => {
    await expect(run({ continueFinal: true })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('continueFinal continues a final assistant message'),
    });
    const prefill: ChatMessage[] = [...ASK, { role: 'assistant', content: '{"a":' }];
    await expect(run({ messages: prefill, continueFinal: true, responseFormat: 'json' })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('cannot also be a forced tool call or JSON mode'),
    });
  });
});
