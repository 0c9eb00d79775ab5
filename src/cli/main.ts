/**
 * The kvdesk command line: inspect | generate | chat | list | pull | search | serve. A thin adapter over
 * RunnerService and the package loader; no business logic lives here.
 * Exit codes: 0 done, 2 bad input, 3 refused by the scheduler, 4 the hub unreachable, a download failed or one
 * under way already, 141 stdout's reader went away, 130/143 interrupted (ended by SIGINT/SIGTERM), 1 internal error.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { parseArgs } from 'node:util';
import type { HostSettings, RunnerService } from '../main/host/runner-service';
import { kvBytesForTokens } from '../main/packages/kv-bytes';
import type { GenerationResult } from '../shared/contract';
import { type ErrorInfo, KvdeskError, toErrorInfo } from '../shared/errors';
import { formatBytes } from '../shared/format';
import { BROKEN_TEMPLATE_WARNING, type KvTensorSpec, type ModelSpec } from '../shared/model-spec';
import { reasoningWhere } from '../shared/reasoning';
import { CHAT_OPTIONS } from './chat-options';
import {
  badArgs,
  budgetCapLine,
  contextClipLine,
  effortFlag,
  fail,
  givenPath,
  HOST_OPTIONS,
  type Io,
  LOAD_OPTIONS,
  lookupFlag,
  lookupLine,
  nearestFlags,
  parseFlags,
  parseIds,
  parseNumber,
  predictionUnusedLine,
  prefillChunkFlag,
  printBudgetNotes,
  printWarnings,
  ReplyPrinter,
  SAMPLING_OPTIONS,
  SIGNAL_EXITS,
  STDOUT_CLOSED_EXIT,
  samplingFlags,
  threadsFlag,
  wantsHelp,
} from './common';
import { dataDirOf } from './data-dir';
import { PULL_OPTIONS, SEARCH_OPTIONS } from './pull-options';
import { serveHelp } from './serve-options';
import { alignedRows } from './table';
import { decodeText } from './text-input';

const USAGE = `kvdesk — run local ONNX language models with an explicit KV-cache budget

Usage:
  kvdesk inspect <package or library id> [--json] [--backend cuda|cpu|…] [--variant NAME] [--trust-installed] [--chat-template FILE | --package-template] [--device-memory webgpu:0=8GiB]… [--data-dir DIR]
  kvdesk generate <package or library id> (--prompt TEXT | --prompt-ids 1,2,3 | < FILE) [options]
  kvdesk chat <package or library id> [options]   a conversation in the terminal (see below)
  kvdesk list [--json] [--data-dir DIR]   the model library: packages serve loaded, uploaded or pulled
  kvdesk pull owner/name[@rev] [--variant V] [--list] [--json] [--data-dir DIR]   an ONNX model from the Hugging
                           Face Hub into the library (HF_TOKEN for gated models, HF_ENDPOINT for a mirror);
                           hf.co/owner/name:V (as ollama pull) is --variant V; a revision before or after
                           it: owner/name@rev:V, owner/name:V@rev
  kvdesk search WORDS [--limit N] [--json]   repositories on the hub with ONNX language models whose name
                           matches, most downloaded first
  kvdesk serve [--port N] [--host 127.0.0.1] [--token T] [--model PATH]... (see kvdesk serve --help)
  kvdesk COMMAND --help    a command's options alone;  kvdesk --version   kvdesk's and onnxruntime's versions

generate options:
  --prompt TEXT            prompt text (repeat for a multi-row batch); - reads it from stdin, as does no --prompt
                           with stdin from a pipe or a file
  --prompt-ids IDS         comma-separated token ids (repeat for a multi-row batch)
  --chat                   render the prompt with the package's chat template
  --system TEXT            system prompt (with --chat)
  --think | --nothink      with --chat, a thinking model (Qwen3…): reason first, or reply at once; its
                           reasoning goes to stderr (the "reasoning" field with --json)
  --thinking-budget N      with --chat, a thinking model reasons for at most N tokens, then answers
  --effort LEVEL           with --chat, a thinking model's reasoning effort: minimal, low, medium, high (its
                           template's reasoning_effort; minimal and low bound the reasoning at 256 and 1024 tokens)
  --max-new-tokens N       tokens to generate (default: package default, else 256; a thinking model's --chat reply
                           that reasons: 2048, at most a quarter of the context)
  --greedy                 always take the most likely token
  --temperature T --top-k K --top-p P --min-p M --repetition-penalty R
  --repetition-window N    the repetition penalty looks at the last N tokens only (default 0: all of them)
  --frequency-penalty F --presence-penalty P   OpenAI's penalties over the generated tokens (-2 to 2)
  --logprobs N             with --json: each token's log-probability and the N most likely alternatives (0-20)
  --response-format json   JSON mode: the reply is one JSON object
  --json-schema FILE       structured output: the reply is one JSON object that conforms to this JSON Schema
  --tools FILE             with --chat: functions the model may call (a JSON array, OpenAI's tools form)
  --tool-choice C          auto (default), none, required, or a tool's name (the reply is a call to it)
  --seed S                 the same seed gives the same tokens (-1: a random one, as without --seed)
  --stop STR               stop string (repeatable)
  --rows N                 generate N rows of the same prompt as one batched request (1 to 64)
  --kv-budget [DEV=]SIZE   KV budget, e.g. 512, 64KiB, 2GiB for the CPU (default: derived from RAM), cuda:0=6GiB
                           for a GPU (repeatable)
  --device-memory DEV=SIZE memory of a GPU kvdesk cannot query, e.g. webgpu:0=8GiB
  --threads N              onnxruntime intra-op threads (default: every core)
  --prefill-chunk N        prompt tokens one prefill run computes at most (default 256)
  --lookup N               lookup decoding: a reply that repeats earlier text takes up to N+1 tokens a step
                           (default 4; 0: off)
  --prediction-file FILE   the reply you expect, mostly (a file being edited): lookup decoding drafts from it
  --json                   print one JSON object on stdout
  --quiet, -q              no summary line (tokens, finish, tok/s, KV) on stderr; warnings and errors still go there
  --data-dir DIR           where the library lives (default $KVDESK_DATA_DIR or ~/.kvdesk)
  --variant NAME           the graph variant (fp32, fp16, q4, quantized… of model_<name>.onnx) or an ORT package's
                           variant to load (default: as the library last loaded it, else the plain model.onnx,
                           else the one that runs best on a CPU)
  --backend NAME           cpu, cuda, webgpu, dml, coreml… (default: the best usable one the package offers; one
                           this machine cannot use runs on the CPU with a warning; kvdesk inspect lists them)
  --trust-installed        load an ORT package of the "installed" layout, whose files may lie outside its folder
  --chat-template FILE     a Jinja chat template to use instead of the package's, for this run (default: the one
                           the library keeps for the package, picked on its card in the window, else the package's)
  --package-template       the package's own chat template for this run, even where the library keeps one of yours

chat options (a conversation, as ollama run: a line is a turn, """ starts and ends one of several lines; Ctrl+C
stops a reply, Ctrl+D or /bye ends, /? lists the commands; with stdin from a pipe or a file, each line is a turn,
and Ctrl+C ends the chat):
  --system TEXT            the system prompt (also /set system)
  --verbose                each reply's figures (tokens, speed, prompt and reused tokens, KV) on stderr
  --think | --nothink      a thinking model reasons first, or replies at once (also /set think, /set nothink);
                           its reasoning goes to stderr between "Thinking..." and "...done thinking."
  --thinking-budget N      a thinking model reasons for at most N tokens, then answers
  --effort LEVEL           a thinking model's reasoning effort: minimal, low, medium, high
  --context-overflow P     drop-oldest (default: a conversation longer than the context goes on without its
                           oldest turns) or refuse
  and generate's --max-new-tokens, sampling options, --kv-budget, --device-memory, --threads,
    --prefill-chunk, --lookup, --data-dir, --variant, --backend, --trust-installed, --chat-template,
    --package-template

pull options:
  --list                   the repository's variants and their sizes; downloads nothing
  --variant V              the variant to download (default: the one that runs best on a CPU)
  --revision REV           a branch, tag or commit (as owner/name@REV)

search options:
  --limit N                at most N repositories (1 to 100, default 20)

Exit codes: 0 done, 2 bad input, 3 refused by the KV scheduler, 4 the hub unreachable, a download failed or
one under way already (try again), 141 stdout closed by its reader (| head), 130 and 143 interrupted (Ctrl+C,
SIGTERM: kvdesk ends by the signal, as a shell reports it), 1 internal error.`;

/** Summary of a spec for `inspect` (JSON form keeps bpt at the top level). */
export function inspectJson(spec: ModelSpec): Record<string, unknown> {
  return {
    id: spec.id,
    displayName: spec.displayName,
    layout: spec.layout,
    root: spec.root,
    modelType: spec.modelType ?? null,
    bpt: spec.bpt,
    contextLength: spec.contextLength,
    kvBytesFullContext: kvBytesForTokens(spec, spec.contextLength),
    vocabSize: spec.vocabSize,
    numLayers: spec.numLayers,
    weightsBytes: spec.weightsBytes,
    eosTokenIds: spec.eosTokenIds,
    bosTokenId: spec.bosTokenId ?? null,
    padTokenId: spec.padTokenId ?? null,
    ports: spec.ports,
    kv: spec.kv,
    hasChatTemplate: spec.chatTemplate !== undefined,
    chatTemplateEdited: spec.chatTemplateEdited === true,
    reasoning: spec.reasoning ?? null,
    search: spec.search,
    backends: spec.backends,
    selectedVariant: spec.selectedVariant ?? null,
    executionProvider: spec.executionProvider ?? 'CPUExecutionProvider',
    variants: spec.variants ?? null,
    files: spec.files,
    warnings: spec.warnings,
  };
}

