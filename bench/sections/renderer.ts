/**
 * The highest token rate the chat view shows in Chromium without long
 * animation frames. The real host, WebSocket transport and built renderer
 * (out/renderer) run as in `kvdesk serve`, but the engine is a stand-in that
 * streams tokens at a chosen rate (bench/engine/fake-engine.ts), so the view can
 * be pushed far beyond what a CPU model generates. Per offered rate the page
 * regenerates the last reply a few times; an init script records
 * 'long-animation-frame' and 'longtask' entries, every token frame the page
 * receives, and the streaming message's text length on every animation frame.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { TRAINING_TEXT } from '../../scripts/model-gen/corpus';
import { loadModelSpec } from '../../src/main/packages';
import { loadTokenizer } from '../../src/main/tokenizer';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/e2e/chromium';
import { buildRenderer } from '../../test/e2e/serve';
import type { FakeControl } from '../engine/fake-engine';
import { type BenchOptions, log } from '../lib/context';
import { median } from '../lib/stats';
import { tsxExecArgv } from '../lib/worker-client';

export interface RendererStep {
  offered: number;
  /** Tokens per second the view displayed (median over the replies of this step). */
  shown: number;
  /** Longest long animation frame (the observer reports frames over 50 ms only; 0 when there was none). */
  longestFrameMs: number;
  /** Long animation frames (> 50 ms) while replies streamed. */
  longFrames: number;
  /** Longest gap between two requestAnimationFrame callbacks (includes time the process was not scheduled). */
  maxGapMs: number;
  /** Where the longest long frame's time went (the long-animation-frame entry's parts); '' when there was none. */
  longestFrameParts: string;
  /** Seconds of streaming measured at this rate. */
  seconds: number;
}

export interface RendererResult {
  tokensPerSecond: number;
  sweep: RendererStep[];
  /** Replies that are one code block (not in `tokensPerSecond`: its rates are the prose replies'). */
  code: RendererStep[];
  detail: string;
}
export type RendererOutcome = RendererResult | { skipped: string };

const root = path.resolve(__dirname, '..', '..');
/** Reply length per regeneration; the default model's context is 2048. */
const REPLY_TOKENS = 1800;

/** Runs in the page before its scripts: observers, a WebSocket tap and a per-frame text sampler. */
const INSTRUMENT = `(() => {
  const b = { loaf: [], long: [], recv: [], dom: [], loafSupported: false };
  // The records since the last call, and a fresh start: one read-out after each reply copies only that reply's
  // (copying all of them took a 25–50 ms task of the page's thread by the end of a sweep, and more each reply).
  b.take = () => {
    const out = { loaf: b.loaf, long: b.long, recv: b.recv, dom: b.dom, loafSupported: b.loafSupported };
    b.loaf = [];
    b.long = [];
    b.recv = [];
    b.dom = [];
    return out;
  };
  window.__bench = b;
  try {
    // Each frame with where its time went: scripts (the longest named), rendering, style and layout.
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) {
        let before = 0;
        let inRender = 0;
        let top = null;
        for (const s of e.scripts || []) {
          // Scripts from renderStart on are the frame's own callbacks (requestAnimationFrame, observers).
          if (e.renderStart > 0 && s.startTime >= e.renderStart) inRender += s.duration;
          else before += s.duration;
          if (!top || s.duration > top.duration) top = s;
        }
        const name = top ? [top.invokerType, top.invoker, top.sourceFunctionName].filter(Boolean).join(' ') : '';
        b.loaf.push([e.startTime, e.duration, e.renderStart, e.styleAndLayoutStart, before, inRender,
          top ? top.duration : 0, name, top ? top.forcedStyleAndLayoutDuration : 0]);
      }
    }).observe({ type: 'long-animation-frame', buffered: true });
    b.loafSupported = true;
  } catch {}
  try {
    new PerformanceObserver((l) => { for (const e of l.getEntries()) b.long.push([e.startTime, e.duration]); })
      .observe({ type: 'longtask', buffered: true });
  } catch {}
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (ev) => {
        if (typeof ev.data !== 'string' || !ev.data.includes('"tokens"')) return;
        try {
          const m = JSON.parse(ev.data);
          if (m.t !== 'frame' || m.frame.type !== 'tokens') return;
          let n = 0;
          for (const r of m.frame.rows) n += r.ids.length;
          b.recv.push([performance.now(), n]);
        } catch {}
      });
    }
  };
  const tick = (t) => {
    const els = document.querySelectorAll('[data-testid="message-assistant"] [data-testid="message-text"]');
    const last = els[els.length - 1];
    b.dom.push([t, last ? last.textContent.length : 0]);
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();`;

