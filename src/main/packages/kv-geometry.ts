import type { ConfiguredKvSize, KvDtype, KvSizeSource, KvTensorSpec, StaticCacheSpec } from '../../shared/model-spec';
import {
  describeGraphIo,
  findInput,
  findOutput,
  formatShape,
  kvDtype,
  kvDtypeBytes,
  type LoadedGraph,
  onnxTypeName,
  portDtype,
} from './graph';
import type { OnnxValueInfo } from './onnx-reader';
import { describeWhere, type PackageWhere, packageError } from './package-error';
import type { PackageContext } from './package-fs';

/**
 * Geometry the package's config declares, used only where the graph leaves a
 * head count or head size symbolic. `fieldsHint` says what to add when neither
 * the graph nor the config can tell.
 */
export interface KvFallback {
  kvHeads?: number;
  headDim?: number;
  /** Where kvHeads/headDim came from, for the warning (e.g. `config.json num_key_value_heads / head_dim`). */
  source: string;
  /** What to add to make geometry derivable (file and field names). */
  fieldsHint: string;
  /** The fields kvHeads and headDim were read from, for the engine's load-time check of what it fills in. */
  kvHeadsFrom?: KvSizeSource;
  headDimFrom?: KvSizeSource;
}

/** One past input and the present output that replaces it, before geometry is derived. */
export interface KvPairRef {
  layer: number;
  role: 'key' | 'value' | 'combined';
  past: string;
  present: string;
  /** The config field that named the past input, if a config did. */
  where?: PackageWhere;
  /** The config field that named the present output, when it is a different field. */
  presentWhere?: PackageWhere;
}

/** Dynamic KV cache derived from the graph: the tensors, their total bytes per token, the layer count. */
export interface DynamicKv {
  tensors: KvTensorSpec[];
  bpt: number;
  numLayers: number;
}

// Symbolic dim names exporters use for the growing axis (past_sequence_length, total_seq_len, past, cache_len, …).
const SEQ_DIM_NAME = /seq|past|len|total|cache|ctx|context|pos/i;

function cannotDerive(graph: LoadedGraph, past: OnnxValueInfo, reason: string, fallback: KvFallback): Error {
  return packageError(
    `KV geometry cannot be derived: ${graph.file} input "${past.name}" has shape ${formatShape(past.shape)}; ${reason}. ${fallback.fieldsHint}`,
    { file: graph.file, field: `input "${past.name}"` },
    { port: past.name, shape: (past.shape ?? []).map(String) },
  );
}

function missingPort(
  graph: LoadedGraph,
  kind: 'input' | 'output',
  name: string,
  where: PackageWhere | undefined,
  what: string,
): Error {
  const origin =
    where === undefined ? `The ${what} "${name}"` : `${describeWhere(where)} names the ${what} "${name}", but it`;
  return packageError(
    `${origin} is not a graph ${kind}. ${describeGraphIo(graph)}. Fix the name${where === undefined ? '' : ` in ${where.file}`} or use the graph that belongs to this package.`,
    where ?? { file: graph.file },
    {
      port: name,
      graphFile: graph.file,
      graphInputs: graph.info.inputs.map((i) => i.name),
      graphOutputs: graph.info.outputs.map((o) => o.name),
    },
  );
}

function requireKvDtype(graph: LoadedGraph, port: OnnxValueInfo, kind: 'input' | 'output'): KvDtype {
  const dtype = kvDtype(port.elemType);
  if (dtype === undefined) {
    throw packageError(
      `${graph.file}: KV ${kind} "${port.name}" has element type ${onnxTypeName(port.elemType)}; kvdesk runs float32 and float16 KV caches only. ` +
        'Use a variant of the model exported with a float KV cache.',
      { file: graph.file, field: `${kind} "${port.name}"` },
      { port: port.name, dtype: onnxTypeName(port.elemType) },
    );
  }
  return dtype;
}

interface Geometry {
  batchAxis: number;
  seqAxis: number;
  kvHeads: number;
  headDim: number;
  /** Product of the dims other than batch and sequence (includes the K/V axis of a combined cache). */
  elementsPerToken: number;
  /**
   * The declared shape with every axis but batch and sequence a number: sizes the graph leaves symbolic are the
   * ones worked out here (from the package config), which is what the engine builds the cache tensors with.
   */
  shape: Array<number | string>;
  /** The sizes of `shape` taken from the package config. */
  configured: ConfiguredKvSize[];
}