/** inspect's chat template line: whose template, and whether chats can use it (a broken one is only present). */
function templateLine(spec: ModelSpec): string {
  if (spec.chatTemplateEdited) return 'yours (--chat-template)';
  if (spec.chatTemplate === undefined) return 'no (kvdesk uses ChatML)';
  return spec.warnings.some((w) => w.startsWith(BROKEN_TEMPLATE_WARNING))
    ? 'present but unusable: chats are refused (see the warning below; --chat-template FILE gives another)'
    : 'yes';
}

export function inspectText(spec: ModelSpec): string {
  const kv = spec.kv;
  const full = kvBytesForTokens(spec, spec.contextLength);
  const lines = [
    `${spec.displayName}  (${spec.layout}${spec.modelType ? `, ${spec.modelType}` : ''})`,
    `  root           ${spec.root}`,
    `  graph          ${path.relative(spec.root, spec.graphPath)}  weights ${formatBytes(spec.weightsBytes)}`,
    `  context        ${spec.contextLength} tokens   vocab ${spec.vocabSize}   layers ${spec.numLayers}`,
    `  bpt            ${spec.bpt} bytes per token (${formatBytes(spec.bpt)})`,
    `  full context   ${formatBytes(full)} of KV (${full} bytes); 4 at once ${formatBytes(4 * full)}${kv.kind === 'static' ? ' (a static cache: each request holds all of it)' : ''}`,
  ];
  if (kv.kind === 'dynamic') {
    const first = kv.tensors[0];
    // Each figure once when every tensor has it, else each value with how many have it (a graph whose layers differ).
    const figure = (of: (t: KvTensorSpec) => string | number) => {
      const counts = new Map<string | number, number>();
      for (const t of kv.tensors) counts.set(of(t), (counts.get(of(t)) ?? 0) + 1);
      return counts.size === 1
        ? String([...counts.keys()][0])
        : [...counts].map(([value, n]) => `${value} (${n} tensor${n === 1 ? '' : 's'})`).join(' / ');
    };
    lines.push(
      `  kv             ${kv.tensors.length} tensors, ${first?.role === 'combined' ? 'combined K/V' : 'split K/V'}, ${figure((t) => t.kvHeads)} heads × ${figure((t) => t.headDim)} dims, ${figure((t) => t.dtype)}`,
    );
  } else if (kv.kind === 'static') {
    lines.push(
      `  kv             static cache ${kv.cache.keyCacheInputs.length} layers, shape [${kv.cache.shape.join(', ')}]`,
    );
  } else lines.push('  kv             none');
  lines.push(
    `  ports          ids ${spec.ports.inputIds.name} (${spec.ports.inputIds.dtype}), logits ${spec.ports.logits.name}` +
      `${spec.ports.attentionMask ? `, mask ${spec.ports.attentionMask.name}` : ''}${spec.ports.positionIds ? `, positions ${spec.ports.positionIds.name}` : ''}`,
    `  eos            ${spec.eosTokenIds.join(', ') || 'none'}${spec.bosTokenId !== undefined ? `   bos ${spec.bosTokenId}` : ''}`,
    `  chat template  ${templateLine(spec)}${spec.reasoning ? `; a thinking model (${reasoningWhere(spec.reasoning)})` : ''}`,
    `  backends       ${spec.backends.join(', ')}`,
  );
  for (const w of spec.warnings) lines.push(`  warning        ${w}`);
  return `${lines.join('\n')}\n`;
}

