import { describe, expect, it } from 'vitest';
import { carriedSettings, chatSetup, presetInEffect } from '../../../src/renderer/lib/presets';
import type { Thread } from '../../../src/shared/api';

const chat = (over: Partial<Thread> = {}): Thread => ({
  id: 't1',
  title: 'New chat',
  createdAt: 1,
  updatedAt: 1,
  messages: [],
  ...over,
});

describe('presets', () => {
  const pirate = { name: 'Pirate', systemPrompt: 'Arr.', sampling: { temperature: 0.3, topP: 0.9 } };

  it('a preset is in effect while the chat has its settings, whatever their keys’ order', () => {
    const applied = chat({ systemPrompt: 'Arr.', sampling: { topP: 0.9, temperature: 0.3 } });
    expect(presetInEffect(applied, pirate)).toBe(true);
    // A setting changed since: not any more.
    expect(presetInEffect({ ...applied, sampling: { topP: 0.9, temperature: 0.9 } }, pirate)).toBe(false);
    expect(presetInEffect({ ...applied, maxNewTokens: 12 }, pirate)).toBe(false);
    // What the preset leaves out is the package's default: a chat with it set is not the preset's.
    expect(presetInEffect({ ...applied, stop: ['###'] }, pirate)).toBe(false);
    // Settings a preset does not carry (JSON mode, tools) do not count.
    expect(presetInEffect({ ...applied, responseFormat: 'json' }, pirate)).toBe(true);
  });

  it('carries the settings a new chat takes, not JSON mode', () => {
    expect(carriedSettings(chat({ systemPrompt: 'x', responseFormat: 'json', sampling: {} }))).toEqual({
      systemPrompt: 'x',
    });
  });

  it("a chat's setup changes with any setting, its name or its pin, not with its messages or times", () => {
    const made = chatSetup(chat());
    expect(chatSetup(chat({ updatedAt: 5 }))).toBe(made);
    expect(chatSetup(chat({ systemPrompt: 'x' }))).not.toBe(made);
    expect(chatSetup(chat({ showProbabilities: true }))).not.toBe(made);
    expect(chatSetup(chat({ mcpServers: ['files'] }))).not.toBe(made);
    expect(chatSetup(chat({ title: 'Mine' }))).not.toBe(made);
    expect(chatSetup(chat({ pinned: true }))).not.toBe(made);
  });
});
