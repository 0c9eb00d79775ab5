import { promises as fs, constants as fsConstants } from 'node:fs';
import path from 'node:path';
import type { GraphPort, KvDtype, PortDtype } from '../../shared/model-spec';
import { isLfsPointerFile, lfsPointerError } from './lfs-pointer';
import { type OnnxGraphInfo, type OnnxValueInfo, readOnnxGraphInfo } from './onnx-reader';
import { describeWhere, formatBytes, type PackageWhere, packageError } from './package-error';
import { type PackageContext, relName, resolveConfigPath } from './package-fs';

/** A decoder graph read and checked: its info plus the external-data files it needs. */
export interface LoadedGraph {
  /** Real absolute path of the .onnx file. */
  path: string;
  /** Path relative to the package root, used in messages. */
  file: string;
  info: OnnxGraphInfo;
  /** Graph file bytes plus the distinct external-data files' bytes. */
  weightsBytes: number;
  /** External-data files (relative to the package root). */
  externalFiles: string[];
}

const PORT_DTYPES: Record<number, PortDtype> = {
  1: 'float32',
  2: 'uint8',
  3: 'int8',
  6: 'int32',
  7: 'int64',
  9: 'bool',
  10: 'float16',
  16: 'bfloat16',
};

const ONNX_TYPE_NAMES: Record<number, string> = {
  0: 'undefined (not a tensor)',
  1: 'float32',
  2: 'uint8',
  3: 'int8',
  4: 'uint16',
  5: 'int16',
  6: 'int32',
  7: 'int64',
  8: 'string',
  9: 'bool',
  10: 'float16',
  11: 'float64',
  12: 'uint32',
  13: 'uint64',
  14: 'complex64',
  15: 'complex128',
  16: 'bfloat16',
  17: 'float8e4m3fn',
  18: 'float8e4m3fnuz',
  19: 'float8e5m2',
  20: 'float8e5m2fnuz',
  21: 'uint4',
  22: 'int4',
  23: 'float4e2m1',
};

const KV_BYTES: Record<KvDtype, number> = { float32: 4, float16: 2, bfloat16: 2 };

/** Name of an ONNX element type for messages. */
export function onnxTypeName(elemType: number): string {
  return ONNX_TYPE_NAMES[elemType] ?? `type ${elemType}`;
}

/** The PortDtype of an ONNX element type, or undefined when kvdesk cannot bind such a port. */
export function portDtype(elemType: number): PortDtype | undefined {
  return PORT_DTYPES[elemType];
}

/** The KvDtype of an ONNX element type, or undefined when it is not a supported KV type. */
export function kvDtype(elemType: number): KvDtype | undefined {
  const t = PORT_DTYPES[elemType];
  return t === 'float32' || t === 'float16' || t === 'bfloat16' ? t : undefined;
}

/** Bytes per element of a KV dtype. */
export function kvDtypeBytes(dtype: KvDtype): number {
  return KV_BYTES[dtype];
}

/** `[batch, 2, seq, 8]` for messages. */
export function formatShape(shape: Array<number | string> | undefined): string {
  return shape === undefined ? '(no declared shape)' : `[${shape.join(', ')}]`;
}

/** ONNX's element type number for bfloat16. */
const BFLOAT16 = 16;

/**
 * onnxruntime-node, which kvdesk runs every model with, cannot open a graph with a bfloat16 input or output: its
 * session refuses to start ("Unsupported data type: 16"), whatever the backend, and its JavaScript tensors have no
 * bfloat16 to feed or read. bfloat16 inside the graph is fine; at the graph's edges it is refused here, with that
 * reason, instead of at load with a message about operators or a damaged file.
 */
function refuseBfloat16Ports(info: OnnxGraphInfo, file: string): void {
  const ports = [
    ...info.inputs.map((v) => ({ kind: 'input', name: v.name, elemType: v.elemType })),
    ...info.outputs.map((v) => ({ kind: 'output', name: v.name, elemType: v.elemType })),
  ].filter((p) => p.elemType === BFLOAT16);
  const [first] = ports;
  if (first === undefined) return;
  const shown = ports.slice(0, 4).map((p) => `${p.kind} "${p.name}"`);
  const more = ports.length > shown.length ? `, and ${ports.length - shown.length} more` : '';
  throw packageError(
    `${file}: ${shown.join(', ')}${more} ${ports.length === 1 ? 'is' : 'are'} bfloat16. kvdesk runs models with onnxruntime-node, which cannot open a graph whose inputs or outputs are bfloat16 (it refuses it with "Unsupported data type: 16"; bfloat16 inside the graph is fine). ` +
      'Use a float16 or float32 export of this model (e.g. optimum-cli export onnx --dtype fp16), or one whose bfloat16 ports are cast to float16 or float32 inside the graph.',
    { file, field: `${first.kind} "${first.name}"` },
    { ports: ports.map((p) => p.name), dtype: 'bfloat16' },
  );
}

