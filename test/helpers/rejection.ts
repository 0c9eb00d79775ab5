import { expect } from 'vitest';
import { HttpError } from '../../src/main/server/http-util';
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

/** Awaits a promise that must reject with an HttpError (a refusal the server answers as it is), and returns it. */
export async function httpRejection(p: Promise<unknown>): Promise<HttpError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(HttpError);
    return err as HttpError;
  }
  throw new Error('expected the promise to reject');
}
