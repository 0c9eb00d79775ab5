/**
 * `npm start` and `npm run serve`.
 *
 *   npm start            build with electron-vite when out/ is missing or older than the sources,
 *                        then open the Electron window. Where the Electron binary is missing (or
 *                        Linux has no display) say so in one paragraph and start the headless UI.
 *   npm run serve        build the renderer when missing or stale, then `kvdesk serve`.
 *
 * Arguments after `--` go to Electron (`npm start -- --no-sandbox`) or to `kvdesk serve`
 * (`npm run serve -- --port 8080`); where `npm start` runs the headless UI, `kvdesk serve`'s flags
 * among them go to it (`npm start -- --port 9000`). The Electron binary is found without
 * `require('electron')`, whose first call tries to download it (and fails offline).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { DEFAULT_PORT, probePort, SERVE_OPTIONS } from './serve-options';

/** Repository root (this file is src/cli/start.ts). */
export const ROOT = path.resolve(__dirname, '../..');

/** Executable inside Electron's dist folder, per platform (as node_modules/electron/install.js names it). */
export function electronPlatformPath(platform: NodeJS.Platform | string): string | null {
  switch (platform) {
    case 'darwin':
    case 'mas':
      return 'Electron.app/Contents/MacOS/Electron';
    case 'linux':
    case 'freebsd':
    case 'openbsd':
      return 'electron';
    case 'win32':
      return 'electron.exe';
    default:
      return null;
  }
}

/** Where the Electron binary is, or where it was expected. */
export type ElectronLocation = { found: true; path: string } | { found: false; expected: string; reason: string };

/**
 * Finds the Electron binary the way node_modules/electron/index.js does
 * (path.txt, then dist/, or ELECTRON_OVERRIDE_DIST_PATH), but only looks: it
 * never runs the package's download.
 */
export function locateElectron(options: {
  electronDir: string;
  env: NodeJS.ProcessEnv;
  platform: NodeJS.Platform | string;
  exists?: (p: string) => boolean;
  readText?: (p: string) => string | null;
}): ElectronLocation {
  const exists = options.exists ?? existsSync;
  const readText =
    options.readText ??
    ((p: string) => {
      try {
        return readFileSync(p, 'utf8');
      } catch {
        return null;
      }
    });
  if (!exists(path.join(options.electronDir, 'package.json'))) {
    return {
      found: false,
      expected: options.electronDir,
      reason: `the electron package is not installed (no ${path.join(options.electronDir, 'package.json')})`,
    };
  }
  const recorded = readText(path.join(options.electronDir, 'path.txt'))?.trim() || null;
  const executable = recorded ?? electronPlatformPath(options.platform);
  if (!executable) {
    return {
      found: false,
      expected: options.electronDir,
      reason: `Electron has no build for platform ${options.platform}`,
    };
  }
  const override = options.env.ELECTRON_OVERRIDE_DIST_PATH;
  const binary = override ? path.join(override, executable) : path.join(options.electronDir, 'dist', executable);
  if (exists(binary)) return { found: true, path: binary };
  return {
    found: false,
    expected: binary,
    reason: override
      ? `ELECTRON_OVERRIDE_DIST_PATH is set but ${binary} does not exist`
      : `the electron package is installed without its binary (no ${binary})`,
  };
}

/**
 * The one paragraph printed when the window cannot open. `download`: how the download of the binary that `npm start`
 * tried went (npm install does not fetch it: the electron package downloads it on first use), or why none was tried.
 */
export function missingElectronMessage(
  location: { expected: string; reason: string },
  version: string | null,
  download?: string,
): string {
  const v = version ? ` ${version}` : '';
  return (
    `kvdesk: cannot open the desktop window: ${location.reason}. ` +
    (download === undefined
      ? `Electron's binary is a separate download (about 100 MB) that fails offline or behind a blocking proxy. `
      : `${download} `) +
    `To get it, run \`node node_modules/electron/install.js\` here once this machine can reach the internet ` +
    `(behind a proxy: ELECTRON_GET_USE_PROXY=1 with HTTPS_PROXY set; or ELECTRON_MIRROR naming a mirror), or set ` +
    `ELECTRON_OVERRIDE_DIST_PATH to a folder holding an Electron${v} build, then run \`npm start\` again. ` +
    `Until then kvdesk runs its headless UI: ` +
    `the same app in your browser, at the URL below.\n`
  );
}