/**
 * A long animation frame as the page recorded it: start, duration, renderStart, styleAndLayoutStart (0: none), the
 * scripts' time before rendering and in it, the longest script's time, its name, and its forced style and layout.
 */
type LoafEntry = [number, number, number, number, number, number, number, string, number];

interface PageData {
  loaf: LoafEntry[];
  long: Array<[number, number]>;
  recv: Array<[number, number]>;
  dom: Array<[number, number]>;
  loafSupported: boolean;
}

async function startFakeServe(dataDir: string, control: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [...tsxExecArgv(), path.join(__dirname, '..', 'engine', 'fake-serve.ts'), dataDir, control],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the stand-in server did not start within 120 s: ${err.slice(-300)}`));
    }, 120_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const url = /fake-serve (http:\/\/\S+)/.exec(out)?.[1];
      if (url) {
        clearTimeout(timer);
        resolve({ child, url });
      }
    });
    child.stderr?.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the stand-in server exited (code ${code}): ${err.trim().split('\n').slice(-2).join(' / ')}`));
    });
  });
}

/** Token ids of each text for the default model (real text: the view renders words, Markdown paragraphs, code). */
async function textIds(...texts: string[]): Promise<number[][]> {
  const spec = await loadModelSpec(path.join(root, 'resources/models/default'));
  const tok = await loadTokenizer(spec.tokenizer, { vocabSize: spec.vocabSize });
  return texts.map((text) => tok.encode(text, { addSpecialTokens: false }));
}

/**
 * One fenced Python block of ~2 500 tokens (the default model's tokenizer, made for prose, spends ~33 on a line of
 * it): a reply (1 800) is an open code block of ~55 lines until it ends.
 */
const CODE_TEXT = [
  '```python',
  ...Array.from({ length: 15 }, (_, i) => [
    `def step_${i}(items: list[float], weights: list[float], bias: float = 0.5) -> float:`,
    `    """Step ${i}: the weighted sum of the items, plus the bias."""`,
    '    total = sum(w * x for w, x in zip(weights, items))',
    `    return total + bias * ${i}  # {${i}}`,
    '',
  ]).flat(),
].join('\n');

