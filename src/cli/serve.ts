/**
 * `kvdesk serve`: the host in plain Node behind the headless server (UI over
 * HTTP, the contract over WebSocket, the OpenAI-compatible API, /metrics).
 * A thin composition: RunnerService from flags, HostApi (which loads the
 * default model), each --model, then startServer. Runs until SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util';
import { type ApiServerControl, createHostApi, type HostApi } from '../main/host/host-api';
import { type HostSettings, RunnerService } from '../main/host/runner-service';
import {
  allowedHostsOf,
  allowedOriginsOf,
  assertBindable,
  DEFAULT_MAX_JSON_BYTES,
  DEFAULT_STATIC_DIR,
  isWildcard,
  lanAddresses,
  type RunningServer,
  serveControl,
  startServer,
  uiBuildOf,
} from '../main/server';
import { dataFolderId } from '../main/store/data-id';
import { parseDuration } from '../shared/duration';
import { KvdeskError, toErrorInfo } from '../shared/errors';
import {
  BUNDLED_MODEL_DIR,
  byteSizeFlag,
  flagError,
  givenPath,
  type Io,
  joinValues,
  lookupFlag,
  printBudgetNotes,
  SIGNAL_EXITS,
  threadsFlag,
} from './common';
import { dataDirOf } from './data-dir';
import { applyDeviceFlags } from './device-flags';
import { DEFAULT_PORT, probePort, SERVE_OPTIONS, serveHelp } from './serve-options';

/** Options for tests and embedders: a promise that stops the server instead of a signal. */
export interface ServeControl {
  until?: Promise<void>;
  /** Host settings applied over the flags' (tests: budgetDeviceOf). */
  settings?: Partial<HostSettings>;
  /**
   * The page's API server control in place of serve's own report (tests: the desktop window's control, so its
   * Models view card runs in a browser); closed with serve.
   */
  apiServer?: (host: () => Promise<HostApi>, dataDir: string) => ApiServerControl & { close(): Promise<void> };
  /** The environment that says how serve was started (npm's variables); process.env unless given (tests). */
  env?: NodeJS.ProcessEnv;
}

/**
 * What to do about a port or host serve cannot listen on, in the words of the command that started it: flags go
 * after `--` through npm (`npm run serve -- --port N`, `npm start -- --port N`), straight after it otherwise.
 */
export function listenAdvice(env: NodeJS.ProcessEnv): string {
  const script = env.npm_lifecycle_event;
  // npm start (npm_command "start") and npm run <script> ("run-script"); npx and npm test pass the flags as given.
  const npm =
    script === 'start' && env.npm_command === 'start'
      ? 'npm start'
      : script && env.npm_command === 'run-script'
        ? `npm run ${script}`
        : undefined;
  return npm === undefined
    ? 'Choose another --port or --host.'
    : `Choose another port or host: \`${npm} -- --port N\` (or \`${npm} -- --host H\`).`;
}

function positiveInt(name: string, value: string | undefined, min = 1): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  // Empty or blank (`--port "$PORT"` with PORT unset) is no number, though Number reads it as 0 (a free port).
  if (value.trim() === '' || !Number.isInteger(n) || n < min) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `--${name} expects a whole number ≥ ${min}, got ${value.trim() === '' ? 'an empty value' : `"${value}"`} (see kvdesk serve --help)`,
    );
  }
  return n;
}

/**
 * The token clients must send: --token, else $KVDESK_TOKEN. One that is empty or only spaces (`--token "$SECRET"`
 * with SECRET unset) is refused: the server took it for no token and asked for none, while it printed a
 * `/?token=` link as if it had one; a person who sets it means to protect the server.
 */
function tokenOf(flag: string | undefined, env: string | undefined): string | undefined {
  const from = flag !== undefined ? '--token' : '$KVDESK_TOKEN';
  const given = flag ?? env;
  if (given === undefined || given.trim() !== '') return given;
  throw new KvdeskError(
    'BAD_REQUEST',
    `${from} is ${given === '' ? 'empty' : 'only whitespace'}, which protects nothing (an empty one made the server ask clients for no token). ` +
      `Give the secret clients must send (e.g. --token "$(openssl rand -hex 16)"), or ${from === '--token' ? 'leave --token out' : 'unset $KVDESK_TOKEN'} to serve on 127.0.0.1 without one (see kvdesk serve --help)`,
    { flag: 'token' },
  );
}