/** How long `npm start` lets Electron's download run before it gives up on it (it is about 100 MB). */
const ELECTRON_DOWNLOAD_MS = 10 * 60_000;

/**
 * Downloads Electron's binary with the electron package's own installer (install.js), as the package itself does on
 * its first `require('electron')`, which `npm start` never makes (it only looks, locateElectron): without this, npm
 * install and npm start would never fetch it. Not tried where ELECTRON_SKIP_BINARY_DOWNLOAD is set or the package has
 * no installer. Returns null once the installer succeeded, else a sentence saying what happened (for
 * missingElectronMessage).
 */
export function downloadElectron(
  electronDir: string,
  env: NodeJS.ProcessEnv,
  timeoutMs = ELECTRON_DOWNLOAD_MS,
): string | null {
  const skip = env.ELECTRON_SKIP_BINARY_DOWNLOAD;
  if (skip && skip !== '0' && skip !== 'false') {
    return 'ELECTRON_SKIP_BINARY_DOWNLOAD is set, so kvdesk did not download the binary.';
  }
  const installer = path.join(electronDir, 'install.js');
  if (!existsSync(installer)) return `The electron package has no installer (${installer}) to download it with.`;
  say("kvdesk: downloading Electron's binary, once (about 100 MB: npm install leaves it to the first start)…\n");
  // The installer prints a failed fetch without its cause: bin/fetch-cause.cjs puts the cause in the message.
  const fetchCause = path.join(ROOT, 'bin/fetch-cause.cjs');
  const preload = existsSync(fetchCause) ? ['--require', fetchCause] : [];
  const run = spawnSync(process.execPath, [...preload, installer], {
    cwd: electronDir,
    env,
    stdio: ['ignore', 'inherit', 'pipe'],
    encoding: 'utf8',
    timeout: timeoutMs,
    killSignal: 'SIGKILL',
  });
  if (run.status === 0) return null;
  if (run.error || run.signal) {
    const why = run.signal ? `it was still running after ${Math.round(timeoutMs / 1000)} s` : run.error?.message;
    return `The download of Electron's binary failed: ${why}.`;
  }
  // The installer's error is a stack trace: its first line says what failed ("TypeError: fetch failed: getaddrinfo
  // ENOTFOUND github.com", an HTTP status); an error printed whole names its cause on a `[cause]:` line of its own.
  const lines = (run.stderr ?? '').split('\n').map((line) => line.trim());
  const first = lines.find((line) => line.length > 0) ?? `exit ${run.status}`;
  const cause = lines
    .map((line) => /^\[cause\]:\s*(.+)$/.exec(line)?.[1])
    .find((c) => c !== undefined && !first.includes(c));
  const said = cause === undefined ? first : `${first}; cause: ${cause}`;
  return `The download of Electron's binary failed (${said.slice(0, 300)}): offline, or a proxy or firewall blocks it?`;
}

/** The paragraph printed when Linux has no display to show a window on. */
export function noDisplayMessage(missing?: { reason: string; version: string | null; downloadable: boolean }): string {
  const v = missing?.version ? ` ${missing.version}` : '';
  const binary =
    missing === undefined
      ? ''
      : ` Electron's binary is missing too: ${missing.reason}. kvdesk did not download it, as no window could ` +
        (missing.downloadable
          ? 'open here; a start with a screen downloads it (about 100 MB), or run `node node_modules/electron/install.js`.'
          : `open here; set ELECTRON_OVERRIDE_DIST_PATH to a folder holding an Electron${v} build.`);
  return (
    'kvdesk: cannot open the desktop window: neither DISPLAY nor WAYLAND_DISPLAY is set, so there is no screen ' +
    `to show it on: a server, a container or an SSH session.${binary} Run \`npm start\` in a desktop session for ` +
    'the window. Until then kvdesk runs its headless UI: the same app in your browser, at the URL below.\n'
  );
}

/** True when the Linux session has no display server to connect to. */
export function lacksDisplay(platform: NodeJS.Platform | string, env: NodeJS.ProcessEnv): boolean {
  return platform === 'linux' && !env.DISPLAY && !env.WAYLAND_DISPLAY;
}

/** Newest modification time (ms) of the files under `paths` (folders are walked); 0 when none exist. */
export function newestMtime(paths: string[]): number {
  let newest = 0;
  const visit = (p: string) => {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(p);
    } catch {
      return;
    }
    if (st.isDirectory()) {
      for (const entry of readdirSync(p)) if (entry !== 'node_modules') visit(path.join(p, entry));
    } else {
      newest = Math.max(newest, st.mtimeMs);
    }
  };
  for (const p of paths) visit(p);
  return newest;
}