/**
 * Reads the graph header and checks every external-data reference: the
 * location must stay inside the package and the referenced byte range must
 * exist in the data file (a truncated download is the usual cause).
 */
export async function loadGraph(ctx: PackageContext, absPath: string): Promise<LoadedGraph> {
  const file = relName(ctx, absPath);
  const info = await readOnnxGraphInfo(absPath, file);
  refuseBfloat16Ports(info, file);
  const dataSizes = new Map<string, number>();
  // Big exports reference one data file from hundreds of initializers: check each location once.
  const resolved = new Map<string, string>();
  for (const ref of info.externalData) {
    // onnxruntime reads exactly dims × element width and refuses any other `length` at load ("external data size
    // mismatch"); a length that disagrees is a damaged or hand-edited graph.
    if (ref.length !== undefined && ref.tensorBytes !== undefined && ref.length !== ref.tensorBytes) {
      throw packageError(
        `${file}: initializer "${ref.tensor}" says its external data in ${ref.location} is ${ref.length} bytes long ` +
          `(\`external_data.length\`), but its shape ${formatShape(ref.dims)} of ${onnxTypeName(ref.elemType)} takes ` +
          `${ref.tensorBytes} bytes, and onnxruntime refuses a graph whose lengths disagree. Re-export ${file} with its ` +
          `external data, or set that initializer's external_data.length to ${ref.tensorBytes}.`,
        { file, field: `initializer "${ref.tensor}" external_data.length` },
        { graphFile: file, tensor: ref.tensor, length: ref.length, tensorBytes: ref.tensorBytes },
      );
    }
    const where: PackageWhere = { file, field: `initializer "${ref.tensor}" external_data.location` };
    let dataPath = resolved.get(ref.location);
    if (dataPath === undefined) {
      dataPath = await resolveConfigPath(ctx, ref.location, where, path.dirname(absPath));
      // onnxruntime opens it only at load, and then blames the graph ("may use operators this build lacks"): a
      // data file this user may not read is refused here as every other unreadable package file is (EACCES).
      await fs.access(dataPath, fsConstants.R_OK);
      resolved.set(ref.location, dataPath);
    }
    let size = dataSizes.get(dataPath);
    if (size === undefined) {
      size = (await fs.stat(dataPath)).size;
      // A clone without Git LFS: the pointer in place of the weights would read as a truncated data file.
      if (await isLfsPointerFile(dataPath, size)) throw lfsPointerError(relName(ctx, dataPath));
      dataSizes.set(dataPath, size);
    }
    const end = ref.offset + (ref.length ?? 0);
    if (end > size) {
      const dataFile = relName(ctx, dataPath);
      throw packageError(
        `${dataFile} is truncated: ${file} stores initializer "${ref.tensor}" at bytes ${ref.offset}..${end} of it, ` +
          `but ${dataFile} has only ${formatBytes(size)}. Re-download or re-export ${dataFile} (and ${file}) completely.`,
        { file: dataFile, field: `initializer "${ref.tensor}"` },
        { graphFile: file, dataFile, expectedBytes: end, actualBytes: size },
      );
    }
  }
  let weightsBytes = info.fileBytes;
  for (const size of dataSizes.values()) weightsBytes += size;
  return {
    path: absPath,
    file,
    info,
    weightsBytes,
    externalFiles: [...dataSizes.keys()].map((p) => relName(ctx, p)).sort(),
  };
}

/** The graph's actual inputs and outputs, for messages about a name it lacks. */
export function describeGraphIo(graph: LoadedGraph): string {
  const names = (list: OnnxValueInfo[]): string => list.map((v) => v.name).join(', ');
  return `${graph.file} has inputs: ${names(graph.info.inputs)}; outputs: ${names(graph.info.outputs)}`;
}

export function findInput(graph: LoadedGraph, name: string): OnnxValueInfo | undefined {
  return graph.info.inputs.find((v) => v.name === name);
}

export function findOutput(graph: LoadedGraph, name: string): OnnxValueInfo | undefined {
  return graph.info.outputs.find((v) => v.name === name);
}

/** What a port binding needs to say when it fails: the config place that named the port, if any. */
export interface PortSource {
  /** Where the name came from; undefined when it is the layout's conventional default. */
  where: PackageWhere | undefined;
  /** The config field (and file) that can name this port, for the "set … to" hint. */
  hint: string;
  /** What to do instead of setting a field (a layout with no field that names its ports): a whole sentence. */
  fix?: string;
}

/**
 * Binds a named graph input/output. A missing name is an error naming the port,
 * the field that named it (or the convention that implied it) and the graph's
 * actual ports; a port of a type kvdesk cannot feed is an error too.
 */
