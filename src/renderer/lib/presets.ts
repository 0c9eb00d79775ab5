/**
 * A chat's settings as presets and new chats see them: pure, for the bridge, the settings panel and their tests.
 */
import type { Preset, Thread } from '../../shared/api';
import { cutText } from '../../shared/text';

/**
 * A chat's settings that carry to another chat (a new one, or a preset). JSON mode is for the task at hand, not
 * a preference: it stays behind.
 */
export function carriedSettings(t: Thread): Omit<Preset, 'name'> {
  return {
    ...(t.systemPrompt ? { systemPrompt: t.systemPrompt } : {}),
    ...(t.sampling && Object.keys(t.sampling).length > 0 ? { sampling: t.sampling } : {}),
    ...(t.maxNewTokens ? { maxNewTokens: t.maxNewTokens } : {}),
    ...(t.stop?.length ? { stop: t.stop } : {}),
    ...(t.contextOverflow ? { contextOverflow: t.contextOverflow } : {}),
    ...(t.thinking !== undefined ? { thinking: t.thinking } : {}),
    ...(t.thinkingBudget !== undefined ? { thinkingBudget: t.thinkingBudget } : {}),
    ...(t.reasoningEffort !== undefined ? { reasoningEffort: t.reasoningEffort } : {}),
  };
}

/** JSON with its objects' keys in order: two values that mean the same read the same. */
export function stable(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === 'object' && !Array.isArray(x)
      ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : x,
  );
}

/** Whether the chat's settings are the preset's (as applying it left them: nothing changed since). */
export function presetInEffect(t: Thread, preset: Preset): boolean {
  const { name: _name, ...settings } = preset;
  return stable(carriedSettings(t)) === stable(carriedSettings({ ...t, ...blank(), ...settings }));
}

/** Every carried setting unset (a preset's missing fields go back to the package's defaults). */
export function blank(): Partial<Thread> {
  return {
    systemPrompt: undefined,
    sampling: undefined,
    maxNewTokens: undefined,
    stop: undefined,
    contextOverflow: undefined,
    thinking: undefined,
    thinkingBudget: undefined,
    reasoningEffort: undefined,
  };
}

/**
 * Everything a person can set in a chat (its settings, name, pin), as one string: a chat whose string is the one
 * it had when it was made, and that has no messages, is untouched (a new chat would be the same).
 */
export function chatSetup(t: Thread): string {
  return stable({
    ...carriedSettings(t),
    title: t.title,
    pinned: t.pinned,
    responseFormat: t.responseFormat,
    jsonSchema: t.jsonSchema,
    showProbabilities: t.showProbabilities,
    mcpServers: t.mcpServers,
    toolsRequired: t.toolsRequired,
    toolsAllowed: t.toolsAllowed,
  });
}

/** A preset's name as typed, as it is kept: trimmed, at most 80 code units (kvdesk's limit), cut between characters. */
export function presetName(typed: string): string {
  return cutText(typed.trim(), 80);
}