/**
 * Why a build is needed, or null when every output exists and is newer than
 * every input.
 */
export function staleReason(outputs: string[], inputs: string[]): string | null {
  let oldestOutput = Number.POSITIVE_INFINITY;
  for (const out of outputs) {
    if (!existsSync(out)) return `${path.relative(ROOT, out) || out} is missing`;
    oldestOutput = Math.min(oldestOutput, statSync(out).mtimeMs);
  }
  const newestInput = newestMtime(inputs);
  if (newestInput > oldestOutput) return 'the sources changed since the last build';
  return null;
}

const APP_OUTPUTS = ['out/main/index.js', 'out/main/engine.js', 'out/preload/index.js', 'out/renderer/index.html'];
const APP_INPUTS = ['src/main', 'src/preload', 'src/shared', 'src/renderer', 'electron.vite.config.ts', 'package.json'];
const RENDERER_OUTPUTS = ['out/renderer/index.html'];
const RENDERER_INPUTS = ['src/renderer', 'src/shared'];

function abs(paths: string[]): string[] {
  return paths.map((p) => path.join(ROOT, p));
}

function say(text: string): void {
  process.stdout.write(text);
}

/** Runs a build command; true when it succeeded. */
function build(what: string, args: string[]): boolean {
  say(`kvdesk: building ${what}…\n`);
  const result = spawnSync(process.execPath, args, { cwd: ROOT, stdio: 'inherit' });
  if (result.error) process.stderr.write(`kvdesk: could not run the build: ${result.error.message}\n`);
  return result.status === 0;
}

function electronViteBin(): string {
  return path.join(ROOT, 'node_modules/electron-vite/bin/electron-vite.js');
}

/** Builds main, preload and renderer when out/ is missing or stale; false when no usable build exists. */
export function ensureAppBuild(): boolean {
  const reason = staleReason(abs(APP_OUTPUTS), abs(APP_INPUTS));
  if (reason === null) return true;
  say(`kvdesk: ${reason}.\n`);
  if (build('the app with electron-vite', [electronViteBin(), 'build'])) return true;
  const usable = APP_OUTPUTS.every((p) => existsSync(path.join(ROOT, p)));
  process.stderr.write(
    usable
      ? 'kvdesk: the build failed (see above); starting the previous build in out/.\n'
      : 'kvdesk: the build failed (see above) and out/ has no complete earlier build to start; fix the error and run it again.\n',
  );
  return usable;
}

