import { promises as fs } from 'node:fs';
import path from 'node:path';
import { parseDocument } from 'yaml';
import { isLfsPointer, lfsPointerError } from './lfs-pointer';
import { describeWhere, formatBytes, type PackageWhere, packageError } from './package-error';
import { type PackageContext, relName } from './package-fs';

/** Config and metadata files are read whole; anything bigger is not a config file (or hides data in one). */
export const CONFIG_MAX_BYTES = 4 * 1024 * 1024;

/** A parsed JSON/YAML config file: its name relative to the package root and its top-level mapping. */
export interface ConfigDoc {
  /** Path relative to the package root, used in every message. */
  file: string;
  /** Absolute path. */
  path: string;
  data: Record<string, unknown>;
}

/**
 * Reads a file whole after checking its size, so a huge or hostile file is
 * refused before any memory is spent on it.
 */
export async function readLimitedText(
  ctx: PackageContext,
  abs: string,
  maxBytes: number,
  what: string,
): Promise<string> {
  const file = relName(ctx, abs);
  const stat = await fs.stat(abs);
  if (stat.size > maxBytes) {
    throw packageError(
      `${file} is ${formatBytes(stat.size)}; kvdesk refuses ${what} larger than ${formatBytes(maxBytes)} before reading them. ` +
        'Check that this is the right file (it may have data embedded in it) and shrink or replace it.',
      { file },
      { bytes: stat.size, maxBytes },
    );
  }
  const text = await fs.readFile(abs, 'utf8');
  // A clone without Git LFS: the pointer would be "not valid JSON" (or YAML that parses as the wrong thing).
  if (isLfsPointer(text)) throw lfsPointerError(file);
  return text;
}

/** Reads and parses a JSON or YAML (by extension) config/metadata file, with the size limit. */
export async function readConfigFile(ctx: PackageContext, abs: string): Promise<ConfigDoc> {
  const text = await readLimitedText(ctx, abs, CONFIG_MAX_BYTES, 'config and metadata files');
  const file = relName(ctx, abs);
  const ext = path.extname(abs).toLowerCase();
  const data = ext === '.yaml' || ext === '.yml' ? parseYamlText(text, file) : parseJsonText(text, file);
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    throw packageError(
      `${file} must hold a ${ext === '.json' ? 'JSON object' : 'mapping'} at the top level, but holds ${describeValue(data)}. Replace it with the package's real ${path.basename(abs)}.`,
      { file },
    );
  }
  return { file, path: abs, data: data as Record<string, unknown> };
}

/** Line and column (1-based) of a character offset. */
function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < text.length; i += 1) {
    if (text.charCodeAt(i) === 10) {
      line += 1;
      lineStart = i + 1;
    }
  }
  return { line, column: offset - lineStart + 1 };
}

/** JSON.parse with the file name and line/column in the error (V8 reports only a character position). */
export function parseJsonText(text: string, file: string): unknown {
  try {
    // A UTF-8 BOM is common in files saved on Windows and is not an error.
    return JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  } catch (err) {
    const raw = err instanceof Error ? err.message : String(err);
    const pos = /position (\d+)/.exec(raw);
    const reason = raw.replace(/\s*\(line \d+ column \d+\)/, '').replace(/ in JSON at position \d+/, '');
    if (pos?.[1] !== undefined) {
      const { line, column } = lineColumn(text, Number(pos[1]));
      throw packageError(
        `${file} is not valid JSON: ${reason} at line ${line}, column ${column}. Fix the syntax there (or replace the file with the original).`,
        { file },
        { line, column },
      );
    }
    throw packageError(
      `${file} is not valid JSON: ${reason}. Fix the syntax (or replace the file with the original).`,
      { file },
    );
  }
}

/** YAML parse with the file name and the parser's line/column in the error. */
export function parseYamlText(text: string, file: string): unknown {
  const doc = parseDocument(text);
  const first = doc.errors[0];
  if (first !== undefined) {
    const pos = first.linePos?.[0];
    const at = pos === undefined ? '' : ` at line ${pos.line}, column ${pos.col}`;
    const reason = first.message.split('\n')[0]?.replace(/ at line \d+, column \d+:?$/, '') ?? first.code;
    throw packageError(
      `${file} is not valid YAML: ${reason}${at}. Fix the syntax there (or replace the file with the original).`,
      { file },
      pos === undefined ? {} : { line: pos.line, column: pos.col },
    );
  }
  try {
    return doc.toJS();
  } catch (err) {
    // The yaml library stops at its alias limit (a few hundred bytes of `*a` can expand to gigabytes).
    const reason = err instanceof Error ? err.message : String(err);
    const aliases = /alias/i.test(reason);
    throw packageError(
      aliases
        ? `${file} is refused: its YAML aliases (\`*name\`) expand to far more data than a config file holds (${reason}). Write the values out instead of repeating aliases, or replace the file with the original.`
        : `${file} could not be read as YAML: ${reason}. Fix it there (or replace the file with the original).`,
      { file },
    );
  }
}