/** `kvdesk inspect`'s flags (USAGE describes each). */
export const INSPECT_OPTIONS = {
  json: { type: 'boolean' },
  ...LOAD_OPTIONS,
  'device-memory': { type: 'string', multiple: true },
  'data-dir': { type: 'string' },
} as const;

async function inspect(args: string[], io: Io): Promise<number> {
  const json = args.includes('--json');
  try {
    const { values, positionals } = parseFlags(args, INSPECT_OPTIONS, 'inspect');
    if (positionals.length !== 1) throw badArgs('inspect takes exactly one package (a folder, or a library id)');
    // The model stack, once the flags are read: a wrong one is said without loading it.
    const [
      {
        describeReport,
        detectBackendsInChildProcess,
        deviceBudgetFns,
        deviceKey,
        formatVariantFits,
        readNvidiaGpuMemory,
        usableProviders,
        variantFits,
      },
      { withChatTemplate, withKeptTemplate },
      { defaultHostSettings },
      { backendProvider, loadModelSpec, variantOption },
      { applyDeviceFlags },
      { loadFlags, packageDir },
    ] = await Promise.all([
      import('../main/backends'),
      import('../main/host/chat-template-pick'),
      import('../main/host/runner-service'),
      import('../main/packages'),
      import('./device-flags'),
      import('./package-args'),
    ]);
    if (values.backend !== undefined) backendProvider(values.backend);
    // Probed in a child process: a broken GPU provider library must not take inspect down, nor litter its stderr.
    const report = await detectBackendsInChildProcess().catch(() => undefined);
    // A folder, or a library id as generate and chat take it.
    const dir = await packageDir(positionals[0] as string, values['data-dir']);
    // As generate and chat load it: what the flags name, over the pick the library keeps for the package.
    const pick = await loadFlags(dir, values);
    const readAs = async (variant: string | undefined) =>
      loadModelSpec(dir, {
        ...(report === undefined ? {} : { availableBackends: usableProviders(report) }),
        ...(pick.backend === undefined ? {} : { backend: pick.backend }),
        ...(await variantOption(dir, variant)),
        ...(pick.trustInstalled === true ? { trustInstalled: true } : {}),
      });
    // A kept variant the package no longer has loads kvdesk's choice instead (as the host loads it).
    const read = await readAs(pick.variant).catch((err: unknown) =>
      values.variant === undefined && pick.variant !== undefined ? readAs(undefined) : Promise.reject(err),
    );
    // With the person's own template: checked, and the spec as it would load (a thinking model, or not). A kept one
    // that no longer renders leaves the package's, as a load does; one the flag names must render.
    const spec =
      values['chat-template'] !== undefined && typeof pick.chatTemplate === 'string'
        ? withChatTemplate(read, pick.chatTemplate)
        : withKeptTemplate(read, pick.chatTemplate);
    const needsNvidia = (spec.variants ?? []).some((v) => /^(cuda|tensorrt):/.test(deviceKey(v.ep)));
    const cpu = defaultHostSettings();
    const given: Partial<HostSettings> = {};
    applyDeviceFlags(given, undefined, values['device-memory']);
    const budgets = deviceBudgetFns({
      cpu: { totalMemoryBytes: os.totalmem(), fraction: cpu.memoryFraction, overheadBytes: cpu.overheadBytes },
      ...(needsNvidia ? { nvidia: await readNvidiaGpuMemory() } : {}),
      ...(given.deviceMemoryBytes ? { configured: given.deviceMemoryBytes } : {}),
    });
    const fits = variantFits(spec, report, budgets);
    if (json) io.out(`${JSON.stringify({ ...inspectJson(spec), backendReport: report ?? null, fits })}\n`);
    else {
      const probe =
        report === undefined
          ? ['  (backend detection failed: CPU assumed)']
          : describeReport(report).map((l) => `  ${l}`);
      io.out(
        `${inspectText(spec)}backends here\n${probe.join('\n')}\nvariants (* = chosen)\n${formatVariantFits(fits, formatBytes).join('\n')}\n`,
      );
    }
    return 0;
  } catch (err) {
    return fail(io, json, toErrorInfo(err));
  }
}

/** `kvdesk generate`'s flags (USAGE describes each). */
export const GENERATE_OPTIONS = {
  prompt: { type: 'string', multiple: true },
  'prompt-ids': { type: 'string', multiple: true },
  chat: { type: 'boolean' },
  system: { type: 'string' },
  think: { type: 'boolean' },
  nothink: { type: 'boolean' },
  'thinking-budget': { type: 'string' },
  effort: { type: 'string' },
  'max-new-tokens': { type: 'string' },
  ...SAMPLING_OPTIONS,
  logprobs: { type: 'string' },
  'response-format': { type: 'string' },
  'json-schema': { type: 'string' },
  tools: { type: 'string' },
  'tool-choice': { type: 'string' },
  stop: { type: 'string', multiple: true },
  rows: { type: 'string' },
  'prediction-file': { type: 'string' },
  json: { type: 'boolean' },
  quiet: { type: 'boolean', short: 'q' },
  ...HOST_OPTIONS,
  ...LOAD_OPTIONS,
} as const;

