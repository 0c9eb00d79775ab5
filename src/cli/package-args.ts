/**
 * What generate, chat and inspect check and find before a model loads: the request the flags make (against the
 * contract), the package a name means (a folder, or the library's), how it loads (the flags over the library's
 * pick). Apart from common.ts because it needs the model stack (zod's schemas, the library, the package loader,
 * the template renderer): `kvdesk --version`, `--help`, `pull` and a flag's error do not load it (main.ts imports
 * this file only where a command needs it).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { checkChatTemplate } from '../main/host/chat-template-pick';
import { hubSourceOf, type PulledName, pulledEntry, pulledNameOf, pullNameOf } from '../main/host/hub-download';
import { ModelLibrary, mergePick } from '../main/host/model-library';
import { detectLayout } from '../main/packages';
import { resolveUserPath } from '../main/store/user-path';
import { CHAT_TEMPLATE_MAX, type LoadModelRequest } from '../shared/api';
import { GenerateRequest } from '../shared/contract';
import { KvdeskError } from '../shared/errors';
import { BUNDLED_MODEL_DIR, badArgs, givenPath, libraryLog } from './common';
import { dataDirOf } from './data-dir';
import { decodeText } from './text-input';

/**
 * Checks the request the flags make against the contract before anything loads, so a value out of range is
 * refused at once (exit 2) naming its flag (`sampling.topP` is --top-p), not by every request after loading.
 */
