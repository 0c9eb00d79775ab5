import { expect } from 'vitest';
import { KvdeskError } from '../../../src/shared/errors';

/**
 * Awaits a load that must be refused and checks it is PACKAGE_INVALID naming
 * the file (and field). Returns the error for message assertions. Fails if the
 * promise resolves: a refused package must never yield a spec.
 */
export async function refusal(
  promise: Promise<unknown>,
  where: { file?: string; field?: string } = {},
): Promise<KvdeskError> {
  let value: unknown;
  let error: unknown;
  try {
    value = await promise;
  } catch (e) {
    error = e;
  }
  expect(value, 'the package must be refused, not loaded').toBeUndefined();
  expect(error).toBeInstanceOf(KvdeskError);
  const err = error as KvdeskError;
  expect(err.code).toBe('PACKAGE_INVALID');
  if (where.file !== undefined) expect(err.detail?.file).toBe(where.file);
  if (where.field !== undefined) expect(err.detail?.field).toBe(where.field);
  return err;
}
