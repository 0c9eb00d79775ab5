/**
 * An engine process that cannot start at all (its runtime gone, a process limit) emits an error and no exit, and
 * one whose environment is too large to exec throws: either way the start fails with ENGINE_FAILED saying so,
 * instead of waiting for good (or throwing out of start()).
 */
import { describe, expect, it } from 'vitest';
import { EngineClient } from '../../src/main/host/engine-client';

const options = { intraOpNumThreads: 1, executionProviders: ['cpu'] };
const within = <T>(p: Promise<T>) =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error('still waiting')), 10_000))]);

describe('an engine process that cannot start', () => {
  it('its runtime not there: the start fails with ENGINE_FAILED (no exit comes), and a later start tries again', async () => {
    const client = new EngineClient(options, { verifyGrant: () => true, execPath: '/nonexistent/kvdesk-node' });
    await expect(within(client.start())).rejects.toMatchObject({
      code: 'ENGINE_FAILED',
      message: expect.stringMatching(/could not start the engine process \(\/nonexistent\/kvdesk-node\): .*ENOENT/),
    });
    expect(client.pid).toBeUndefined();
    await expect(within(client.start())).rejects.toMatchObject({ code: 'ENGINE_FAILED' });
  });

  it.skipIf(process.platform !== 'linux')(
    'an environment too large to exec (E2BIG, Linux): a rejected start, not a throw',
    async () => {
      // One variable past Linux's 128 KiB limit for a single environment string.
      const client = new EngineClient(options, {
        verifyGrant: () => true,
        env: { KVDESK_TOO_LARGE: 'x'.repeat(200_000) },
      });
      let started: Promise<void> | undefined;
      expect(() => {
        started = client.start();
      }).not.toThrow();
      await expect(within(started as Promise<void>)).rejects.toMatchObject({ code: 'ENGINE_FAILED' });
    },
  );
});