export function checkFlags(request: Record<string, unknown>): void {
  const parsed = GenerateRequest.safeParse(request);
  if (parsed.success) return;
  const issue = parsed.error.issues[0];
  const path = (issue?.path ?? []).map((p) => (typeof p === 'number' ? `[${p}]` : String(p)));
  // The flag that set the field: a sampling setting's own, else the request field's.
  const key = path[0] === 'sampling' ? path[1] : path[0];
  const flag = key === undefined ? undefined : (FLAG_OF[key] ?? key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`));
  // Inside a file's JSON (a tool's name), the place in it too.
  const inner = path.length > (path[0] === 'sampling' ? 2 : 1) ? ` (${path.join('.').replace(/\.\[/g, '[')})` : '';
  // A number out of its range, said as a person would (not zod's `Too big: expected number to be <=20`).
  if (flag && !inner && key !== undefined && (issue?.code === 'too_small' || issue?.code === 'too_big')) {
    const schema = numberSchemaAt(issue.path);
    const value = issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown> | undefined)?.[k], request);
    const range = schema && rangeWords(schema, value);
    // A seed below 0: -1 is the one negative taken (a random seed), said so.
    const hint = flag === 'seed' ? ' (-1: a random seed)' : '';
    if (range) throw badArgs(`--${flag} must be ${range}, got ${String(value)}${hint}`);
  }
  throw badArgs(`${flag ? `--${flag}` : 'the request'}${inner}: ${issue?.message ?? 'invalid value'}`);
}

/** The number schema of a request field (`sampling.topP`), optional or not; undefined for any other. */
function numberSchemaAt(path: readonly PropertyKey[]): z.ZodNumber | undefined {
  const unwrap = (s: unknown): unknown =>
    s instanceof z.ZodOptional || s instanceof z.ZodDefault ? unwrap(s.unwrap()) : s;
  let schema: unknown = GenerateRequest;
  for (const key of path) {
    const object = unwrap(schema);
    if (!(object instanceof z.ZodObject) || typeof key !== 'string') return undefined;
    schema = (object.shape as Record<string, unknown>)[key];
  }
  const number = unwrap(schema);
  return number instanceof z.ZodNumber ? number : undefined;
}

/**
 * A number field's range in words: `between 0 and 20`, `1 or more`, `more than 0 and at most 10`; undefined when
 * it has none worth saying. A whole number's safe-integer bound is said only to a value past it (`--seed 1e20`:
 * `between 0 and 9007199254740991`, not `0 or more`). A bound the schema refuses itself is exclusive.
 */
function rangeWords(schema: z.ZodNumber, value: unknown): string | undefined {
  const n = typeof value === 'number' ? value : Number.NaN;
  const said = (v: number | null, past: (v: number) => boolean): v is number =>
    v !== null && Number.isFinite(v) && (Math.abs(v) < Number.MAX_SAFE_INTEGER || past(v));
  const lo = said(schema.minValue, (v) => n < v) ? schema.minValue : undefined;
  const hi = said(schema.maxValue, (v) => n > v) ? schema.maxValue : undefined;
  const loIn = lo !== undefined && schema.safeParse(lo).success;
  const hiIn = hi !== undefined && schema.safeParse(hi).success;
  if (lo !== undefined && hi !== undefined) {
    if (loIn && hiIn) return `between ${lo} and ${hi}`;
    return `${loIn ? 'at least' : 'more than'} ${lo} and ${hiIn ? 'at most' : 'less than'} ${hi}`;
  }
  if (lo !== undefined) return loIn ? `${lo} or more` : `more than ${lo}`;
  if (hi !== undefined) return hiIn ? `${hi} or less` : `less than ${hi}`;
  return undefined;
}

/** Request fields whose flag is not their name in kebab case. */
const FLAG_OF: Readonly<Record<string, string>> = {
  prompts: 'prompt',
  promptIdRows: 'prompt-ids',
  messages: 'prompt',
  prediction: 'prediction-file',
  reasoningEffort: 'effort',
};

/**
 * A package folder, or the id of a library package (as `ollama run NAME` takes a name): a path that exists is
 * the folder; otherwise the library's package with that id (each folder has its own; `id:latest`, Ollama's default
 * tag, is the id, and another tag is refused saying what to give instead), or, for a name such as
 * `owner/name`, `hf.co/owner/name:variant`, the one pulled from the hub under it (as the server's Ollama routes
 * resolve it: `kvdesk pull X` then `kvdesk chat X`).
 */
export async function packageDir(arg: string, dataDirFlag: string | undefined): Promise<string> {
  // A leading ~ is the home folder, as for --data-dir (also quoted, where the shell leaves it).
  if (arg.trim() === '') {
    throw badArgs('the package is empty (""): give a package folder or a library id (`kvdesk list` shows them)');
  }
  const dir = resolveUserPath(arg);
  if (existsSync(dir)) return dir;
  const hub = pulledNameOf(arg);
  if (arg.includes('/') || arg.includes(path.sep)) {
    // A path that is no hub name (`./model`, `/abs/model`): the load says it is not there.
    if (!hub) return dir;
    // A name in a folder that is there (`models/x@1` beside a models folder) is a path first: a pulled package
    // of that name is taken, else the load says the folder is not there (not that the hub name is not pulled).
    return pulledDir(arg, dir, hub, dataDirOf(dataDirFlag), existsSync(path.dirname(dir)));
  }
  const dataDir = dataDirOf(dataDirFlag);
  const library = await ModelLibrary.open(dataDir, { log: libraryLog, bundled: BUNDLED_MODEL_DIR });
  const present = library.list().filter((e) => !e.missing && existsSync(e.root));
  // Ollama's default tag (`ollama run smollm:latest`) is the id itself, as the server's Ollama routes take it
  // (resolveModel): an id has no `:` (slugify), so `name:latest` is never another package's id.
  const id = arg.endsWith(':latest') ? arg.slice(0, -':latest'.length) : arg;
  const entry = present.find((e) => sameId(e.id, id));
  if (entry) return entry.root;
  // The bundled model goes by the id serve and the window load it under (`default`, also where the library lists a
  // folder of that id that is not there any more: a clone at another path, a git worktree): the library's idFor.
  if (existsSync(BUNDLED_MODEL_DIR) && sameId(await library.idFor(BUNDLED_MODEL_DIR), id)) return BUNDLED_MODEL_DIR;
  // In the library, but its folder has gone (moved, deleted): said so, as `kvdesk list` says it is missing.
  const gone = library.list().find((e) => sameId(e.id, id));
  if (gone) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `there is no package folder "${arg}", and the library's package of that id was at ${gone.root}, which is not there any more: put that folder back, or give another package (\`kvdesk list\` shows the library; Forget on its row in kvdesk serve's window takes it out)`,
      { root: gone.root },
    );
  }
  const known = [...new Set(present.map((e) => e.id))].join(', ') || 'none';
  const tag = /^([^:]+):([^:]+)$/.exec(id);
  if (tag) {
    // Another Ollama tag (`smollm:7b`): a library package has no tags; a hub package's variant is named with its repo.
    throw new KvdeskError(
      'BAD_REQUEST',
      `there is no package folder "${arg}", and library ids take no tag: give the id alone ("${tag[1]}"; \`:latest\` may follow it, as Ollama's default tag), or a package pulled from the hub as owner/name:${tag[2]} or hf.co/owner/name:${tag[2]} (the library at ${dataDir} has: ${known}; \`kvdesk list\` shows them)`,
    );
  }
  throw new KvdeskError(
    'BAD_REQUEST',
    `there is no package folder "${arg}", and no package of that id in the library at ${dataDir} (it has: ${known}); give a folder, or an id \`kvdesk list\` shows`,
  );
}

/**
 * Whether a name given means the library's id: itself, or written decomposed (`e` + U+0301, as macOS writes folder
 * names and a paste from there brings them), as the server takes a request's `model` (model-names.ts): ids are NFC.
 */
const sameId = (id: string, name: string): boolean => id === name || id === name.normalize('NFC');

/**
 * The folder of the library's package pulled from the hub as `arg` (no folder of that name is there); none pulled so:
 * `dir` for the load to say it is not there when `pathFirst`, else said here.
 */