/** Builds the renderer when missing or stale (for the headless UI); false when there is none. */
export function ensureRendererBuild(): boolean {
  const reason = staleReason(abs(RENDERER_OUTPUTS), abs(RENDERER_INPUTS));
  if (reason === null) return true;
  say(`kvdesk: renderer: ${reason}.\n`);
  // The renderer's own Vite config builds only the UI; without it electron-vite builds everything.
  const rendererConfig = ['vite.config.mts', 'vite.config.ts']
    .map((name) => path.join(ROOT, 'src/renderer', name))
    .find((file) => existsSync(file));
  const ok = rendererConfig
    ? build('the renderer', [path.join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', '--config', rendererConfig])
    : build('the app with electron-vite', [electronViteBin(), 'build']);
  if (ok) return true;
  const usable = RENDERER_OUTPUTS.every((p) => existsSync(path.join(ROOT, p)));
  process.stderr.write(
    usable
      ? 'kvdesk: the renderer build failed (see above); serving the previous build in out/renderer.\n'
      : 'kvdesk: the renderer build failed (see above) and there is no earlier build to serve.\n',
  );
  return usable;
}

/**
 * Bundles the CLI again when its bundle is missing or older than the sources (after a pull or an edit), so that
 * `kvdesk serve` starts from it; when that fails, `kvdesk` runs the sources, so the server still starts.
 */
export function ensureCliBuild(): void {
  // The rule bin/kvdesk.cjs runs the bundle by.
  const { freshCliBundle } = require(path.join(ROOT, 'bin/cli-bundle.cjs')) as {
    freshCliBundle(root: string): string | null;
  };
  if (freshCliBundle(ROOT) !== null) return;
  if (!build('the command line', [path.join(ROOT, 'scripts/build-cli.cjs'), '--quiet'])) {
    process.stderr.write('kvdesk: the CLI bundle failed (see above); running it from its sources.\n');
  }
}

/** The URL a `kvdesk serve` output line announces, or null. */
export function servedUrl(line: string): string | null {
  const m = /kvdesk serving (https?:\/\/\S+)/.exec(line);
  return m?.[1] ?? null;
}

/**
 * Splits the arguments given after `--` into `kvdesk serve`'s flags (each with its value) and the others: the
 * window's (Electron's and Chromium's switches, `--no-sandbox`), which the headless UI has no use for.
 */
export function splitServeArgs(argv: readonly string[]): { serve: string[]; other: string[] } {
  const serve: string[] = [];
  const other: string[] = [];
  const serveFlag = (arg: string | undefined) => {
    const name = arg?.startsWith('--') ? (arg.slice(2).split('=')[0] as string) : '';
    return Object.hasOwn(SERVE_OPTIONS, name) ? SERVE_OPTIONS[name as keyof typeof SERVE_OPTIONS] : undefined;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const flag = serveFlag(arg);
    if (!flag) {
      other.push(arg);
      continue;
    }
    serve.push(arg);
    // `--port 9000`: the value is the next argument, unless that is another of serve's flags (serve says the value
    // is missing).
    const next = argv[i + 1];
    if (flag.type === 'string' && !arg.includes('=') && next !== undefined && !serveFlag(next)) {
      serve.push(next);
      i++;
    }
  }
  return { serve, other };
}

/** The last value of `--name` among `kvdesk serve`'s arguments (`--name V` or `--name=V`), or undefined. */
export function serveFlagValue(args: readonly string[], name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === `--${name}`) value = args[i + 1];
    else if (arg.startsWith(`--${name}=`)) value = arg.slice(name.length + 3);
  }
  return value;
}

/** Whether another program listens on `host:port` now (a listen tried there, and closed at once where it worked). */
export function portTaken(host: string, port: number): Promise<boolean> {
  return probePort(host, port).then(
    () => false,
    (err: NodeJS.ErrnoException) => err.code === 'EADDRINUSE',
  );
}

/**
 * `kvdesk serve`'s arguments for the headless UI that `npm start` runs where the window cannot open, and the lines
 * to say first: the serve flags given after `--` (the window's are left out, and named); without --port, a free
 * port where `defaultPort` (serve's 8080) is taken, by another kvdesk or another program, so the UI starts anyway
 * (`kvdesk serve` itself refuses a port taken: there it is the person's to choose).
 */
export async function headlessArgs(
  argv: readonly string[],
  defaultPort = DEFAULT_PORT,
): Promise<{ args: string[]; notes: string }> {
  const { serve, other } = splitServeArgs(argv);
  let notes = '';
  if (other.length > 0) {
    notes += `kvdesk: the browser UI leaves out ${other.join(' ')}: the window's, not \`kvdesk serve\`'s.\n`;
  }
  if (serveFlagValue(serve, 'port') !== undefined) return { args: serve, notes };
  if (!(await portTaken(serveFlagValue(serve, 'host') ?? '127.0.0.1', defaultPort))) return { args: serve, notes };
  notes +=
    `kvdesk: port ${defaultPort} is in use (another kvdesk, or another program), so the browser UI takes a free ` +
    `port: its URL is below. To choose the port: \`npm start -- --port N\` (or \`npm run serve -- --port N\`).\n`;
  return { args: [...serve, '--port', '0'], notes };
}

function forwardSignals(child: ChildProcess): void {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    });
  }
}

function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  return signal === 'SIGINT' || signal === 'SIGTERM' ? 0 : 1;
}