export async function runRenderer(opts: BenchOptions, _modelDir: string): Promise<RendererOutcome> {
  // The renderer as the sources are now (a clean clone has no build; an old one would be measured instead).
  try {
    buildRenderer('error');
  } catch (err) {
    return { skipped: `the renderer did not build (its errors are above): ${String(err).split('\n')[0]}` };
  }
  if (!existsSync(path.join(root, 'resources/models/default')))
    return { skipped: 'resources/models/default is missing (npm run prepare)' };
  if (!existsSync(CHROMIUM)) return { skipped: `${CHROMIUM} is not installed` };
  let chromium: typeof import('playwright-core').chromium;
  try {
    chromium = (createRequire(__filename)('playwright-core') as typeof import('playwright-core')).chromium;
  } catch {
    return { skipped: 'playwright-core is not installed' };
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bench-view-'));
  const control = path.join(dir, 'control.json');
  const setRate = (tokensPerSecond: number, ids: number[]) =>
    writeFileSync(control, JSON.stringify({ tokensPerSecond, ids } satisfies FakeControl));
  let server: ChildProcess | null = null;
  let browser: Awaited<ReturnType<typeof chromium.launch>> | null = null;
  try {
    // Prose for the sweep; one long code block for the replies after it (the tokenizer loaded once for both).
    const [ids, codeIds] = (await textIds(TRAINING_TEXT, CODE_TEXT)) as [number[], number[]];
    setRate(500, ids);
    const started = await startFakeServe(path.join(dir, 'data'), control);
    server = started.child;
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    // The page's CSP forbids eval; Playwright's polling of string predicates needs it (no effect on rendering cost).
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, bypassCSP: true });
    await page.addInitScript(INSTRUMENT);
    await page.goto(started.url);
    const input = page.getByTestId('chat-input');
    await input.waitFor({ state: 'visible', timeout: 60_000 });
    // Page code is given as strings: this project's Node typecheck has no DOM types.
    await page.waitForFunction(`!document.querySelector('[data-testid="chat-input"]')?.disabled`, null, {
      timeout: 60_000,
    });
    // Let the page finish its start-up calls (models, threads, budget) before the first send.
    await page.waitForTimeout(1500);
    // First reply at a low rate creates the thread; then the reply length is raised for the sweep.
    await input.fill('Tell me about the harbour and the bakery.');
    await input.press('Enter');
    await page.locator('[data-testid="message-assistant"][data-state="done"]').last().waitFor({ timeout: 60_000 });
    await page.getByTestId('settings-toggle').click();
    const maxBox = page.getByTestId('setting-maxNewTokens');
    await maxBox.fill(String(REPLY_TOKENS));
    await maxBox.press('Tab');
    await page.getByTestId('settings-toggle').click();
    const supported = (await page.evaluate('window.__bench.loafSupported')) as boolean;
    const rates = opts.quick ? [1000, 2000, 4000, 8000] : [500, 1000, 2000, 4000, 8000, 16000, 32000];
    // Enough replies per rate for a few seconds of streaming (a reply is at most REPLY_TOKENS long).
    const seconds = opts.quick ? 1.5 : 4;
    /** Replies streamed at `rate` from `tokenIds`; with `warmUp`, one more first that is not counted. */
    const stepAt = async (rate: number, tokenIds: number[], warmUp: boolean, what: string): Promise<RendererStep> => {
      setRate(rate, tokenIds);
      const replies = Math.max(2, Math.ceil((rate * seconds) / REPLY_TOKENS));
      const shown: number[] = [];
      let longest = 0;
      let longestParts = '';
      let longFrames = 0;
      let maxGap = 0;
      let streamed = 0;
      for (let k = warmUp ? -1 : 0; k < replies; k++) {
        const r = await opts.guard.sample(`chat view at ${rate} tok/s`, async () => {
          const before = (await page.evaluate(`(() => {
            const els = document.querySelectorAll('[data-testid="message-assistant"]');
            return { id: els[els.length - 1]?.getAttribute('data-message-id') ?? '', at: performance.now() };
          })()`)) as { id: string; at: number };
          // The message tools only show on hover; a dispatched click reaches React's handler all the same.
          await page.getByTestId('regenerate').last().dispatchEvent('click');
          await page.waitForFunction(
            `(() => {
              const els = document.querySelectorAll('[data-testid="message-assistant"]');
              const last = els[els.length - 1];
              return !!last && last.getAttribute('data-message-id') !== ${JSON.stringify(before.id)} && last.getAttribute('data-state') === 'done';
            })()`,
            null,
            { timeout: 120_000, polling: 100 },
          );
          await page.waitForTimeout(300);
          const data = (await page.evaluate('window.__bench.take()')) as PageData;
          return evaluateReply(data, before.at);
        });
        // A warm-up reply (the first Markdown parses of its kind, JIT) is not counted.
        if (r && k >= 0) {
          if (Number.isFinite(r.shownTps)) shown.push(r.shownTps);
          if (r.longestFrameMs > longest && r.longestFrameParts) longestParts = r.longestFrameParts;
          longest = Math.max(longest, r.longestFrameMs);
          longFrames += r.longFrames;
          maxGap = Math.max(maxGap, r.maxGapMs);
          streamed += r.seconds;
        }
      }
      const step: RendererStep = {
        offered: rate,
        shown: median(shown),
        longestFrameMs: longest,
        longestFrameParts: longestParts,
        longFrames,
        maxGapMs: maxGap,
        seconds: streamed,
      };
      log(
        `  chat view (${what}), offered ${rate} tok/s: shown ${Number.isFinite(step.shown) ? step.shown.toFixed(0) : '—'} tok/s over ${streamed.toFixed(1)} s, ${longFrames} frames > 50 ms (longest ${longest.toFixed(0)} ms), longest rAF gap ${maxGap.toFixed(0)} ms${longestParts ? `; longest frame: ${longestParts}` : ''}`,
      );
      return step;
    };
    const sweep: RendererStep[] = [];
    for (const [i, rate] of rates.entries()) sweep.push(await stepAt(rate, ids, i === 0, 'prose'));
    // Replies that are one long code block (a model writing a file): the block, still open, renders at every frame.
    const code: RendererStep[] = [];
    for (const [i, rate] of (opts.quick ? [2000] : [2000, 4000]).entries()) {
      code.push(await stepAt(rate, codeIds, i === 0, 'code'));
    }
    // The highest rate shown with no long frame at it nor at any lower rate offered: a clean faster rate does not
    // make up for a slower one that had a long frame.
    const firstMiss = sweep.findIndex((s) => s.longFrames > 0 || !(s.shown >= 0.9 * s.offered));
    const passing = firstMiss < 0 ? sweep : sweep.slice(0, firstMiss);
    const best = passing.length > 0 ? Math.max(...passing.map((s) => s.shown)) : 0;
    return {
      tokensPerSecond: best,
      sweep,
      code,
      detail: `Chromium ${browser.version()}, replies of ${REPLY_TOKENS} tokens, ≥ ${seconds} s streamed per rate, ${supported ? 'long-animation-frame' : 'longtask'} observer`,
    };
  } catch (err) {
    const why = err instanceof Error ? (err.message.split('\n')[0] ?? err.message) : String(err);
    log(`  chat view measurement failed: ${why}`);
    if (process.env.KVDESK_BENCH_SCREENSHOT) {
      const pages = browser?.contexts().flatMap((c) => c.pages()) ?? [];
      await pages[0]?.screenshot({ path: process.env.KVDESK_BENCH_SCREENSHOT }).catch(() => {});
    }
    return { skipped: `failed: ${why}` };
  } finally {
    await browser?.close().catch(() => {});
    if (server && server.exitCode === null) {
      const gone = new Promise<void>((resolve) => server?.once('exit', () => resolve()));
      server.kill('SIGTERM');
      const hard = setTimeout(() => server?.kill('SIGKILL'), 5000);
      await gone;
      clearTimeout(hard);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Shown rate and long frames of the reply that started after `since` (page clock). The shown rate is the
 * steady pace of the text on screen: tokens between 20% and 80% of the final text length over the time the
 * screen took to go from one to the other, so the fixed start-up latency of a reply (first frame, first
 * commit) does not count against short, fast replies.
 */
function evaluateReply(
  d: PageData,
  since: number,
): {
  shownTps: number;
  longestFrameMs: number;
  longestFrameParts: string;
  longFrames: number;
  maxGapMs: number;
  seconds: number;
} | null {
  const recv = d.recv.filter(([t]) => t >= since);
  if (recv.length === 0) return null;
  const tokens = recv.reduce((n, [, c]) => n + c, 0);
  const firstAt = (recv[0] as [number, number])[0];
  const dom = d.dom.filter(([t]) => t >= firstAt);
  const final = dom.length > 0 ? (dom[dom.length - 1] as [number, number])[1] : 0;
  const at = (share: number) => dom.find(([, len]) => len >= share * final)?.[0] ?? firstAt;
  const t20 = at(0.2);
  const t80 = at(0.8);
  const shownAt = at(1);
  const end = shownAt + 100;
  const inReply = (e: { 0: number; 1: number }) => e[0] + e[1] >= firstAt && e[0] <= end;
  const loaf = d.loafSupported ? d.loaf.filter(inReply) : [];
  const frames = d.loafSupported ? loaf : d.long.filter(inReply);
  let gap = 0;
  for (let i = 1; i < dom.length; i++) {
    const t = (dom[i] as [number, number])[0];
    if (t > end) break;
    gap = Math.max(gap, t - (dom[i - 1] as [number, number])[0]);
  }
  const longest = loaf
    .filter(([, dur]) => dur > 50)
    .reduce<LoafEntry | null>((a, e) => (a && a[1] >= e[1] ? a : e), null);
  return {
    // Under ~4 frames between the two marks the pace cannot be read (a reply at 32 000 tok/s lasts ~60 ms).
    shownTps: t80 - t20 >= 60 ? (0.6 * tokens * 1000) / (t80 - t20) : Number.NaN,
    longestFrameMs: Math.max(0, ...frames.map(([, dur]) => dur)),
    longestFrameParts: longest
      ? `${frameParts(longest)}; it began ${Math.abs(longest[0] - firstAt).toFixed(0)} ms ${longest[0] < firstAt ? 'before' : 'after'} the reply's first tokens came, which it showed whole after ${(shownAt - firstAt).toFixed(0)} ms`
      : '',
    longFrames: frames.filter(([, dur]) => dur > 50).length,
    maxGapMs: gap,
    seconds: Math.max(0, shownAt - firstAt) / 1000,
  };
}

/**
 * A long frame's parts: the tasks before rendering (their scripts, and other work: tasks that are not scripts, or
 * time the page's thread did not get the CPU) and the rendering (its callbacks' scripts, then style, layout and
 * paint); the longest script named, with the style and layout it forced.
 */
function frameParts([
  start,
  dur,
  renderStart,
  layoutStart,
  before,
  inRender,
  topMs,
  topName,
  forced,
]: LoafEntry): string {
  const end = start + dur;
  const tasks = (renderStart > 0 ? renderStart : end) - start;
  const ms = (v: number) => Math.max(0, v).toFixed(0);
  const top =
    topMs > 0
      ? `; longest script ${ms(topMs)} ms: ${topName || 'unnamed'}${forced > 0 ? `, ${ms(forced)} ms of it forced layout` : ''}`
      : '';
  return `tasks ${ms(tasks)} ms (scripts ${ms(before)} ms), rendering ${ms(renderStart > 0 ? end - renderStart : 0)} ms (callbacks ${ms(inRender)} ms, style, layout and paint ${ms(layoutStart > 0 ? end - layoutStart : 0)} ms)${top}`;
}