/**
 * A finding about one KV input's geometry. Every layer's inputs usually share it, so buildDynamicKv says it once
 * for all the inputs with the same `key` (`say` writes it for a subject: one input's name, or "all 8 KV inputs").
 */
interface GeometryNote {
  key: string;
  input: string;
  say: (subject: string, plural: boolean) => string;
}

function deriveGeometry(
  notes: GeometryNote[],
  graph: LoadedGraph,
  past: OnnxValueInfo,
  role: KvPairRef['role'],
  fallback: KvFallback,
): Geometry {
  const note = (key: string, say: GeometryNote['say']) => notes.push({ key, input: past.name, say });
  const shape = past.shape;
  if (shape === undefined) throw cannotDerive(graph, past, 'the graph declares no shape for it', fallback);
  const combined = role === 'combined';
  if (combined && (shape.length !== 5 || shape[0] !== 2)) {
    throw cannotDerive(
      graph,
      past,
      'a combined past_%d cache must have the shape [2, batch, kv_heads, seq, head_dim]',
      fallback,
    );
  }
  if (!combined && shape.length !== 4 && shape.length !== 3) {
    throw cannotDerive(
      graph,
      past,
      'kvdesk reads split KV caches shaped [batch, kv_heads, seq, head_dim] or [batch, seq, width]',
      fallback,
    );
  }
  const kvAxis = combined ? 0 : -1;
  const defaultBatch = combined ? 1 : 0;
  const defaultSeq = shape.length === 3 ? 1 : defaultBatch + 2;
  const symbolic: number[] = [];
  shape.forEach((d, i) => {
    if (typeof d !== 'number' && i !== kvAxis) symbolic.push(i);
  });

  let batchAxis: number;
  let seqAxis: number;
  const [first, ...rest] = symbolic;
  if (first !== undefined && rest.length === 1 && rest[0] !== undefined) {
    batchAxis = first;
    seqAxis = rest[0];
  } else if (first !== undefined && rest.length > 1) {
    batchAxis = first;
    const named = rest.filter((i) => SEQ_DIM_NAME.test(String(shape[i])));
    const chosen = named.length === 1 ? named[0] : rest.includes(defaultSeq) ? defaultSeq : undefined;
    if (chosen === undefined)
      throw cannotDerive(graph, past, 'several axes are symbolic and none is recognisably the sequence axis', fallback);
    seqAxis = chosen;
  } else if (first !== undefined && shape[defaultBatch] === 1 && defaultBatch !== first) {
    // Some exports fix batch to 1; the cache still grows along its one symbolic axis.
    batchAxis = defaultBatch;
    seqAxis = first;
    note(
      'batch-1',
      (subject, plural) =>
        `${subject} ${plural ? 'fix' : 'fixes'} the batch axis to 1, so the engine can run one row per step.`,
    );
  } else {
    throw cannotDerive(
      graph,
      past,
      symbolic.length === 0
        ? 'no axis is symbolic, so it has no growing sequence axis (a pre-allocated cache must be declared as a static cache)'
        : 'only one axis is symbolic, so batch and sequence cannot be told apart',
      fallback,
    );
  }

  const inner = shape.map((_, i) => i).filter((i) => i !== kvAxis && i !== batchAxis && i !== seqAxis);
  const filled: string[] = [];
  const configured: ConfiguredKvSize[] = [];
  const configuredSize = (axis: number | undefined, size: number | undefined, what: ConfiguredKvSize['what']) => {
    const source = what === 'head size' ? fallback.headDimFrom : fallback.kvHeadsFrom;
    if (axis === undefined || size === undefined || source === undefined) return;
    if (what !== 'width') configured.push({ axis, size, what, ...source });
    else {
      const dims = fallback.headDimFrom;
      const read = (s: KvSizeSource) => s.readFrom ?? `\`${s.field}\``;
      configured.push({ axis, size, what, ...source, readFrom: `${read(source)} × ${dims ? read(dims) : '?'}` });
    }
  };
  const fixed = (axis: number | undefined): number | undefined => {
    const d = axis === undefined ? undefined : shape[axis];
    return typeof d === 'number' ? d : undefined;
  };
  let kvHeads: number | undefined;
  let headDim: number | undefined;
  if (inner.length === 2) {
    kvHeads = fixed(inner[0]);
    headDim = fixed(inner[1]);
    if (kvHeads === undefined) {
      kvHeads = fallback.kvHeads;
      filled.push(`kv_heads = ${kvHeads ?? '?'}`);
      configuredSize(inner[0], kvHeads, 'KV heads');
    } else if (fallback.kvHeads !== undefined && fallback.kvHeads !== kvHeads) {
      const graphHeads = kvHeads;
      note(
        `heads ${graphHeads}`,
        (subject, plural) =>
          `${subject} ${plural ? 'have' : 'has'} ${graphHeads} KV heads but ${fallback.source} says ${fallback.kvHeads}; the graph wins.`,
      );
    }
    if (headDim === undefined) {
      headDim = fallback.headDim;
      filled.push(`head_dim = ${headDim ?? '?'}`);
      configuredSize(inner[1], headDim, 'head size');
    } else if (fallback.headDim !== undefined && fallback.headDim !== headDim) {
      const graphDim = headDim;
      note(
        `head-size ${graphDim}`,
        (subject, plural) =>
          `${subject} ${plural ? 'have' : 'has'} head size ${graphDim} but ${fallback.source} says ${fallback.headDim}; the graph wins.`,
      );
    }
    if (kvHeads === undefined || headDim === undefined) {
      throw cannotDerive(
        graph,
        past,
        `its ${kvHeads === undefined ? 'KV-head' : 'head-size'} axis is symbolic and the package config does not give it`,
        fallback,
      );
    }
  } else {
    // [batch, seq, width]: one axis holds heads × head_dim; split it when the config says how.
    let width = fixed(inner[0]);
    const fromConfig =
      fallback.kvHeads !== undefined && fallback.headDim !== undefined
        ? fallback.kvHeads * fallback.headDim
        : undefined;
    if (width === undefined) {
      if (fromConfig === undefined)
        throw cannotDerive(
          graph,
          past,
          'its width axis is symbolic and the package config does not give the KV heads and head size',
          fallback,
        );
      width = fromConfig;
      filled.push(`width = ${width}`);
      configuredSize(inner[0], width, 'width');
    }
    if (fromConfig === width && fallback.kvHeads !== undefined && fallback.headDim !== undefined) {
      kvHeads = fallback.kvHeads;
      headDim = fallback.headDim;
    } else {
      kvHeads = 1;
      headDim = width;
    }
  }
  if (filled.length > 0) {
    const said = `symbolic dims where sizes must be fixed (${formatShape(shape)}); using ${filled.join(', ')} from ${fallback.source}.`;
    note(`filled ${said}`, (subject, plural) => `${subject} ${plural ? 'have' : 'has'} ${said}`);
  }
  if (!(kvHeads > 0 && headDim > 0)) throw cannotDerive(graph, past, 'a head count or head size is zero', fallback);
  const sizes = inner.length === 2 ? [kvHeads, headDim] : [kvHeads * headDim];
  const resolved = shape.map((d, i) => {
    const at = inner.indexOf(i);
    return at < 0 ? d : (sizes[at] as number);
  });
  return {
    batchAxis,
    seqAxis,
    kvHeads,
    headDim,
    elementsPerToken: (combined ? 2 : 1) * kvHeads * headDim,
    shape: resolved,
    configured,
  };
}

