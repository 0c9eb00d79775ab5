/**
 * Which execution providers this machine can really use. Being compiled into
 * the onnxruntime-node binding is not enough (CUDA needs provider libraries
 * and a driver, WebGPU needs a GPU adapter), so each candidate is proven by
 * creating a session for a tiny graph with it and running it once. The answer,
 * with the reason for every failure, is cached for the life of the process.
 */
import { bestUsableProvider, providerName } from '../packages/execution-providers';
import { missingProviderLibraries, setupHint } from './cuda-setup';
import {
  PROBE_EXPECTED,
  PROBE_INPUT,
  PROBE_INPUT_NAME,
  PROBE_OUTPUT_NAME,
  PROBE_SHAPE,
  probeModelBytes,
} from './probe-graph';

/** A backend as onnxruntime-node's binding lists it (`listSupportedBackends()`). */
export interface SupportedBackend {
  name: string;
  /** True when its libraries ship in the npm package; false when they must be installed (CUDA, TensorRT). */
  bundled: boolean;
}

/** What detection found out about one backend. */
export interface BackendReport {
  /** onnxruntime-node backend name: `cpu`, `webgpu`, `cuda`, `tensorrt`, `dml`, `coreml`, … */
  name: string;
  /** The execution provider's ORT name (`CUDAExecutionProvider`), as packages name it. */
  provider: string;
  /** Whether the binding was built with it. */
  inBinding: boolean;
  /** Whether its libraries ship in the npm package. */
  bundled: boolean;
  /** A session was created with it and computed the right answer. */
  usable: boolean;
  /** Why it is not usable: onnxruntime's error, or what is missing. */
  reason?: string;
  /** What the person can do about it. */
  hint?: string;
  /** How long the probe took (session creation and one run). */
  probeMs?: number;
}

/** Options of detectBackends; everything is injectable so tests need no GPU. */
export interface DetectOptions {
  /** Creates and runs the probe session with `backend`; throws why it cannot. Default: onnxruntime-node. */
  probe?: (backend: string) => Promise<void>;
  /** The binding's backends. Default: onnxruntime-node's listSupportedBackends(). */
  supported?: () => SupportedBackend[] | Promise<SupportedBackend[]>;
  /** Default: process.platform (decides the OS-specific candidates DirectML and CoreML). */
  platform?: NodeJS.Platform;
  /** Backends not to probe (already known from an earlier run); they are left out of the result. */
  skip?: readonly string[];
  /** Told before each probe starts: a crash in native code then points at the backend being probed. */
  onProbe?: (backend: string) => void;
  /** Probe again even if an answer is cached. */
  refresh?: boolean;
  /** Clock for probeMs. */
  now?: () => number;
}

/** Backends worth probing on each OS even when the binding does not list them, so the report says why they are absent. */
const OS_BACKENDS: Partial<Record<NodeJS.Platform, string[]>> = {
  win32: ['dml'],
  darwin: ['coreml'],
};

/** Every machine is asked about these, so the report always answers "why not CUDA?". */
const ALWAYS_REPORTED = ['cpu', 'webgpu', 'cuda'];

/** Longest reason kept from an onnxruntime error (its messages can carry whole stack traces). */
const REASON_MAX = 400;

/** ANSI colour codes onnxruntime puts in its log lines (built from the code point: a literal ESC trips linters). */
const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g');

/** Text without terminal colour codes. */
export function stripAnsi(text: string): string {
  return text.replace(ANSI, '');
}

/**
 * onnxruntime's error text without what only its developers need: the
 * `[ONNXRuntimeError] : 1 : FAIL :` prefix and the `file.cc:123 function
 * condition was false.` source location that precedes the actual message.
 */
export function cleanOrtMessage(message: string): string {
  let text = stripAnsi(message).trim();
  text = text.replace(/^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*/, '');
  const located = /^\S+\.(?:cc|cpp|h):\d+ [\s\S]*? was false\.\s*([\s\S]+)$/.exec(text);
  if (located?.[1] !== undefined) text = located[1].trim();
  return text;
}

function firstLines(message: string): string {
  const text = cleanOrtMessage(message);
  return text.length > REASON_MAX ? `${text.slice(0, REASON_MAX - 1)}…` : text;
}

/**
 * The default probe: checks the provider libraries a backend needs, then
 * creates a session for the probe graph with only that provider and checks
 * its answer. CPU fallback for unsupported nodes is left on: Add is supported
 * everywhere, and forbidding fallback makes some providers (CoreML) refuse
 * graphs this small, which would be a false "not usable".
 */
