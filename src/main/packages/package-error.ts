import type { PackageProblem } from '../../shared/api';
import { type ErrorDetail, KvdeskError, toErrorInfo } from '../../shared/errors';

/**
 * Where in a package a problem is: the file relative to the package root and,
 * when there is one, the JSON/YAML field path. Every refusal carries it so the
 * person (and the UI) can point at the exact place to fix.
 */
export interface PackageWhere {
  file: string;
  field?: string;
}

/** Builds the one error type package loading throws: PACKAGE_INVALID with file/field in the detail. */
export function packageError(message: string, where: PackageWhere, extra: ErrorDetail = {}): KvdeskError {
  const detail: ErrorDetail = { file: where.file, ...extra };
  if (where.field !== undefined) detail.field = where.field;
  return new KvdeskError('PACKAGE_INVALID', message, detail);
}

/** Any error as a front end shows a refused package: code, message, and the file and field when it names them. */
export function packageProblem(err: unknown): PackageProblem {
  const info = toErrorInfo(err);
  const file = info.detail?.file;
  const field = info.detail?.field;
  return {
    code: info.code,
    message: info.message,
    ...(typeof file === 'string' ? { file } : {}),
    ...(typeof field === 'string' ? { field } : {}),
  };
}

/** `file` or `file: \`field\``: the prefix every message starts with. */
export function describeWhere(where: PackageWhere): string {
  return where.field === undefined ? where.file : `${where.file}: \`${where.field}\``;
}

/** Human size with the exact byte count, for messages that compare sizes. */
export function formatBytes(bytes: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} bytes` : `${value.toFixed(1)} ${units[unit]} (${bytes} bytes)`;
}