/**
 * One KV port named for two slots (a list that repeats an entry, two name templates that match the same port)
 * passes every per-layer check, then the engine feeds one tensor twice and every request fails: refused here,
 * naming the field that repeats it and the one that named it first.
 */
function refuseRepeat(
  graph: LoadedGraph,
  kind: 'input' | 'output',
  name: string,
  pair: KvPairRef,
  first: KvPairRef | undefined,
  where: PackageWhere | undefined,
): void {
  if (first === undefined) return;
  const firstWhere = kind === 'input' ? first.where : (first.presentWhere ?? first.where);
  const at = where ?? { file: graph.file };
  const before =
    firstWhere?.field !== undefined && firstWhere.field !== where?.field ? ` (already \`${firstWhere.field}\`)` : '';
  const slot = (p: KvPairRef) => `layer ${p.layer}'s ${p.role === 'combined' ? 'cache' : p.role}`;
  throw packageError(
    `${describeWhere(at)} repeats "${name}"${before}: one graph ${kind} cannot be both ${slot(first)} and ${slot(pair)}. ` +
      `Name each KV ${kind} once${where?.field !== undefined ? ` in ${at.file}` : ''}.`,
    at,
    { port: name },
  );
}

/** One warning per kind of finding, naming the input when it is one, counting them when they are several. */
function sayNotes(ctx: PackageContext, graph: LoadedGraph, notes: GeometryNote[], total: number): void {
  const byKey = new Map<string, GeometryNote[]>();
  for (const n of notes) byKey.set(n.key, [...(byKey.get(n.key) ?? []), n]);
  for (const group of byKey.values()) {
    const [first] = group;
    if (first === undefined) continue;
    const names = group.map((n) => `"${n.input}"`);
    const subject =
      group.length === 1
        ? `KV input ${names[0]}`
        : group.length === total
          ? `${total === 2 ? 'both' : `all ${total}`} KV inputs`
          : `${group.length} of the ${total} KV inputs (${names.slice(0, 3).join(', ')}${group.length > 3 ? ', …' : ''})`;
    ctx.warnings.push(`${graph.file}: ${first.say(subject, group.length > 1)}`);
  }
}