/** Short description of a value for messages: `"abc"`, `12`, `a list`, `an object`. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'an object';
  // JSON's 1e400 and YAML's .inf read as Infinity (JSON.stringify would say null); YAML's .nan as NaN.
  if (typeof value === 'number' && !Number.isFinite(value))
    return Number.isNaN(value) ? 'not a number (NaN)' : `${value < 0 ? '-' : ''}a number too large to hold (infinity)`;
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/**
 * Typed, path-addressed reads from a config document. Every read that finds a
 * value of the wrong type throws with the file, the dotted field path and what
 * to write instead; `null` counts as absent (Hugging Face configs write
 * `"pad_token_id": null`).
 */
export class ConfigFields {
  constructor(readonly doc: ConfigDoc) {}

  get file(): string {
    return this.doc.file;
  }

  where(field: string): PackageWhere {
    return { file: this.doc.file, field };
  }

  /** Raw value at a dotted path, or undefined. */
  get(field: string): unknown {
    let node: unknown = this.doc.data;
    for (const key of field.split('.')) {
      if (node === null || typeof node !== 'object' || Array.isArray(node)) return undefined;
      node = (node as Record<string, unknown>)[key];
    }
    return node === null ? undefined : node;
  }

  has(field: string): boolean {
    return this.get(field) !== undefined;
  }

  fail(field: string, problem: string, fix: string): never {
    throw packageError(`${describeWhere(this.where(field))} ${problem}. ${fix}`, this.where(field));
  }

  private wrongType(field: string, expected: string): never {
    return this.fail(field, `is ${describeValue(this.get(field))}, not ${expected}`, `Write ${expected} there.`);
  }

  /** An integer ≥ min, or undefined when absent. */
  int(field: string, min = 0): number | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) return this.wrongType(field, 'an integer');
    if (value < min) this.fail(field, `is ${value}, but must be at least ${min}`, 'Fix the value.');
    return value;
  }

  /** A finite number within [min, max], or undefined when absent. */
  num(field: string, min = -Infinity, max = Infinity): number | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isFinite(value)) return this.wrongType(field, 'a number');
    if (value < min || value > max) {
      const range = max === Infinity ? `at least ${min}` : `between ${min} and ${max}`;
      this.fail(field, `is ${value}, but must be ${range}`, 'Fix the value.');
    }
    return value;
  }

  str(field: string): string | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'string') return this.wrongType(field, 'a string');
    return value;
  }

  bool(field: string): boolean | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'boolean') return this.wrongType(field, 'true or false');
    return value;
  }

  /** One integer or a list of integers (eos_token_id), as a list; undefined when absent. */
  intList(field: string): number[] | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (!Array.isArray(value)) {
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
        return this.wrongType(field, 'a token id (an integer ≥ 0) or a list of them');
      }
      return [value];
    }
    // The element at fault, named by its index: "is a list, not a list" told nothing.
    value.forEach((item: unknown, i) => {
      if (typeof item !== 'number' || !Number.isSafeInteger(item) || item < 0) {
        this.fail(
          `${field}[${i}]`,
          `is ${describeValue(item)}, not a token id (an integer ≥ 0)`,
          `Write the token's id there, or remove it from the list.`,
        );
      }
    });
    if (value.length === 0) this.fail(field, 'is an empty list', 'List at least one token id.');
    return value as number[];
  }

  /**
   * One token id (pad_token_id is never a list): undefined when absent, 'none' when negative, since older
   * conversions (Llama's) write -1 for "no such token".
   */
  tokenId(field: string): number | 'none' | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
      return this.wrongType(field, 'a token id (one integer; null or -1 for none)');
    }
    return value < 0 ? 'none' : value;
  }

  strList(field: string): string[] | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v === '')) {
      return this.wrongType(field, 'a list of non-empty strings');
    }
    return value as string[];
  }

  object(field: string): Record<string, unknown> | undefined {
    const value = this.get(field);
    if (value === undefined) return undefined;
    if (typeof value !== 'object' || Array.isArray(value)) return this.wrongType(field, 'an object');
    return value as Record<string, unknown>;
  }
}