async function generate(
  args: string[],
  io: Io,
  input: NodeJS.ReadableStream & { isTTY?: boolean } = process.stdin,
): Promise<number> {
  const json = args.includes('--json');
  let parsed: ReturnType<
    typeof parseArgs<{ args: string[]; options: typeof GENERATE_OPTIONS; allowPositionals: true }>
  >;
  try {
    parsed = parseFlags(args, GENERATE_OPTIONS, 'generate');
  } catch (err) {
    return fail(io, json, toErrorInfo(err));
  }
  const { values, positionals } = parsed;
  let host: RunnerService | undefined;
  try {
    // The model stack, once the flags are read: a wrong one was said without loading it.
    const [{ RunnerService }, { isTemplateTokenWarning }, { applyDeviceFlags }, { checkFlags, loadFlags, packageDir }] =
      await Promise.all([
        import('../main/host/runner-service'),
        import('../main/packages/spec-assembly'),
        import('./device-flags'),
        import('./package-args'),
      ]);
    if (positionals.length !== 1) {
      // `kvdesk generate M "why…"`, as `ollama run M "why…"` and llama.cpp's prompt: the prompt is a flag here.
      throw badArgs(
        `generate takes exactly one package path or library id, got ${positionals.length === 0 ? 'none' : `${positionals.length} arguments`}` +
          (positionals.length > 1 && values.prompt === undefined
            ? '; give the prompt with --prompt: `kvdesk generate M --prompt "…"` (or on stdin: `echo "…" | kvdesk generate M`)'
            : ''),
      );
    }
    // The package is found first: a name that is not there is said at once, not once stdin has ended.
    const dir = await packageDir(positionals[0] as string, values['data-dir']);
    const prompts = await promptsOf(values.prompt, values['prompt-ids'], input, io.err);
    const devices: Partial<HostSettings> = {};
    applyDeviceFlags(devices, values['kv-budget'], values['device-memory']);
    const threads = threadsFlag(values.threads);
    const prefillChunk = prefillChunkFlag(values['prefill-chunk']);
    const lookup = lookupFlag(values.lookup);
    const sampling = samplingFlags(values);
    const request: Record<string, unknown> = { sampling };
    const idRows = values['prompt-ids']?.map(parseIds);
    // Several --prompt-ids are a batch of those prompts, a row each, as several --prompt are.
    if (idRows !== undefined && idRows.length > 1) request.promptIdRows = idRows;
    else if (idRows !== undefined) request.promptIds = idRows[0];
    else if (prompts.length > 1) request.prompts = prompts;
    else request.prompt = prompts[0];
    if (values.chat) request.chat = true;
    if (values.system !== undefined && !values.chat) throw badArgs('--system goes with --chat');
    if (values.system !== undefined) request.system = values.system;
    if (values.think && values.nothink) throw badArgs('give --think or --nothink, not both');
    if ((values.think || values.nothink) && !values.chat) throw badArgs('--think and --nothink go with --chat');
    if (values.think || values.nothink) request.thinking = values.think === true;
    const budget = parseNumber('thinking-budget', values['thinking-budget'], true);
    if (budget !== undefined && !values.chat) throw badArgs('--thinking-budget goes with --chat');
    if (budget !== undefined && budget < 0) throw badArgs('--thinking-budget expects 0 or more tokens');
    if (budget !== undefined) request.thinkingBudget = budget;
    const effort = effortFlag(values.effort);
    if (effort !== undefined && !values.chat) throw badArgs('--effort goes with --chat');
    if (effort !== undefined) request.reasoningEffort = effort;
    const maxNew = parseNumber('max-new-tokens', values['max-new-tokens'], true);
    // More than the context holds is as many as it leaves (the host says it clipped), as llama.cpp's -n.
    if (maxNew !== undefined) request.maxNewTokens = maxNew;
    const rows = parseNumber('rows', values.rows, true);
    if (rows !== undefined && rows > 1 && (prompts.length > 1 || (idRows?.length ?? 0) > 1)) {
      const flag = prompts.length > 1 ? '--prompt' : '--prompt-ids';
      throw badArgs(
        `--rows copies one prompt ${rows} times: give a single ${flag} with it, or several ${flag} flags alone (a row each)`,
      );
    }
    if (rows !== undefined) request.rows = rows;
    if (values.stop?.some((s) => s === '')) throw badArgs('--stop expects the text to stop at, got an empty one');
    if (values.stop) request.stop = values.stop;
    const logprobs = parseNumber('logprobs', values.logprobs, true);
    if (logprobs !== undefined && !json) throw badArgs('--logprobs adds them to the JSON result: use it with --json');
    if (logprobs !== undefined) request.logprobs = logprobs;
    const format = values['response-format'];
    if (format !== undefined && format !== 'json' && format !== 'text') {
      throw badArgs(`--response-format expects json or text, got "${format}"`);
    }
    if (format !== undefined) request.responseFormat = format;
    const schemaFile = values['json-schema'];
    if (schemaFile !== undefined) request.jsonSchema = readJsonFile('--json-schema', schemaFile);
    if (values.tools !== undefined) request.tools = toolsOf(readJsonFile('--tools', values.tools));
    const predictionFile = values['prediction-file'];
    if (predictionFile !== undefined && lookup === 0) {
      throw badArgs(
        '--prediction-file is drafted from by lookup decoding, which --lookup 0 turns off: drop one of them',
      );
    }
    if (predictionFile !== undefined) request.prediction = readTextFile('--prediction-file', predictionFile);
    const choice = values['tool-choice'];
    if (choice !== undefined && choice !== 'auto' && choice !== 'none') {
      // Said with the flags' names here (the host names the request's fields).
      const what = choice === 'required' ? 'asks for a tool call' : `names the tool "${choice}"`;
      if (!Array.isArray(request.tools)) throw badArgs(`--tool-choice ${what}, but no --tools FILE lists any tools`);
      const names = request.tools.flatMap((t) =>
        typeof t === 'object' && t !== null && typeof (t as { name?: unknown }).name === 'string'
          ? [(t as { name: string }).name]
          : [],
      );
      if (choice !== 'required' && !names.includes(choice)) {
        throw badArgs(
          `--tool-choice names the tool "${choice}", which ${values.tools} does not list (it has: ${names.join(', ')}); or give auto, none or required`,
        );
      }
    }
    if (choice !== undefined) {
      request.toolChoice = choice === 'auto' || choice === 'none' || choice === 'required' ? choice : { name: choice };
    }

    checkFlags(request);
    host = new RunnerService({
      ...devices,
      ...(threads !== undefined ? { intraOpNumThreads: threads } : {}),
      ...(prefillChunk !== undefined ? { prefillChunkTokens: prefillChunk } : {}),
      ...(lookup !== undefined ? { lookupDraftTokens: lookup } : {}),
    });
    const info = await host.loadModel(dir, await loadFlags(dir, values));
    // On stderr with --json too (stdout is the JSON's), and in the JSON: a backend that fell back to the CPU is
    // never silent.
    // A prompt of ids renders no template and encodes no text: what tokenizer.json lacks for them is of no use here.
    const ids = request.promptIds !== undefined || request.promptIdRows !== undefined;
    const warnings = ids ? info.spec.warnings.filter((w) => !isTemplateTokenWarning(w)) : info.spec.warnings;
    printWarnings(io, warnings);
    printBudgetNotes(io, host.snapshot());
    const multiRow = request.prompts !== undefined || request.promptIdRows !== undefined || (rows ?? 1) > 1;
    const printer = new ReplyPrinter(io);
    const handle = host.generate(request, (frame) => {
      if (json) return;
      if (frame.type === 'admitted' && frame.budgetCap) {
        io.err(budgetCapLine(frame.budgetCap, 'raise --kv-budget or shorten the prompt'));
      }
      if (frame.type === 'accepted' && frame.clipped) io.err(contextClipLine(frame.clipped));
      if (frame.type === 'tokens' && !multiRow) printer.push(frame.rows[0]);
    });
    // Nobody reads the reply any more (`| head`): the engine stops, and the host closes below.
    const stop = () => handle.cancel('disconnect');
    io.closed?.addEventListener('abort', stop, { once: true });
    const result = await handle.result.finally(() => io.closed?.removeEventListener('abort', stop));
    printer.end();
    // On stderr with --json too: a prediction that went unused is never silent.
    if (result.predictionUnused) io.err(predictionUnusedLine(result));
    if (json) {
      io.out(
        `${JSON.stringify({
          tokenIds: result.tokenIds,
          text: result.text,
          ...(result.reasoning !== undefined
            ? { reasoning: result.reasoning, reasoningTokens: result.reasoningTokens }
            : {}),
          finishReason: result.finishReason,
          ...(result.rows[0]?.logprobs ? { logprobs: result.rows[0].logprobs } : {}),
          ...(result.rows[0]?.toolCalls ? { toolCalls: result.rows[0].toolCalls } : {}),
          promptTokens: result.promptTokens,
          bpt: result.bpt,
          kvBytes: result.kvBytes,
          reservedBytes: result.reservedBytes,
          ...(result.budgetCap ? { budgetCap: result.budgetCap } : {}),
          ...(result.clipped ? { clipped: result.clipped } : {}),
          ...(result.lookup ? { lookup: result.lookup } : {}),
          ...(result.predictionUnused ? { predictionUnused: result.predictionUnused } : {}),
          ...(result.rows.length > 1 ? { rows: result.rows } : {}),
          ...(warnings.length > 0 ? { warnings } : {}),
          timings: {
            loadMs: round(info.loadMs),
            ttftMs: round(result.timings.ttftMs),
            tokensPerSecond: round(result.timings.tokensPerSecond),
          },
        })}\n`,
      );
    } else {
      if (multiRow) {
        for (const [i, r] of result.rows.entries()) io.out(`[row ${i}] ${r.text}\n`);
      } else io.out('\n');
      for (const [i, r] of result.rows.entries()) {
        for (const c of r.toolCalls ?? []) io.out(`${multiRow ? `[row ${i}] ` : ''}call ${c.name}(${c.arguments})\n`);
      }
      // Nobody read the rows (printed as they all end): nothing more to say, to nobody (exit 141 below).
      if (!values.quiet && !io.closed?.aborted)
        io.err(
          `kvdesk: ${tokensLine(result)}, ttft ${round(result.timings.ttftMs)} ms, ${round(result.timings.tokensPerSecond)} tok/s${result.rows.length > 1 ? ' per row' : ''}${lookupLine(result)}, KV ${formatBytes(result.kvBytes)} (bpt ${result.bpt})\n`,
        );
    }
    return 0;
  } catch (err) {
    return fail(io, json, promptTooLong(rowOfFlag(toErrorInfo(err))));
  } finally {
    await host?.close();
  }
}