/**
 * Derives the dynamic (past/present) KV cache from the graph's declared past
 * inputs: dtype, axes, heads, head size and bytes per token per tensor; checks
 * that every layer has a key and a value (or a combined) past input with a
 * matching present output of the same dtype.
 */
export function buildDynamicKv(
  ctx: PackageContext,
  graph: LoadedGraph,
  pairs: KvPairRef[],
  fallback: KvFallback,
): DynamicKv {
  const tensors: KvTensorSpec[] = [];
  const roles = new Map<number, Set<KvPairRef['role']>>();
  const notes: GeometryNote[] = [];
  const pasts = new Map<string, KvPairRef>();
  const presents = new Map<string, KvPairRef>();
  for (const pair of pairs) {
    refuseRepeat(graph, 'input', pair.past, pair, pasts.get(pair.past), pair.where);
    pasts.set(pair.past, pair);
    refuseRepeat(graph, 'output', pair.present, pair, presents.get(pair.present), pair.presentWhere ?? pair.where);
    presents.set(pair.present, pair);
    const past = findInput(graph, pair.past);
    if (past === undefined)
      throw missingPort(graph, 'input', pair.past, pair.where, `layer ${pair.layer} ${pair.role} past input`);
    const present = findOutput(graph, pair.present);
    if (present === undefined)
      throw missingPort(
        graph,
        'output',
        pair.present,
        pair.presentWhere ?? pair.where,
        `layer ${pair.layer} ${pair.role} present output (for "${pair.past}")`,
      );
    const dtype = requireKvDtype(graph, past, 'input');
    const presentDtype = requireKvDtype(graph, present, 'output');
    if (presentDtype !== dtype) {
      throw packageError(
        `${graph.file}: KV input "${past.name}" is ${dtype} but its present output "${present.name}" is ${presentDtype}; they must match. Use a consistently exported graph.`,
        { file: graph.file, field: `output "${present.name}"` },
      );
    }
    if (past.shape !== undefined && present.shape !== undefined && past.shape.length !== present.shape.length) {
      throw packageError(
        `${graph.file}: KV input "${past.name}" ${formatShape(past.shape)} and its present output "${present.name}" ${formatShape(present.shape)} have different ranks, so they are not a past/present pair. Check the KV port names.`,
        pair.where ?? { file: graph.file, field: `output "${present.name}"` },
      );
    }
    const g = deriveGeometry(notes, graph, past, pair.role, fallback);
    tensors.push({
      layer: pair.layer,
      role: pair.role,
      past: past.name,
      present: present.name,
      dtype,
      shape: g.shape,
      batchAxis: g.batchAxis,
      seqAxis: g.seqAxis,
      kvHeads: g.kvHeads,
      headDim: g.headDim,
      bytesPerToken: g.elementsPerToken * kvDtypeBytes(dtype),
      ...(g.configured.length > 0 ? { configured: g.configured } : {}),
    });
    const seen = roles.get(pair.layer) ?? new Set();
    if (seen.has(pair.role)) {
      throw packageError(
        `${describeWhere(pair.where ?? { file: graph.file })}: layer ${pair.layer} has more than one ${pair.role} KV input (the second is "${pair.past}"). Each layer needs exactly one key and one value input.`,
        pair.where ?? { file: graph.file },
      );
    }
    seen.add(pair.role);
    roles.set(pair.layer, seen);
  }
  for (const [layer, seen] of roles) {
    const complete = seen.has('combined') ? seen.size === 1 : seen.has('key') && seen.has('value');
    if (!complete) {
      const names = tensors
        .filter((t) => t.layer === layer)
        .map((t) => `"${t.past}"`)
        .join(', ');
      const missing = seen.has('combined')
        ? 'has both a combined and a split KV input'
        : `has no ${seen.has('key') ? 'value' : 'key'} KV input`;
      throw packageError(
        `${graph.file}: layer ${layer} ${missing} (found ${names}). Every layer needs a key and a value past input (or one combined past input) with matching present outputs.`,
        pairs.find((p) => p.layer === layer)?.where ?? { file: graph.file },
        { layer },
      );
    }
  }
  tensors.sort((a, b) => a.layer - b.layer || a.role.localeCompare(b.role));
  sayNotes(ctx, graph, notes, pairs.length);
  return { tensors, bpt: tensors.reduce((sum, t) => sum + t.bytesPerToken, 0), numLayers: roles.size };
}

