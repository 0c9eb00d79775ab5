/**
 * Replies that cannot end before a test acts on them (stops them, drops their client, loads beside them), for tests
 * whose runner is in-process. The default model writes a token in well under a millisecond and its context clips any
 * reply to about 2,000 tokens, so even a reply whose end-of-text is banned ends by itself within a second: too soon
 * for a loaded machine. {@link holdReplyEnds} holds the end the engine reports for each reply until the host asks
 * the engine to stop it (a cancel, for whatever reason), so the host sees the reply run until the test has acted;
 * {@link noEndBias} bans the end-of-text tokens so that the engine itself still writes when the cancel comes.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { vi } from 'vitest';
import type { EngineClient } from '../../src/main/host/engine-client';
import { defaultModelDir } from './fixtures';

/** A logit bias (token id to -100) that bans every end-of-text token of the package in `modelDir`. */
export function noEndBias(modelDir = defaultModelDir): Record<string, number> {
  const config = JSON.parse(readFileSync(path.join(modelDir, 'generation_config.json'), 'utf8'));
  const eos = ([] as number[]).concat(config.eos_token_id);
  return Object.fromEntries(eos.map((id) => [String(id), -100]));
}

/** Replies held by {@link holdReplyEnds}. */
export interface HeldReplies {
  /** Resolves with the request ids of the first `count` (1) held replies the host has had tokens of, in that order. */
  tokens(count?: number): Promise<string[]>;
  /** The request ids the host has asked the engine to cancel (each once), in that order. */
  readonly cancelled: string[];
  /** Lets every held end through and puts the engine client back as it was. */
  restore(): void;
}

/**
 * Until `restore()`, the end (`done`) of each of the next `count` generations the host starts on `engine` reaches
 * the host only once the host has called `engine.cancel` for it: such a reply cannot end, in the host's eyes, before
 * it is stopped. The engine's frames otherwise pass as they come (tokens at once, a failure at once), the cancel
 * itself reaches the engine as it would, and later generations are not held. A product that never cancels the reply
 * leaves it running, and the test's wait for the request to end fails.
 */
export function holdReplyEnds(engine: EngineClient, count = 1): HeldReplies {
  const generate = engine.generate.bind(engine);
  const cancel = engine.cancel.bind(engine);
  const releases = new Map<string, () => void>();
  const withTokens: string[] = [];
  const cancelled: string[] = [];
  const waiters: Array<() => void> = [];
  const generateSpy = vi.spyOn(engine, 'generate').mockImplementation((grant, cmd, handlers) => {
    if (releases.size >= count) return generate(grant, cmd, handlers);
    const id = cmd.requestId;
    const released = new Promise<void>((resolve) => releases.set(id, resolve));
    generate(grant, cmd, {
      onStarted: (prefillTokens, reusedTokens) => handlers.onStarted(prefillTokens, reusedTokens),
      onPrefill: (doneTokens, totalTokens, kvBytes) => handlers.onPrefill?.(doneTokens, totalTokens, kvBytes),
      onTokens: (ids, kvBytes, logprobs) => {
        handlers.onTokens(ids, kvBytes, logprobs);
        if (!withTokens.includes(id)) {
          withTokens.push(id);
          for (const w of waiters.splice(0)) w();
        }
      },
      onDone: (event) => void released.then(() => handlers.onDone(event)),
      onFailed: (error) => handlers.onFailed(error),
    });
  });
  const cancelSpy = vi.spyOn(engine, 'cancel').mockImplementation((requestId, reason) => {
    cancel(requestId, reason);
    if (!cancelled.includes(requestId)) cancelled.push(requestId);
    releases.get(requestId)?.();
  });
  return {
    cancelled,
    tokens(n = 1) {
      return new Promise((resolve) => {
        const check = () => {
          if (withTokens.length >= n) resolve(withTokens.slice(0, n));
          else waiters.push(check);
        };
        check();
      });
    },
    restore() {
      generateSpy.mockRestore();
      cancelSpy.mockRestore();
      for (const release of releases.values()) release();
    },
  };
}