export function bindPort(
  graph: LoadedGraph,
  kind: 'input' | 'output',
  name: string,
  source: PortSource,
  allowed: readonly PortDtype[],
): GraphPort {
  const found = kind === 'input' ? findInput(graph, name) : findOutput(graph, name);
  const where = source.where ?? { file: graph.file };
  if (found === undefined) {
    const origin =
      source.where === undefined
        ? `kvdesk expects the ${kind} "${name}" (the layout's convention)`
        : `${describeWhere(source.where)} names the ${kind} "${name}"`;
    throw packageError(
      `${origin}, but the graph has no such ${kind}. ${describeGraphIo(graph)}. ` +
        (source.fix ?? `Set ${source.hint} to the right name, or use the graph that belongs to this package.`),
      where,
      {
        port: name,
        graphFile: graph.file,
        graphInputs: graph.info.inputs.map((i) => i.name),
        graphOutputs: graph.info.outputs.map((o) => o.name),
      },
    );
  }
  const dtype = portDtype(found.elemType);
  if (dtype === undefined || !allowed.includes(dtype)) {
    throw packageError(
      `${graph.file}: ${kind} "${name}" has element type ${onnxTypeName(found.elemType)}; kvdesk binds it only as ${allowed.join(' or ')}. ` +
        `Check that ${source.hint} names the right port, or re-export the model with a supported type.`,
      where,
      { port: name, dtype: onnxTypeName(found.elemType) },
    );
  }
  return { name: found.name, dtype, shape: found.shape ?? [] };
}

/** Like bindPort, but an absent port is fine (optional inputs bound only when the graph has them). */
export function bindOptionalPort(
  graph: LoadedGraph,
  kind: 'input' | 'output',
  name: string,
  source: PortSource,
  allowed: readonly PortDtype[],
): GraphPort | undefined {
  const found = kind === 'input' ? findInput(graph, name) : findOutput(graph, name);
  if (found === undefined && source.where === undefined) return undefined;
  return bindPort(graph, kind, name, source, allowed);
}

export const ID_DTYPES: readonly PortDtype[] = ['int32', 'int64'];
export const MASK_DTYPES: readonly PortDtype[] = ['int32', 'int64', 'bool'];
export const LOGITS_DTYPES: readonly PortDtype[] = ['float32', 'float16', 'bfloat16'];

/** The last dim of the logits output when it is a fixed number: the vocabulary the model scores. */
export function logitsVocab(logits: GraphPort): number | undefined {
  const last = logits.shape[logits.shape.length - 1];
  return typeof last === 'number' && last > 0 ? last : undefined;
}

/** Where a graph input nothing binds should be bound, and what to do: for {@link refuseUnboundInputs}. */
export interface UnboundAdvice {
  /** The config field that binds such an input (or the graph input itself, where no field can). */
  where: PackageWhere;
  fix: string;
}

/** What a graph input's name says it is, for advice on binding it. */
export function inputKind(name: string): 'mask' | 'positions' | 'kv' | 'cache-branch' | 'other' {
  if (/use_cache_branch/i.test(name)) return 'cache-branch';
  if (/mask/i.test(name)) return 'mask';
  if (/position|pos_ids|cache_position/i.test(name)) return 'positions';
  if (/past|cache|\bkv|key|value/i.test(name)) return 'kv';
  return 'other';
}

/**
 * Graph inputs no binding claimed are refused: the engine feeds the token ids, the mask, the positions and the KV
 * cache (or the static cache's ports) and nothing else, and onnxruntime refuses a run without an input the graph
 * needs ("input 'attention_mask' is missing in 'feeds'"), so such a package used to load and then fail every
 * request. Inputs with a default (an initializer) are not inputs here (onnx-reader leaves them out).
 */
export function refuseUnboundInputs(
  graph: LoadedGraph,
  bound: Set<string>,
  advise: (input: string) => UnboundAdvice,
): void {
  const unbound = graph.info.inputs.filter((input) => !bound.has(input.name));
  const [first] = unbound;
  if (first === undefined) return;
  const one = unbound.length === 1;
  const shown = unbound
    .slice(0, 4)
    .map((i) => `"${i.name}" (${onnxTypeName(i.elemType)} ${formatShape(i.shape)})`)
    .join(', ');
  const more = unbound.length > 4 ? `, and ${unbound.length - 4} more` : '';
  const { where, fix } = advise(first.name);
  throw packageError(
    `${graph.file} has the ${one ? 'input' : 'inputs'} ${shown}${more}, which no port binding names, so kvdesk would not feed ${one ? 'it' : 'them'} and onnxruntime would refuse every request (it runs a graph only with all its inputs). ${fix}`,
    where,
    { port: first.name, graphFile: graph.file, unbound: unbound.map((i) => i.name) },
  );
}
