import { expect } from 'vitest';
import { HttpError } from '../../src/main/server/http-util';
import { KvdeskError } from '../../src/shared/errors';

/** Awaits a promise that must reject with an error of `type` (a client's error class, HttpError…), and returns it. */
export async function failure<E extends Error>(
  p: Promise<unknown>,
  type: abstract new (...args: never[]) => E,
): Promise<E> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(type);
    return err as E;
  }
  throw new Error('expected the promise to reject');
}

/** Awaits a promise that must reject with a KvdeskError, and returns that error. */
export function rejection(p: Promise<unknown>): Promise<KvdeskError> {
  return failure(p, KvdeskError);
}

/** Calls a mapper that must throw an HttpError (an API adapter's refusal), and returns that error. */
export function refusal(fn: () => unknown): HttpError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(HttpError);
    return err as HttpError;
  }
  throw new Error('expected a refusal');
}