/** Starts `kvdesk serve` with `args`, echoes its output and points at its URL; resolves with its exit code. */
export function runServe(args: string[]): Promise<number> {
  if (!existsSync(path.join(ROOT, 'src/cli/serve.ts'))) {
    process.stderr.write(
      'kvdesk: the headless server (src/cli/serve.ts) is not part of this checkout yet, so there is nothing to start.\n',
    );
    return Promise.resolve(1);
  }
  // The kvdesk wrapper ends the server with this process, also when this one is killed outright (SIGKILL, an OOM
  // kill): KVDESK_END_WITH_PID (bin/run-child.cjs).
  const child = spawn(process.execPath, [path.join(ROOT, 'bin/kvdesk.cjs'), 'serve', ...args], {
    cwd: ROOT,
    stdio: ['inherit', 'pipe', 'inherit'],
    env: { ...process.env, KVDESK_END_WITH_PID: String(process.pid) },
  });
  forwardSignals(child);
  let buffered = '';
  let announced = false;
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (chunk: string) => {
    process.stdout.write(chunk);
    if (announced) return;
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) {
      const url = servedUrl(line);
      if (url) {
        announced = true;
        say(`\nkvdesk: open ${url} in your browser (Ctrl+C stops the server).\n\n`);
        break;
      }
    }
  });
  return new Promise((resolve) => {
    child.on('error', (err) => {
      process.stderr.write(`kvdesk: could not start the headless server: ${err.message}\n`);
      resolve(1);
    });
    child.on('exit', (code, signal) => resolve(exitCodeOf(code, signal)));
  });
}

/** Launches Electron on the built app; resolves with its exit code. */
export function runElectron(binary: string, args: string[]): Promise<number> {
  const env = { ...process.env };
  // Set by some IDE terminals; it would make Electron run as plain Node instead of opening the app.
  delete env.ELECTRON_RUN_AS_NODE;
  if (process.platform === 'linux' && process.getuid?.() === 0 && !args.includes('--no-sandbox')) {
    process.stderr.write(
      "kvdesk: running as root: Chromium refuses to start its sandbox as root. Run as a normal user, or pass `npm start -- --no-sandbox` (this removes the OS sandbox around the window's renderer).\n",
    );
  }
  const child = spawn(binary, [ROOT, ...args], { cwd: ROOT, stdio: 'inherit', env });
  forwardSignals(child);
  return new Promise((resolve) => {
    child.on('error', (err) => {
      process.stderr.write(`kvdesk: could not start Electron (${binary}): ${err.message}\n`);
      resolve(1);
    });
    child.on('exit', (code, signal) => resolve(exitCodeOf(code, signal)));
  });
}

function electronVersion(electronDir: string): string | null {
  try {
    return (
      (JSON.parse(readFileSync(path.join(electronDir, 'package.json'), 'utf8')) as { version?: string }).version ?? null
    );
  } catch {
    return null;
  }
}

/** Builds the renderer when serve is to serve it: not for a UI of its own (--static-dir). */
function ensureServedUi(serveArgs: readonly string[]): boolean {
  return serveFlagValue(serveArgs, 'static-dir') !== undefined || ensureRendererBuild();
}

/**
 * `npm start` (argv: the arguments after `--`: Electron's, and serve's for the headless UI) or, with `serve` first,
 * `npm run serve`.
 */
export async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'serve') {
    if (!ensureServedUi(argv.slice(1))) return 1;
    ensureCliBuild();
    return runServe(argv.slice(1));
  }
  const electronDir = path.join(ROOT, 'node_modules/electron');
  let location = locateElectron({ electronDir, env: process.env, platform: process.platform });
  const display = !lacksDisplay(process.platform, process.env);
  // The package without its binary (not a folder ELECTRON_OVERRIDE_DIST_PATH names): fetched here, on first start.
  let download: string | null | undefined;
  const packaged = path.join(electronDir, 'dist') + path.sep;
  if (
    !location.found &&
    display &&
    !process.env.ELECTRON_OVERRIDE_DIST_PATH &&
    location.expected.startsWith(packaged)
  ) {
    download = downloadElectron(electronDir, process.env);
    if (download === null) location = locateElectron({ electronDir, env: process.env, platform: process.platform });
  }
  if (location.found && display) {
    if (!ensureAppBuild()) return 1;
    return runElectron(location.path, argv);
  }
  const version = electronVersion(electronDir);
  // Without a screen no download was tried (the window could not open with the binary either): both are said.
  say(
    `${
      location.found
        ? noDisplayMessage()
        : display
          ? missingElectronMessage(location, version, download ?? undefined)
          : noDisplayMessage({
              reason: location.reason,
              version,
              downloadable: !process.env.ELECTRON_OVERRIDE_DIST_PATH && location.expected.startsWith(packaged),
            })
    }\n`,
  );
  if (!ensureServedUi(splitServeArgs(argv).serve)) return 1;
  ensureCliBuild();
  const { args, notes } = await headlessArgs(argv);
  say(notes);
  return runServe(args);
}

if (typeof require !== 'undefined' && typeof module !== 'undefined' && require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`kvdesk: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