export async function probeWithOnnxruntime(backend: string): Promise<void> {
  const missing = missingProviderLibraries(backend);
  if (missing.length > 0) {
    throw new Error(
      `${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed next to onnxruntime-node's binding`,
    );
  }
  const ort = await import('onnxruntime-node');
  // onnxruntime's own log at errors, as in the engine process (engine/ort-log.ts): its warnings say nothing a person
  // can act on, and what the probe process printed is the reason given when a provider crashes it.
  ort.env.logLevel = 'error';
  const session = await ort.InferenceSession.create(probeModelBytes(), {
    executionProviders: [backend],
    // Failures come back as the thrown error; onnxruntime's own log would only repeat them.
    logSeverityLevel: 3,
  });
  try {
    const out = await session.run({ [PROBE_INPUT_NAME]: new ort.Tensor('float32', PROBE_INPUT, [...PROBE_SHAPE]) });
    const y = out[PROBE_OUTPUT_NAME]?.data;
    const got = y instanceof Float32Array ? [...y] : undefined;
    if (got === undefined || got.some((v, i) => v !== PROBE_EXPECTED[i])) {
      throw new Error(
        `the probe graph computed ${JSON.stringify(got)} instead of ${JSON.stringify([...PROBE_EXPECTED])}`,
      );
    }
  } finally {
    await session.release();
  }
}

async function bindingBackends(): Promise<SupportedBackend[]> {
  const ort = await import('onnxruntime-node');
  return ort.listSupportedBackends();
}

/** Probes every candidate, one after another (parallel GPU initialisation only adds contention and noise). */
async function runDetection(options: DetectOptions): Promise<BackendReport[]> {
  const probe = options.probe ?? probeWithOnnxruntime;
  const now = options.now ?? (() => performance.now());
  const platform = options.platform ?? process.platform;
  const binding = await (options.supported ?? bindingBackends)();
  const names = [...new Set([...ALWAYS_REPORTED, ...binding.map((b) => b.name), ...(OS_BACKENDS[platform] ?? [])])];
  const skip = new Set(options.skip ?? []);
  const reports: BackendReport[] = [];
  for (const name of names) {
    if (skip.has(name)) continue;
    const listed = binding.find((b) => b.name === name);
    const report: BackendReport = {
      name,
      provider: providerName(name),
      inBinding: listed !== undefined,
      bundled: listed?.bundled ?? false,
      usable: false,
    };
    const hint = setupHint(name, platform);
    if (listed === undefined) {
      report.reason = `this onnxruntime-node build (${platform}/${process.arch}) has no ${name} provider`;
      if (hint !== undefined) report.hint = hint;
      reports.push(report);
      continue;
    }
    options.onProbe?.(name);
    const started = now();
    try {
      await probe(name);
      report.usable = true;
    } catch (err) {
      report.reason = firstLines(err instanceof Error ? err.message : String(err));
      if (hint !== undefined) report.hint = hint;
    }
    report.probeMs = Math.round(now() - started);
    reports.push(report);
  }
  return reports;
}

let cached: Promise<BackendReport[]> | undefined;

/**
 * Detects the usable backends. With the default probe the answer is cached
 * (a GPU's start-up can take seconds, and the answer does not change while
 * the app runs); an injected probe or `refresh` always runs.
 */
export function detectBackends(options: DetectOptions = {}): Promise<BackendReport[]> {
  const injected = options.probe !== undefined || options.supported !== undefined || options.skip !== undefined;
  if (injected) return runDetection(options);
  if (cached === undefined || options.refresh === true) {
    const run = runDetection(options);
    cached = run;
    // A failure of detection itself (not of a provider) must not be cached forever.
    run.catch(() => {
      if (cached === run) cached = undefined;
    });
  }
  return cached;
}

/** ORT names of the usable backends, best first: what loadModelSpec takes as `availableBackends`. */
export function usableProviders(report: readonly BackendReport[]): string[] {
  const usable = report.filter((r) => r.usable).map((r) => r.provider);
  const ordered: string[] = [];
  let rest = [...usable];
  while (rest.length > 0) {
    const best = bestUsableProvider(rest, rest) as string;
    ordered.push(best);
    rest = rest.filter((p) => p !== best);
  }
  return ordered;
}

/**
 * The best backend among `offered` (provider names in any spelling, e.g. a
 * package's variants) that the report says is usable, as the ORT name; undefined
 * when none is.
 */
export function bestBackend(offered: readonly string[], report: readonly BackendReport[]): string | undefined {
  return bestUsableProvider(offered, usableProviders(report));
}

/** One line per backend for logs and the CLI: `cuda: not usable — reason (hint)`. */
export function describeReport(report: readonly BackendReport[]): string[] {
  return report.map((r) =>
    r.usable
      ? `${r.name} (${r.provider}): usable${r.probeMs !== undefined ? `, probe ${r.probeMs} ms` : ''}`
      : `${r.name} (${r.provider}): not usable — ${r.reason ?? 'unknown reason'}${r.hint !== undefined ? `. ${r.hint}` : ''}`,
  );
}