/**
 * A prompt the context cannot take, said for one generate call: the host's words end "start a new chat", which
 * means nothing here. (One of several prompts is named by rowOfFlag, saying to shorten it or leave it out.)
 */
function promptTooLong(info: ErrorInfo): ErrorInfo {
  const { promptTokens, contextLength, field, countedUpTo } = info.detail ?? {};
  if (info.code !== 'CONTEXT_OVERFLOW' || field !== undefined) return info;
  if (typeof promptTokens !== 'number' || typeof contextLength !== 'number') return info;
  return {
    ...info,
    message:
      `The prompt has ${countedUpTo !== undefined ? 'at least ' : ''}${promptTokens} tokens, which leaves no room for a reply in the model's context of ` +
      `${contextLength} tokens. Shorten the prompt, or use a model with a longer context.`,
  };
}

/**
 * A refusal of one of several prompts, as the host names it (`promptIdRows[1]: …`, `prompts[0] has …`), named by its
 * flag and its row as the output numbers them (`--prompt-ids, row 1: …`).
 */
function rowOfFlag(info: ErrorInfo): ErrorInfo {
  const field = info.detail?.field;
  const m = typeof field === 'string' ? /^(prompts|promptIdRows)\[(\d+)\]$/.exec(field) : null;
  if (!m) return info;
  const flag = m[1] === 'prompts' ? '--prompt' : '--prompt-ids';
  // `field: what is wrong`, or a sentence with the field as its subject (`field has N tokens, …`).
  const rest = info.message.startsWith(`${field}: `)
    ? info.message.slice(`${field}: `.length)
    : info.message.startsWith(`${field} `)
      ? `the prompt ${info.message.slice(`${field} `.length)}`
      : null;
  if (rest === null) return info;
  return { ...info, message: `${flag}, row ${m[2]}: ${rest}` };
}

/**
 * The summary line's tokens and why the reply ended: of the one row, or of every row (`9 tokens in 3 rows (3
 * each), finish length`), as the rows decode side by side (tok/s is each row's).
 */
function tokensLine(result: GenerationResult): string {
  if (result.rows.length <= 1) return `${result.tokenIds.length} tokens, finish ${result.finishReason}`;
  const counts = result.rows.map((r) => r.tokenIds.length);
  const total = counts.reduce((a, b) => a + b, 0);
  const each = counts.every((c) => c === counts[0]) ? `${counts[0]} each` : counts.join(' + ');
  const finishes = [...new Set(result.rows.map((r) => r.finishReason))].join(', ');
  return `${total} tokens in ${counts.length} rows (${each}), finish ${finishes}`;
}

/** How long generate waits for the first bytes of a prompt on stdin before it says that it is waiting. */
const STDIN_HINT_MS = 2000;

/**
 * generate's prompts: the --prompt flags, one of them `-` for stdin; with neither --prompt nor --prompt-ids, stdin
 * from a pipe or a file is the prompt (as `ollama run NAME < FILE`), its last line break dropped as the shell's
 * `$(cat FILE)` drops it. An empty list: the prompt is --prompt-ids.
 */
