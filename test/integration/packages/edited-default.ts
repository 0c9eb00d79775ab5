/**
 * Copies of the generated default model package with one thing changed (a graph port's dims or name, a config
 * field), as the reviewer's packages were made: real files, for the real loaders and engine.
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import { afterAll, beforeAll } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import { defaultModelDir } from '../../helpers/fixtures';

const made: string[] = [];

/** Removes every copy made (call from afterAll). */
export async function removeEditedCopies(): Promise<void> {
  await Promise.all(made.splice(0).map((d) => fs.rm(d, { recursive: true, force: true })));
}

/**
 * A test file's RunnerService (one intra-op thread) for loading its edited copies: made before its tests, closed
 * after them, when the copies are removed too. Its `host` is read in the tests.
 */
export function editsHost(): { readonly host: RunnerService } {
  let host: RunnerService | undefined;
  beforeAll(() => {
    host = new RunnerService({ intraOpNumThreads: 1 });
  });
  afterAll(async () => {
    await host?.close();
    await removeEditedCopies();
  });
  return {
    get host() {
      if (!host) throw new Error('editsHost: read in a test, after beforeAll');
      return host;
    },
  };
}

/** The default package copied to a fresh folder named `name`. */
export function copyDefault(name: string): Promise<string> {
  return copyPackage(defaultModelDir, name);
}

/** The package at `source` copied to a fresh folder named `name`. */
export async function copyPackage(source: string, name: string): Promise<string> {
  const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-edited-'));
  made.push(parent);
  const dir = path.join(parent, name);
  await fs.cp(source, dir, { recursive: true });
  return dir;
}

/** Rewrites the graph of a copy (`onnx/model.onnx` unless `graph` names another) with `edit`. */
export async function editGraph(
  dir: string,
  edit: (graph: onnx.IGraphProto) => void,
  graph = 'onnx/model.onnx',
): Promise<void> {
  const file = path.join(dir, graph);
  const model = onnx.ModelProto.decode(await fs.readFile(file));
  edit(model.graph as onnx.IGraphProto);
  await fs.writeFile(file, onnx.ModelProto.encode(model).finish());
}

/** Makes axis `axis` of every graph input/output whose name passes `which` symbolic, named `name`. */
export function symbolicDim(graph: onnx.IGraphProto, which: (port: string) => boolean, axis: number, name: string) {
  for (const port of [...(graph.input ?? []), ...(graph.output ?? [])]) {
    if (!which(port.name ?? '')) continue;
    const dims = port.type?.tensorType?.shape?.dim ?? [];
    const at = axis < 0 ? dims.length + axis : axis;
    dims[at] = onnx.TensorShapeProto.Dimension.create({ dimParam: name });
  }
}

/** Renames a graph input or output everywhere it is used. */
export function renamePort(graph: onnx.IGraphProto, from: string, to: string): void {
  const r = (n: string) => (n === from ? to : n);
  for (const v of [...(graph.input ?? []), ...(graph.output ?? []), ...(graph.valueInfo ?? [])])
    v.name = r(v.name ?? '');
  for (const n of graph.node ?? []) {
    n.input = (n.input ?? []).map(r);
    n.output = (n.output ?? []).map(r);
  }
}

/** Changes a JSON file of a copy with `edit`. */
export async function editJson(dir: string, file: string, edit: (json: Record<string, unknown>) => void) {
  const abs = path.join(dir, file);
  const json = JSON.parse(await fs.readFile(abs, 'utf8')) as Record<string, unknown>;
  edit(json);
  await fs.writeFile(abs, JSON.stringify(json, null, 2));
}

/**
 * Moves every initializer of 1 KiB or more of a copy's `onnx/model.onnx` to `onnx/<location>` (as an export with
 * external weights writes it); `misstate` changes the `length` written for the first one by that many bytes.
 * Returns the graph's path and the first moved initializer's name and size.
 */
export async function externalWeights(dir: string, location = 'model.onnx.data', misstate = 0) {
  const file = path.join(dir, 'onnx/model.onnx');
  const model = onnx.ModelProto.decode(await fs.readFile(file));
  const data: Buffer[] = [];
  let offset = 0;
  let first: { name: string; bytes: number } | undefined;
  for (const t of model.graph?.initializer ?? []) {
    const raw = t.rawData;
    if (!raw || raw.length < 1024) continue;
    const length = first === undefined ? raw.length + misstate : raw.length;
    first ??= { name: t.name ?? '', bytes: raw.length };
    t.externalData = [
      { key: 'location', value: location },
      { key: 'offset', value: String(offset) },
      { key: 'length', value: String(length) },
    ];
    t.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
    t.rawData = new Uint8Array(0);
    data.push(Buffer.from(raw));
    offset += raw.length;
  }
  await fs.writeFile(path.join(dir, 'onnx', location), Buffer.concat(data));
  await fs.writeFile(file, onnx.ModelProto.encode(model).finish());
  if (first === undefined) throw new Error('the default graph has no initializer of 1 KiB or more');
  return { graph: file, tensor: first.name, bytes: first.bytes };
}
