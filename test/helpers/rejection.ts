import { expect } from 'vitest';
import { KvdeskError } from '../../src/shared/errors';

/** Awaits a promise that must reject with a KvdeskError, and returns that error. */
export async function rejection(p: Promise<unknown>): Promise<KvdeskError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(KvdeskError);
    return err as KvdeskError;
  }
  throw new Error('expected the promise to reject');
}