async function pulledDir(
  arg: string,
  dir: string,
  hub: PulledName,
  dataDir: string,
  pathFirst: boolean,
): Promise<string> {
  const library = await ModelLibrary.open(dataDir, { log: libraryLog });
  // Where each came from is in its folder (the library reads it when it checks them, which generate need not wait for).
  const present = await Promise.all(
    library
      .list()
      .filter((e) => !e.missing && existsSync(e.root))
      .map(async (e) => {
        const source = await hubSourceOf(e.root);
        return source ? { ...e, source } : e;
      }),
  );
  // Pulled at another revision: said so, with the package to delete and the pull that replaces it.
  // A path whose parent folder is here: a package pulled under that name at another revision is not it either (the
  // folder's own error says what is wrong).
  let entry: ReturnType<typeof pulledEntry>;
  const replace = (e: { root: string }, named: PulledName) => `delete ${e.root}, then \`${pullCommand(named)}\``;
  try {
    // As the name is, then composed (NFC), as the server resolves it.
    entry = pulledEntry(present, arg, replace) ?? pulledEntry(present, arg.normalize('NFC'), replace);
  } catch (err) {
    if (pathFirst) return dir;
    throw err;
  }
  if (entry) return entry.root;
  if (pathFirst) return dir;
  const pulled = present.flatMap((e) => (e.source ? [`hf.co/${e.source.repo}:${e.source.variant}`] : []));
  throw new KvdeskError(
    'BAD_REQUEST',
    `there is no package folder ${dir}, and no package in the library at ${dataDir} was pulled from the hub as ${pullNameOf(hub)} (${pulled.length > 0 ? `pulled: ${pulled.join(', ')}` : 'none was pulled'}); give a folder, or a package \`kvdesk list\` shows (\`${pullCommand(hub)}\` downloads it)`,
  );
}

/** The `kvdesk pull` of a package named so: `kvdesk pull owner/name[@revision] [--variant V]`. */
const pullCommand = (named: PulledName): string =>
  `kvdesk pull ${named.repo}${named.revision !== undefined ? `@${named.revision}` : ''}${named.variant !== undefined ? ` --variant ${named.variant}` : ''}`;

/** `--chat-template FILE`: the template's text (a file of Jinja), or a clear word when it cannot be read. */
function chatTemplateFlag(file: string | undefined): string | undefined {
  if (file === undefined) return undefined;
  let bytes: Buffer;
  try {
    bytes = readFileSync(givenPath('--chat-template', file));
  } catch (err) {
    if (err instanceof KvdeskError) throw err;
    throw badArgs(`--chat-template: cannot read ${file} (${(err as Error).message}): give a file of Jinja`);
  }
  // UTF-8 (its BOM dropped) or UTF-16 by its BOM, as every file a flag names.
  const text = decodeText(bytes, `--chat-template: ${file}`);
  if (text.trim() === '') throw badArgs(`--chat-template: ${file} is empty: give a file of Jinja`);
  if (text.length > CHAT_TEMPLATE_MAX) {
    throw badArgs(`--chat-template: ${file} is over ${CHAT_TEMPLATE_MAX / 1024} KiB; no chat template is that long`);
  }
  // Checked before anything loads, naming the flag.
  checkChatTemplate(text, `--chat-template ${file}`);
  return text;
}

/**
 * `--chat-template FILE` (its text, checked) or `--package-template` (null: the package's own for this run, whatever
 * the library keeps, as "the package's" on a card); undefined when neither.
 */
export function templateFlags(values: {
  'chat-template'?: string | undefined;
  'package-template'?: boolean | undefined;
}): string | null | undefined {
  if (values['package-template'] === true && values['chat-template'] !== undefined) {
    throw badArgs('--package-template and --chat-template contradict: give one of them');
  }
  return values['package-template'] === true ? null : chatTemplateFlag(values['chat-template']);
}

/**
 * How the package at `dir` loads: what the flags ask for, over the pick the library keeps for it (as `kvdesk
 * serve` and the window load it: the person's last variant, backend, trust and chat template), when it has one.
 */
export async function loadFlags(
  dir: string,
  values: {
    variant?: string | undefined;
    backend?: string | undefined;
    'trust-installed'?: boolean | undefined;
    'chat-template'?: string | undefined;
    'package-template'?: boolean | undefined;
    'data-dir'?: string | undefined;
  },
): Promise<LoadModelRequest> {
  const template = templateFlags(values);
  const named: LoadModelRequest = {
    ...(values.variant !== undefined ? { variant: values.variant } : {}),
    ...(values.backend !== undefined ? { backend: values.backend } : {}),
    ...(values['trust-installed'] === true ? { trustInstalled: true } : {}),
    ...(template !== undefined ? { chatTemplate: template } : {}),
  };
  const library = await ModelLibrary.open(dataDirOf(values['data-dir']), { log: libraryLog });
  const kept = await library.pickFor(dir);
  if (!kept) return named;
  return mergePick(kept, named, (await detectLayout(dir).catch(() => undefined)) === 'ort-package');
}