/** Names of the static-cache ports, each with the metadata field that named it. */
export interface StaticCacheRef {
  writeIndicesInput: string;
  kvSequenceLengthInput: string;
  keyCacheInputs: string[];
  valueCacheInputs: string[];
  keyCacheOutputs: string[];
  valueCacheOutputs: string[];
  /** Field path prefix in the metadata, e.g. `model.io.static_cache`. */
  field: string;
  file: string;
}

/** Static cache derived from the graph: the spec, bytes per token, layers and the pre-allocated length. */
export interface StaticKv {
  cache: StaticCacheSpec;
  bpt: number;
  numLayers: number;
  /** The fixed sequence capacity of the cache buffers. */
  capacity: number;
}

/**
 * Checks a declared static (pre-allocated, written-in-place) cache against the
 * graph. Cache buffers are [batch, maxSeq, width] or [batch, heads, maxSeq, dim];
 * the sequence axis must be fixed because the buffer never grows.
 */
export function buildStaticKv(graph: LoadedGraph, ref: StaticCacheRef): StaticKv {
  const at = (name: string): PackageWhere => ({ file: ref.file, field: `${ref.field}.${name}` });
  const lists = {
    key_cache_inputs: ref.keyCacheInputs,
    value_cache_inputs: ref.valueCacheInputs,
    key_cache_outputs: ref.keyCacheOutputs,
    value_cache_outputs: ref.valueCacheOutputs,
  };
  const layers = ref.keyCacheInputs.length;
  for (const [name, list] of Object.entries(lists)) {
    if (list.length === 0 || list.length !== layers) {
      throw packageError(
        `${describeWhere(at(name))} lists ${list.length} ports but \`${ref.field}.key_cache_inputs\` lists ${layers}; the four cache lists pair per layer and must have the same, non-zero length.`,
        at(name),
      );
    }
  }
  // One buffer named twice would be fed (or read back) for two caches: refuse it with the entry that repeats it.
  for (const pair of [
    ['key_cache_inputs', 'value_cache_inputs'],
    ['key_cache_outputs', 'value_cache_outputs'],
  ] as const) {
    const seen = new Map<string, string>();
    for (const name of pair) {
      lists[name].forEach((port, i) => {
        const field = `${ref.field}.${name}[${i}]`;
        const first = seen.get(port);
        if (first !== undefined) {
          throw packageError(
            `${describeWhere({ file: ref.file, field })} repeats "${port}" (already \`${first}\`): each layer's key and value cache is a buffer of its own. Name each cache port once.`,
            { file: ref.file, field },
            { port },
          );
        }
        seen.set(port, field);
      });
    }
  }
  const controlDtype = (name: 'write_indices_input' | 'kv_sequence_length_input', port: string) => {
    const found = findInput(graph, port);
    if (found === undefined) throw missingPort(graph, 'input', port, at(name), 'static-cache control input');
    const dtype = portDtype(found.elemType);
    if (dtype !== 'int32' && dtype !== 'int64') {
      throw packageError(
        `${graph.file}: static-cache input "${port}" (named by \`${ref.field}.${name}\`) is ${onnxTypeName(found.elemType)}; it must be int32 or int64. Check the name.`,
        at(name),
      );
    }
    return dtype;
  };
  const writeIndicesDtype = controlDtype('write_indices_input', ref.writeIndicesInput);
  const kvSequenceLengthDtype = controlDtype('kv_sequence_length_input', ref.kvSequenceLengthInput);
  let shape: Array<number | string> | undefined;
  let dtype: KvDtype | undefined;
  let bpt = 0;
  let capacity = 0;
  let seqAxis = 1;
  for (const [name, list] of Object.entries(lists)) {
    const isInput = name.endsWith('_inputs');
    list.forEach((portName, i) => {
      const port = isInput ? findInput(graph, portName) : findOutput(graph, portName);
      if (port === undefined)
        throw missingPort(
          graph,
          isInput ? 'input' : 'output',
          portName,
          { file: ref.file, field: `${ref.field}.${name}[${i}]` },
          'static-cache port',
        );
      const portType = requireKvDtype(graph, port, isInput ? 'input' : 'output');
      if (dtype !== undefined && portType !== dtype) {
        throw packageError(
          `${graph.file}: static-cache port "${portName}" is ${portType} but the others are ${dtype}; all cache buffers must share one dtype.`,
          at(name),
        );
      }
      dtype = portType;
      if (!isInput) return;
      const s = port.shape;
      const fallback: KvFallback = { source: ref.file, fieldsHint: 'Re-export the graph with fixed cache dims.' };
      if (s === undefined || (s.length !== 3 && s.length !== 4)) {
        throw cannotDerive(
          graph,
          port,
          'a static cache buffer must be [batch, max_seq, width] or [batch, heads, max_seq, head_dim]',
          fallback,
        );
      }
      if (shape !== undefined && formatShape(shape) !== formatShape(s)) {
        throw packageError(
          `${graph.file}: static-cache input "${portName}" has shape ${formatShape(s)} but the first cache input has ${formatShape(shape)}; all must be equal.`,
          at(name),
        );
      }
      shape = s;
      seqAxis = s.length === 3 ? 1 : 2;
      const fixedDims = s.filter((_, axis) => axis !== 0 && axis !== seqAxis);
      const seq = s[seqAxis];
      if (typeof seq !== 'number' || fixedDims.some((d) => typeof d !== 'number')) {
        throw cannotDerive(graph, port, 'every axis but batch must be fixed in a pre-allocated cache', fallback);
      }
      capacity = seq;
      bpt += (fixedDims as number[]).reduce((a, b) => a * b, 1) * kvDtypeBytes(portType);
    });
  }
  if (shape === undefined || dtype === undefined)
    throw new Error('unreachable: static cache lists were checked non-empty');
  return {
    cache: {
      writeIndicesInput: ref.writeIndicesInput,
      kvSequenceLengthInput: ref.kvSequenceLengthInput,
      writeIndicesDtype,
      kvSequenceLengthDtype,
      keyCacheInputs: ref.keyCacheInputs,
      valueCacheInputs: ref.valueCacheInputs,
      keyCacheOutputs: ref.keyCacheOutputs,
      valueCacheOutputs: ref.valueCacheOutputs,
      shape,
      dtype,
      seqAxis,
    },
    bpt,
    numLayers: layers,
    capacity,
  };
}