async function promptsOf(
  flags: string[] | undefined,
  ids: string[] | undefined,
  input: NodeJS.ReadableStream & { isTTY?: boolean },
  err: (s: string) => void,
): Promise<string[]> {
  const prompts = flags ?? [];
  if (prompts.length > 0 && ids !== undefined) throw badArgs('give --prompt TEXT or --prompt-ids 1,2,3, not both');
  if (ids !== undefined) return [];
  const dashes = prompts.filter((p) => p === '-').length;
  if (dashes > 1) throw badArgs('--prompt - reads stdin once: give it once');
  if (prompts.length > 0 && dashes === 0) return prompts;
  if (prompts.length === 0 && input.isTTY === true) {
    throw badArgs('give --prompt TEXT or --prompt-ids 1,2,3, or the prompt on stdin (--prompt - or < FILE)');
  }
  const chunks: Buffer[] = [];
  // A pipe that stays open and silent (a supervisor's, an editor's task runner) would wait without a word.
  const hint = setTimeout(() => {
    if (chunks.length > 0) return;
    err(
      `kvdesk: waiting for the prompt on stdin${dashes > 0 ? ' (--prompt -)' : ' (no --prompt given)'}; ` +
        'end it with Ctrl+D, or give --prompt TEXT\n',
    );
  }, STDIN_HINT_MS);
  try {
    for await (const chunk of input) chunks.push(Buffer.from(chunk as Buffer | string));
  } finally {
    clearTimeout(hint);
  }
  // UTF-8 (its BOM dropped) or UTF-16 by its BOM; anything else refused, not read as U+FFFD or NUL-laced text.
  const text = decodeText(Buffer.concat(chunks), 'stdin').replace(/\r?\n$/, '');
  if (text === '') {
    throw badArgs(
      `stdin is empty, and it is the prompt${dashes > 0 ? ' (--prompt -)' : ' (no --prompt given)'}: pipe the prompt in, or give --prompt TEXT`,
    );
  }
  return prompts.length === 0 ? [text] : prompts.map((p) => (p === '-' ? text : p));
}

/**
 * A file a flag names, as text (UTF-8, its BOM dropped, or UTF-16 by its BOM: text-input.ts); one that cannot be
 * read, or is not text, is BAD_REQUEST naming the flag and the file.
 */
function readTextFile(flag: string, file: string): string {
  let bytes: Buffer;
  try {
    bytes = readFileSync(givenPath(flag, file));
  } catch (err) {
    if (err instanceof KvdeskError) throw err;
    throw badArgs(`${flag}: cannot read ${file}: ${(err as Error).message}`);
  }
  return decodeText(bytes, `${flag}: ${file}`);
}

/** A JSON file given to a flag (--json-schema, --tools); errors name the flag and the file. */
function readJsonFile(flag: string, file: string): unknown {
  const text = readTextFile(flag, file);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw badArgs(`${flag}: ${file} is not JSON: ${(err as Error).message}`);
  }
}

/** --tools: OpenAI's `[{type: "function", function: {name, description, parameters}}]` (or the functions alone). */
function toolsOf(value: unknown): unknown[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw badArgs('--tools: the file must hold a non-empty JSON array of tools');
  }
  return value.map((t) => (typeof t === 'object' && t !== null && 'function' in t ? t.function : t));
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}

/**
 * Text for a terminal, each character that is not one it shows as itself written as an escape (`\x1c`, `\u202e`):
 * control and format characters (the raw bytes of a file an error quotes, a line break in a folder's name, a
 * right-to-left override or isolate, a zero-width space) and U+FFFD, what bytes that are not UTF-8 read as. They
 * would break the table's lines, or make text look like what it is not. Kept as they are, being part of how the
 * text is written (a path escaped so could not be pasted back): the zero-width joiner and non-joiner (U+200D joins
 * an emoji of several, a woman and a laptop; U+200C keeps Persian letters apart) and the tags after a black flag
 * (U+1F3F4), which make a flag's emoji (Scotland's).
 */
export function printable(text: string): string {
  return text.replace(
    /\u{1f3f4}[\u{e0020}-\u{e007e}]+\u{e007f}|[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Zl}\p{Zp}\ufffd]/gu,
    (c, at: number) => {
      if (c.codePointAt(0) === 0x1f3f4) return c;
      // A joiner between two letters of a script that joins or two parts of an emoji; elsewhere (an id's end, an
      // ASCII name: "model\u200d" would look like "model") it is escaped.
      if ((c === '\u200c' || c === '\u200d') && joins(Array.from(text.slice(Math.max(0, at - 2), at)).pop())) {
        const next = text.codePointAt(at + 1);
        if (next !== undefined && joins(String.fromCodePoint(next))) return c;
      }
      const code = c.codePointAt(0) as number;
      const hex = code.toString(16);
      return code <= 0xff
        ? `\\x${hex.padStart(2, '0')}`
        : code <= 0xffff
          ? `\\u${hex.padStart(4, '0')}`
          : `\\u{${hex}}`;
    },
  );
}

/** What a joiner may stand between: a letter beyond ASCII, a mark (U+FE0F too), an emoji or its modifier. */
function joins(c: string | undefined): boolean {
  return c !== undefined && (c.codePointAt(0) as number) > 0x7f && JOINING.test(c);
}
const JOINING = /[\p{L}\p{M}\p{Extended_Pictographic}\p{Emoji_Modifier}]/u;

/** `kvdesk list`'s flags. */
export const LIST_OPTIONS = { json: { type: 'boolean' }, 'data-dir': { type: 'string' } } as const;

