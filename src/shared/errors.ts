/**
 * Every error code a caller of kvdesk can see. Transports map them (HTTP status,
 * CLI exit code); the message always says what happened, with the numbers, and
 * what to do. Plain data, no schema library: the engine process imports this
 * module, and every megabyte of its heap is marked again at each of the
 * frequent collections that its KV tensors' memory triggers.
 */
export const ERROR_CODES = [
  /** A request argument is malformed (schema, ranges). */
  'BAD_REQUEST',
  /** A model package is missing, malformed or inconsistent; detail names file/field. */
  'PACKAGE_INVALID',
  /** onnxruntime could not create a session for the graph (unknown op, corrupt file). */
  'MODEL_LOAD_FAILED',
  /** The named model is not loaded. */
  'MODEL_NOT_LOADED',
  /** Text tokenized to ids the model's vocabulary does not have. */
  'TOKEN_OUT_OF_VOCAB',
  /** The prompt leaves no room for one generated token in the context window. */
  'CONTEXT_OVERFLOW',
  /** Even the minimum reservation of the request exceeds the KV budget. */
  'KV_BUDGET_EXCEEDED',
  /** The admission queue is full; retry later. */
  'QUEUE_FULL',
  /** The request was cancelled (user, disconnect, shutdown). */
  'CANCELLED',
  /** The request timed out. */
  'TIMEOUT',
  /** The engine failed while running the request (including a crashed engine process). */
  'ENGINE_FAILED',
  /** Engine work was attempted without a live admission grant from the scheduler. */
  'NOT_ADMITTED',
  /** The session is unknown or busy. */
  'SESSION_INVALID',
  /** A model download from a hub failed (network, the hub's answer, a file that does not match, disk space). */
  'DOWNLOAD_FAILED',
  /** A chat saved from a copy older than the one saved since (another window or tab saved it): nothing written. */
  'SAVE_CONFLICT',
  /** A bug: anything not covered above. */
  'INTERNAL',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** Whether a value is one of kvdesk's error codes. */
export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/** Structured, JSON-safe error detail: numbers and names that explain the failure. */
export type ErrorDetail = Record<string, string | number | boolean | null | undefined | number[] | string[]>;

/** The error half of every Result envelope. */
export interface ErrorInfo {
  code: ErrorCode;
  message: string;
  detail?: ErrorDetail;
}

/** Result envelope returned by every contract call. */
export type Result<T> = { ok: true; value: T } | { ok: false; error: ErrorInfo };

/** An error carrying a kvdesk error code; thrown inside the host and engine, serialized at the edges. */
export class KvdeskError extends Error {
  readonly code: ErrorCode;
  readonly detail: ErrorDetail | undefined;
  constructor(code: ErrorCode, message: string, detail?: ErrorDetail) {
    super(message);
    this.name = 'KvdeskError';
    this.code = code;
    this.detail = detail;
  }
  toInfo(): ErrorInfo {
    return this.detail === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, detail: this.detail };
  }
}

/** Turns anything thrown into an ErrorInfo (unknown errors become INTERNAL). */
export function toErrorInfo(err: unknown): ErrorInfo {
  if (err instanceof KvdeskError) return err.toInfo();
  if (err && typeof err === 'object' && 'code' in err && 'message' in err) {
    const code = (err as { code: unknown }).code;
    if (isErrorCode(code)) {
      const info: ErrorInfo = { code, message: String((err as { message: unknown }).message) };
      const detail = (err as { detail?: unknown }).detail;
      if (detail && typeof detail === 'object') info.detail = detail as ErrorDetail;
      return info;
    }
  }
  const message = err instanceof Error ? err.message : String(err);
  return { code: 'INTERNAL', message };
}