/**
 * A second signal this soon after the first is the same Ctrl+C, not the person's second: the terminal signals the
 * whole process group, so a wrapper's forwarded copy can arrive too (`npm start`'s; the `kvdesk` wrapper's where it
 * cannot tell that the terminal sent it, bin/run-child.cjs).
 */
const SAME_SIGNAL_MS = 1000;

/**
 * Resolves `stopped` at SIGINT or SIGTERM (a second one, later, exits at once, for a shutdown that hangs); `dispose`
 * stops listening.
 */
function signalled(io: Io): { stopped: Promise<void>; signal: () => NodeJS.Signals | undefined; dispose: () => void } {
  let first = 0;
  let got: NodeJS.Signals | undefined;
  let resolve!: () => void;
  const stopped = new Promise<void>((r) => {
    resolve = r;
  });
  const onSignal = (signal: NodeJS.Signals) => {
    if (first === 0) {
      first = Date.now();
      got = signal;
      io.err(`kvdesk: ${signal}: shutting down (send it again to exit at once)\n`);
      resolve();
      return;
    }
    if (Date.now() - first < SAME_SIGNAL_MS) return;
    // Ended at once by the signal, as its parent (a shell, systemd) expects of a command that signal stopped.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    stopped,
    signal: () => got,
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/** Runs `kvdesk serve`; resolves with the exit code once the server has shut down. */
export async function serve(args: string[], io: Io, control: ServeControl = {}): Promise<number> {
  const options = SERVE_OPTIONS;
  if (serveHelp(args, io)) return 0;
  let hostApi: HostApi | undefined;
  let runner: RunnerService | undefined;
  let server: RunningServer | undefined;
  let windowControl: (ApiServerControl & { close(): Promise<void> }) | undefined;
  let signals: ReturnType<typeof signalled> | undefined;
  /** Told to stop (a signal, `control.until`). */
  let stopping = false;
  /** Stopped by a signal: its exit code (the process ends by that signal, main.ts); by `control.until`: 0. */
  const stoppedExit = () => {
    const signal = signals?.signal();
    return signal ? (SIGNAL_EXITS[signal] ?? 0) : 0;
  };
  try {
    let values: ReturnType<
      typeof parseArgs<{ args: string[]; options: typeof options; allowPositionals: false }>
    >['values'];
    try {
      values = parseArgs({ args: joinValues(args, options), options, allowPositionals: false }).values;
    } catch (err) {
      throw flagError(err, 'serve', options);
    }
    const port = positiveInt('port', values.port, 0) ?? DEFAULT_PORT;
    if (port > 65535) throw new KvdeskError('BAD_REQUEST', `--port must be at most 65535, got ${port}`);
    const settings: Partial<HostSettings> = {};
    applyDeviceFlags(settings, values['kv-budget'], values['device-memory']);
    const maxRunning = positiveInt('max-running', values['max-running']);
    if (maxRunning !== undefined) settings.maxRunning = maxRunning;
    const maxQueue = positiveInt('max-queue', values['max-queue']);
    if (maxQueue !== undefined) settings.maxQueue = maxQueue;
    const threads = threadsFlag(values.threads);
    if (threads !== undefined) settings.intraOpNumThreads = threads;
    const prefillChunk = positiveInt('prefill-chunk', values['prefill-chunk']);
    if (prefillChunk !== undefined) settings.prefillChunkTokens = prefillChunk;
    const lookup = lookupFlag(values.lookup);
    if (lookup !== undefined) settings.lookupDraftTokens = lookup;
    const promptCache = positiveInt('prompt-cache', values['prompt-cache'], 0);
    if (promptCache !== undefined) settings.promptCacheSessions = promptCache;
    const dataDir = dataDirOf(values['data-dir']);
    // An empty path is refused, not read as the current folder (served as the UI, or loaded as a package).
    const staticDir = values['static-dir'] === undefined ? undefined : givenPath('--static-dir', values['static-dir']);
    const models = (values.model ?? []).map((dir) => ({ dir, at: givenPath('--model', dir) }));
    const token = tokenOf(values.token, process.env.KVDESK_TOKEN);
    const host = values.host ?? '127.0.0.1';
    // Checked before anything loads, each list naming where it came from.
    const fromEnv = (process.env.KVDESK_ORIGINS ?? '').split(',').filter((o) => o.trim() !== '');
    allowedOriginsOf(fromEnv, '$KVDESK_ORIGINS');
    allowedOriginsOf(values['allow-origin'] ?? [], '--allow-origin');
    const origins = [...(values['allow-origin'] ?? []), ...fromEnv];
    const hostsFromEnv = (process.env.KVDESK_ALLOWED_HOSTS ?? '').split(',').filter((h) => h.trim() !== '');
    const hosts = [
      ...allowedHostsOf(values['allow-host'] ?? [], '--allow-host'),
      ...allowedHostsOf(hostsFromEnv, '$KVDESK_ALLOWED_HOSTS'),
    ];
    const maxUpload = byteSizeFlag('max-upload', values['max-upload']);
    const maxBody = byteSizeFlag('max-body', values['max-body']);
    const maxBodies = byteSizeFlag('max-bodies', values['max-bodies']);
    // A JSON body may be as large as --max-body, but never held if it is more than all bodies may be at once: every
    // one between the two would be refused, with a 413 that names --max-bodies.
    if (maxBodies !== undefined && maxBodies < (maxBody ?? DEFAULT_MAX_JSON_BYTES)) {
      const body = maxBody !== undefined ? (values['max-body'] ?? '').trim() : '32MiB';
      throw new KvdeskError(
        'BAD_REQUEST',
        `--max-bodies ${values['max-bodies']?.trim()} is less than --max-body ${body}${maxBody === undefined ? ' (its default)' : ''}: a JSON body between the two could never be read, each one a 413. Give --max-bodies ${body} or more, or a --max-body no larger than --max-bodies`,
        { flag: 'max-bodies' },
      );
    }
    const maxMessage = byteSizeFlag('max-message', values['max-message']);
    // Both ends read a message into one JavaScript string, which V8 caps just under 512 MiB.
    if (maxMessage !== undefined && maxMessage > 500 * 1024 ** 2) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `--max-message: ${values['max-message']?.trim()} is more than a message can be (the page and the server each read it as one string, which holds about 512MiB at most); give 500MiB or less`,
        { flag: 'max-message' },
      );
    }
    assertBindable(host, token);
    const ttlText = values['first-use-ttl'];
    const firstUseTtlMs = ttlText === undefined ? undefined : ttlText === 'never' ? null : parseDuration(ttlText);
    if (firstUseTtlMs === undefined && ttlText !== undefined) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `--first-use-ttl expects a duration such as 90s, 60m or 2h, or never; got "${ttlText}" (see kvdesk serve --help)`,
      );
    }

    // Heard before anything loads: a model loads for seconds (minutes for a large one), and its engine, blocked in
    // onnxruntime, hears no disconnect meanwhile. A stop then closes the runner at once, which kills the engine
    // under the load; nothing more starts.
    signals = control.until ? undefined : signalled(io);
    const until = control.until ?? (signals as ReturnType<typeof signalled>).stopped;
    void until.then(
      () => {
        stopping = true;
        // Serving: the shutdown below ends the streams first.
        if (!server) void runner?.close();
      },
      () => {},
    );

    // A port taken is said before the models load (seconds each), not after.
    if (port !== 0) await probePort(host, port);
    if (stopping) return stoppedExit();
    runner = new RunnerService({ ...settings, ...control.settings });
    let resolveHost!: (h: HostApi) => void;
    const hostReady = new Promise<HostApi>((r) => {
      resolveHost = r;
    });
    windowControl = control.apiServer?.(() => hostReady, dataDir);
    hostApi = await createHostApi({
      runner,
      dataDir,
      defaultModelDir: BUNDLED_MODEL_DIR,
      log: (line) => io.err(`${line}\n`),
      ...(firstUseTtlMs !== undefined ? { firstUseTtlMs } : {}),
      apiServer: windowControl ?? serveControl(() => server ?? null, token !== undefined),
    });
    resolveHost(hostApi);
    for (const { dir, at } of models) {
      if (stopping) return stoppedExit();
      const loaded = await hostApi.importPath(at, values['trust-installed'] === true ? { trustInstalled: true } : {});
      if (!loaded.ok)
        throw new KvdeskError(loaded.error.code, `--model ${dir}: ${loaded.error.message}`, loaded.error.detail);
      io.err(
        `kvdesk: loaded ${loaded.value.id} (bpt ${loaded.value.spec.bpt}, context ${loaded.value.spec.contextLength})\n`,
      );
    }
    if (stopping) return stoppedExit();
    // A --kv-budget over what the memory holds is taken, and said (as the inspector shows it).
    printBudgetNotes(io, runner.snapshot());
    const dataId = await dataFolderId(dataDir, (line) => io.err(`${line}\n`));
    server = await startServer({
      hostApi,
      ...(dataId !== undefined ? { dataId } : {}),
      host,
      port,
      ...(token !== undefined ? { token } : {}),
      ...(origins.length > 0 ? { allowedOrigins: origins } : {}),
      ...(hosts.length > 0 ? { allowedHosts: hosts } : {}),
      ...(staticDir !== undefined ? { staticDir } : {}),
      ...(maxUpload !== undefined ? { maxUploadBytes: maxUpload } : {}),
      ...(maxBody !== undefined ? { maxJsonBytes: maxBody } : {}),
      ...(maxBodies !== undefined ? { maxBodiesBytes: maxBodies } : {}),
      ...(maxMessage !== undefined ? { maxMessageBytes: maxMessage } : {}),
      raiseLimits: {
        json: 'start kvdesk serve with a larger --max-body (e.g. --max-body 64MiB)',
        upload: 'start kvdesk serve with a larger --max-upload',
        bodies: 'start kvdesk serve with a larger --max-bodies',
      },
      ...(values['log-requests'] === true ? { requestLog: (line: string) => io.err(`${line}\n`) } : {}),
    });
    io.out(`kvdesk serving ${server.url}\n`);
    const ownUi = staticDir !== undefined;
    const ui = staticDir ?? DEFAULT_STATIC_DIR;
    if (uiBuildOf(ui) === undefined) {
      io.err(
        ownUi
          ? `kvdesk: --static-dir ${ui} has no index.html: the browser UI there answers a "not built" page; the API works.\n`
          : `kvdesk: the browser UI is not built (no index.html in ${ui}): run \`npm run build\` in kvdesk's folder, or ` +
              'start it with `npm run serve`, which builds it; the API works meanwhile.\n',
      );
    }
    // Bound to every address: where a phone or another computer reaches it (server.url is this computer's own).
    const listening = server.port;
    const lan = isWildcard(host) ? lanAddresses().map((a) => `http://${a}:${listening}`) : [];
    if (isWildcard(host)) {
      io.out(
        `kvdesk: on the local network ${lan.length > 0 ? `at ${lan.join(', ')}` : 'once this computer has an address (it has none now)'}\n`,
      );
    }
    if (origins.length > 0) {
      const any = origins.some((o) => o.trim() === '*');
      io.err(
        `kvdesk: ${any ? 'any web page' : `pages of ${origins.map((o) => o.trim()).join(', ')}`} may call the model APIs from a browser${token === undefined ? (any ? ' — with no --token, any site you open can use your models' : ' (no --token: they need none)') : ' with the token'}\n`,
      );
    }
    // A name given bare answers as a Host on any port, but the UI's own origins are its names on a port: a page of
    // it on 80 or 443 (a reverse proxy's) loads, and its WebSocket is refused.
    const bare = hosts.filter((h) => /^(\[[^\]]*\]|[^:[\]]+)$/.test(h));
    if (bare.length > 0 && listening !== 80 && listening !== 443) {
      io.err(
        `kvdesk: ${bare.map((h) => `--allow-host ${h}`).join(', ')} names no port: the UI opened through it on port 80 or 443 (a reverse proxy's http:// or https:// address) loads but cannot connect; to use the UI there, give ${bare.map((h) => `--allow-host ${h}:80`).join(', ')} (or :443 for https) instead\n`,
      );
    }
    if (token !== undefined) {
      const query = `/?token=${encodeURIComponent(token)}`;
      const other = lan.length > 0 ? ` (on another device: ${lan.map((u) => `${u}${query}`).join(', ')})` : '';
      io.out(`kvdesk: open ${server.url}${query} in a browser${other}\n`);
    }
    await until;
    return stoppedExit();
  } catch (err) {
    // What a start cut short by the stop failed of (the engine stopped under a load) is no failure of serve.
    if (stopping) return stoppedExit();
    const info = toErrorInfo(err);
    const listen = (err as NodeJS.ErrnoException).code;
    if (listen === 'EADDRINUSE' || listen === 'EACCES' || listen === 'EADDRNOTAVAIL') {
      io.err(`kvdesk: cannot listen: ${(err as Error).message}. ${listenAdvice(control.env ?? process.env)}\n`);
      return 2;
    }
    io.err(`kvdesk: ${info.message}\n`);
    return info.code === 'INTERNAL' || info.code === 'ENGINE_FAILED' ? 1 : 2;
  } finally {
    await windowControl?.close();
    await server?.close();
    if (hostApi) await hostApi.close();
    else await runner?.close();
    signals?.dispose();
  }
}