/** `kvdesk list`: the library (packages `serve` has loaded), each validated again. */
async function list(args: string[], io: Io): Promise<number> {
  const json = args.includes('--json');
  try {
    const { values, positionals } = parseFlags(args, LIST_OPTIONS, 'list');
    if (positionals.length > 0) throw badArgs(`list takes no arguments, got "${positionals.join(' ')}"`);
    const dataDir = dataDirOf(values['data-dir']);
    const { ModelLibrary } = await import('../main/host/model-library');
    const log: string[] = [];
    const library = await ModelLibrary.open(dataDir, { log: (l) => log.push(l) });
    await library.refresh();
    for (const line of log) io.err(`${line}\n`);
    const entries = library.list();
    if (json) {
      const rows = entries.map((e) => ({
        id: e.id,
        root: e.root,
        state: e.missing ? 'missing' : e.error ? 'invalid' : 'ok',
        // An upload's copy (a pull's says so by its source), and when it was last loaded: null while never.
        uploaded: e.uploaded && !e.source,
        lastLoadedAt: e.neverLoaded ? null : new Date(e.lastLoadedAt).toISOString(),
        ...(e.neverLoaded ? { neverLoaded: true } : {}),
        ...(e.spec
          ? {
              layout: e.spec.layout,
              bpt: e.spec.bpt,
              contextLength: e.spec.contextLength,
              weightsBytes: e.spec.weightsBytes,
            }
          : {}),
        ...(e.error ? { error: e.error } : {}),
        ...(e.source ? { source: e.source } : {}),
        ...(e.load ? { load: e.load } : {}),
      }));
      io.out(`${JSON.stringify({ dataDir, packages: rows })}\n`);
      return 0;
    }
    // No rows: said on stderr, so that `kvdesk list | cut …` gets nothing.
    if (entries.length === 0 && library.problems.length > 0) {
      io.err(
        `The library at ${dataDir} lists no package: no entry of it could be read (the warning above says why).\n`,
      );
      return 0;
    }
    if (entries.length === 0) {
      io.err(
        `The library at ${dataDir} is empty: packages join it when kvdesk serve loads them, or when they are uploaded or pulled (generate and chat only read it).\n`,
      );
      return 0;
    }
    const table = [['ID', 'STATE', 'WEIGHTS', 'B/TOKEN', 'CONTEXT', 'LAST LOADED', 'FOLDER']];
    // Why a package is invalid, on a line of its own under its row: in the STATE column, one long reason made
    // every row of the table that wide.
    const reasons = new Map<number, string>();
    for (const e of entries) {
      if (e.error && !e.missing) reasons.set(table.length, e.error.message);
      table.push(
        [
          e.id,
          e.missing
            ? 'missing'
            : e.error
              ? 'invalid'
              : e.source
                ? `ok (hf.co/${e.source.repo} ${e.source.variant})`
                : e.uploaded
                  ? 'ok (upload)'
                  : 'ok',
          e.spec ? formatBytes(e.spec.weightsBytes) : '—',
          e.spec ? String(e.spec.bpt) : '—',
          e.spec ? String(e.spec.contextLength) : '—',
          e.neverLoaded ? 'never' : new Date(e.lastLoadedAt).toISOString().slice(0, 16).replace('T', ' '),
          e.root,
        ].map(printable),
      );
    }
    // Lined up by terminal cells: a CJK id is twice as wide as its length.
    const aligned = await alignedRows(table);
    // Under the STATE column.
    const indent = ' '.repeat((aligned.widths[0] as number) + 2);
    const lines = aligned.lines.flatMap((line, i) => {
      const reason = reasons.get(i);
      return reason === undefined ? [line] : [line, `${indent}${printable(reason)}`];
    });
    io.out(`${lines.join('\n')}\n`);
    return 0;
  } catch (err) {
    return fail(io, json, toErrorInfo(err));
  }
}

/**
 * One command's help, cut from USAGE so the two never disagree: its usage lines, its own options section, and the
 * entries of generate's (or any) section for the flags it takes that its own does not describe.
 */
export function commandHelp(command: string, options: Readonly<Record<string, unknown>>): string {
  const blocks = USAGE.split('\n\n');
  const head = blocks.find((s) => s.startsWith('Usage:')) ?? '';
  // The command's line and the lines indented under it.
  const lines = head.split('\n');
  const at = lines.findIndex((l) => l.startsWith(`  kvdesk ${command} `));
  const end = lines.findIndex((l, i) => i > at && !/^ {3}/.test(l));
  const usage = at < 0 ? [] : lines.slice(at, end < 0 ? undefined : end);
  const own = blocks.find((s) => s.startsWith(`${command} options`));
  const described = new Set(own ? entriesOf(own).flatMap((e) => e.flags) : []);
  const sections = [blocks.find((s) => s.startsWith('generate options')) ?? '', ...blocks];
  const borrowed: string[] = [];
  for (const flag of Object.keys(options)) {
    if (described.has(flag)) continue;
    const entry = sections.flatMap(entriesOf).find((e) => e.flags.includes(flag));
    if (!entry) continue;
    for (const f of entry.flags) described.add(f);
    borrowed.push(entry.text);
  }
  const also =
    borrowed.length === 0 ? '' : `\n\n${own ? 'options it shares with generate:' : 'options:'}\n${borrowed.join('\n')}`;
  return `Usage:\n${usage.join('\n')}${own ? `\n\n${own}` : ''}${also}\n`;
}

/**
 * The flag entries of a help section: a line `  --flag ARG   what it does` and the lines indented under it. The
 * flags are those before the description (`--think | --nothink`, or a line of several sampling flags).
 */
function entriesOf(section: string): { flags: string[]; text: string }[] {
  const entries: { flags: string[]; text: string }[] = [];
  let current: { flags: string[]; text: string } | undefined;
  for (const line of section.split('\n')) {
    if (/^ {2}-/.test(line)) {
      const lead = line.trim().split(/ {2,}/)[0] ?? '';
      current = { flags: [...lead.matchAll(/--([a-z][a-z-]*)/g)].map((m) => m[1] as string), text: line };
      entries.push(current);
    } else if (current && /^ {3}/.test(line)) current.text += `\n${line}`;
    else current = undefined;
  }
  return entries;
}