/** Expands a `%d` name template into a regex that captures the layer index. */
export function templateRegex(template: string): RegExp {
  const parts = template.split('%d').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`^${parts.join('(\\d+)')}$`);
}

/** Fills `%d` in a name template. */
export function fillTemplate(template: string, layer: number): string {
  return template.split('%d').join(String(layer));
}

/**
 * Finds the KV layers of a graph by matching its input names against name
 * templates (layer indices may be sparse) and pairs each with the present
 * output its template names.
 */
export function matchKvTemplates(
  graph: LoadedGraph,
  templates: Array<{
    role: KvPairRef['role'];
    past: string;
    present: string;
    where?: PackageWhere;
    presentWhere?: PackageWhere;
  }>,
): KvPairRef[] {
  const pairs: KvPairRef[] = [];
  for (const t of templates) {
    const re = templateRegex(t.past);
    for (const input of graph.info.inputs) {
      const m = re.exec(input.name);
      if (m?.[1] === undefined) continue;
      const layer = Number(m[1]);
      const pair: KvPairRef = { layer, role: t.role, past: input.name, present: fillTemplate(t.present, layer) };
      if (t.where !== undefined) pair.where = t.where;
      if (t.presentWhere !== undefined) pair.presentWhere = t.presentWhere;
      pairs.push(pair);
    }
  }
  return pairs;
}