/** kvdesk's version (package.json), and onnxruntime-node's, which runs the models. */
function versions(): string {
  const versionOf = (file: string) => {
    try {
      return (JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version ?? 'unknown';
    } catch {
      return 'unknown';
    }
  };
  let ort = 'not installed';
  try {
    ort = versionOf(require.resolve('onnxruntime-node/package.json'));
  } catch {}
  return `kvdesk ${versionOf(path.resolve(__dirname, '../../package.json'))}\nonnxruntime-node ${ort}\n`;
}

/** The commands, as `kvdesk --help` lists them. */
const COMMANDS = ['inspect', 'generate', 'chat', 'list', 'pull', 'search', 'serve', 'version', 'help'];

/** What to use for another tool's command (Ollama's): `run`, `show`, `rm`. */
const FOREIGN_COMMANDS: Readonly<Record<string, string>> = {
  run: 'did you mean chat? `kvdesk chat M` talks with a model as `ollama run M` does; `kvdesk generate M --prompt "…"` gives one reply',
  show: 'did you mean inspect?',
  ...Object.fromEntries(
    ['rm', 'remove', 'delete'].map((c) => [
      c,
      "the library forgets a package with Forget on its row in kvdesk serve's window, or DELETE /api/delete to a running kvdesk serve (a folder of yours stays where it is; kvdesk's copy of an upload is deleted)",
    ]),
  ),
};

/** Runs the CLI with arguments (without node and script); returns the exit code. */
/**
 * `input` is what generate and chat read as stdin: the process's own (bin/kvdesk.cjs), or a stream a test gives to
 * run them in its own process.
 */
export async function main(argv: string[], io: Io, input?: CommandInput): Promise<number> {
  const code = await run(argv, io, input);
  // A command that finished while its stdout was gone wrote some of its output into nothing.
  return code === 0 && io.closed?.aborted ? STDOUT_CLOSED_EXIT : code;
}

type CommandInput = NodeJS.ReadableStream & { isTTY?: boolean };

async function run(argv: string[], io: Io, input?: CommandInput): Promise<number> {
  const [command, ...rest] = argv;
  const help = (options: Readonly<Record<string, { type: 'string' | 'boolean' }>>) => {
    if (command === undefined || !wantsHelp(rest, options)) return false;
    io.out(commandHelp(command, options));
    return true;
  };
  // A command's flags read before its module loads (pull.ts brings the hub's code and the package loader): a wrong
  // one is refused at once, as the command itself would refuse it.
  const refused = (
    options: NonNullable<Parameters<typeof parseFlags>[1]>,
    json = rest.includes('--json'),
  ): number | undefined => {
    try {
      parseFlags(rest, options, command as string);
      return undefined;
    } catch (err) {
      return fail(io, json, toErrorInfo(err));
    }
  };
  switch (command) {
    case 'inspect':
      return help(INSPECT_OPTIONS) ? 0 : inspect(rest, io);
    case 'generate':
      return help(GENERATE_OPTIONS) ? 0 : generate(rest, io, input);
    case 'chat': {
      if (help(CHAT_OPTIONS)) return 0;
      // chat says its errors in words (it has no --json).
      const wrong = refused(CHAT_OPTIONS, false);
      if (wrong !== undefined) return wrong;
      const [{ chat }, { RunnerService }] = await Promise.all([
        import('./chat'),
        import('../main/host/runner-service'),
      ]);
      return chat(
        rest,
        io,
        ({ devices, threads, lookup, prefillChunk }) => {
          return new RunnerService({
            ...devices,
            ...(threads !== undefined ? { intraOpNumThreads: threads } : {}),
            ...(prefillChunk !== undefined ? { prefillChunkTokens: prefillChunk } : {}),
            ...(lookup !== undefined ? { lookupDraftTokens: lookup } : {}),
          });
        },
        input,
      );
    }
    case 'pull':
      if (help(PULL_OPTIONS)) return 0;
      return refused(PULL_OPTIONS) ?? (await import('./pull')).pull(rest, io);
    case 'search':
      if (help(SEARCH_OPTIONS)) return 0;
      return refused(SEARCH_OPTIONS) ?? (await import('./pull')).search(rest, io);
    case 'list':
      return help(LIST_OPTIONS) ? 0 : list(rest, io);
    case 'serve':
      return serveHelp(rest, io) ? 0 : (await import('./serve')).serve(rest, io);
    case '-v':
    case '--version':
    case 'version':
      io.out(versions());
      return 0;
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      // `kvdesk help generate` as `kvdesk generate --help`.
      if (command === 'help' && rest[0] !== undefined && rest[0] !== 'help') return run([rest[0], '--help'], io);
      // Asked for, on stdout; given for want of a command, an error's (exit 2) on stderr.
      if (command === undefined) io.err(`${USAGE}\n`);
      else io.out(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    default: {
      // Said in one line, with the command meant when one is a typo away (the whole help would scroll it away).
      const near = nearestFlags(command.replace(/^-+/, ''), COMMANDS);
      const hint = Object.hasOwn(FOREIGN_COMMANDS, command)
        ? `: ${FOREIGN_COMMANDS[command]}`
        : near.length > 0
          ? `: did you mean ${near.join(' or ')}?`
          : '';
      io.err(`kvdesk: unknown command "${command}"${hint} (commands: ${COMMANDS.join(', ')}; see kvdesk --help)\n`);
      return 2;
    }
  }
}

/**
 * The process's stdout and stderr. A write to a stdout whose reader went away (`| head`) fails with EPIPE, which
 * node raises as an 'error' event on the stream, a crash with a stack trace unless handled: here, for every
 * command, it aborts `closed` (a streaming command cancels its request) and later output goes nowhere.
 */
function processIo(): Io & { failed: () => boolean } {
  const closed = new AbortController();
  let failed = false;
  // stderr's reader may go too (`2>&1 | head`): what is left to say goes nowhere, rather than crash.
  let errGone = false;
  process.stderr.on('error', () => {
    errGone = true;
  });
  const writeErr = (s: string) => {
    if (errGone) return;
    process.stderr.write(s);
    if (process.stderr.errored) errGone = true;
  };
  /** stdout failed: a reader gone is said by the exit code alone; another failure (`> /dev/full`) in words, once. */
  const stdoutFailed = (err: NodeJS.ErrnoException) => {
    if (closed.signal.aborted) return;
    if (err.code !== 'EPIPE') {
      failed = true;
      writeErr(`kvdesk: could not write the output: ${err.message}\n`);
    }
    closed.abort();
  };
  process.stdout.on('error', stdoutFailed);
  return {
    out: (s) => {
      if (closed.signal.aborted) return;
      process.stdout.write(s);
      // A pipe's write fails at once, but node emits the error a tick later: the command must know now.
      const errored = process.stdout.errored as NodeJS.ErrnoException | null;
      if (errored) stdoutFailed(errored);
    },
    err: writeErr,
    closed: closed.signal,
    failed: () => failed,
  };
}

if (require.main === module) {
  const io = processIo();
  main(process.argv.slice(2), io).then(
    (code) => {
      // Output that could not be written (not a reader gone): a failure.
      process.exitCode = code === STDOUT_CLOSED_EXIT && io.failed() ? 1 : code;
      // Ended by a signal it handled (a chat's Ctrl+C): ended by that signal again, once the output is out.
      const signal = (Object.keys(SIGNAL_EXITS) as NodeJS.Signals[]).find((s) => SIGNAL_EXITS[s] === code);
      if (signal && process.platform !== 'win32') {
        process.stdout.write('', () =>
          process.stderr.write('', () => {
            process.removeAllListeners(signal);
            process.kill(process.pid, signal);
          }),
        );
      }
    },
    (err) => {
      process.stderr.write(
        `kvdesk: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exitCode = 1;
    },
  );
}
