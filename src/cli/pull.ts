/**
 * `kvdesk pull owner/name[@revision]` (or `hf.co/owner/name[@revision]:variant`, as `ollama pull`): a model package from the Hugging Face Hub into the library, as `ollama pull`
 * (see src/main/host/hub-download.ts); `kvdesk search WORDS` finds one. `--list` shows the repository's variants
 * and sizes; `--variant` picks one (default: the one that runs best on a CPU). Progress goes to stderr; the
 * package's library id ends the output. A package downloaded already is not downloaded again (its id is printed all
 * the same).
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import {
  type DownloadPlan,
  downloadHubModel,
  listHubVariants,
  planDownload,
  repoSpec,
  splitPullName,
} from '../main/host/hub-download';
import { searchHub } from '../main/host/hub-search';
import { canonicalPath, ModelLibrary, prepareDataDir } from '../main/host/model-library';
import { toErrorInfo } from '../shared/errors';
import { formatBytes } from '../shared/format';
import { badArgs, fail, type Io, libraryLog, parseFlags, parseNumber, SIGNAL_EXITS } from './common';
import { dataDirOf } from './data-dir';
import { PULL_OPTIONS, SEARCH_OPTIONS } from './pull-options';

export { PULL_OPTIONS, SEARCH_OPTIONS };

/** Without a terminal (a log), a progress line at most this often, or each 10 %. */
const NON_TTY_PROGRESS_MS = 5000;

export async function pull(args: string[], io: Io, stderrIsTty = process.stderr.isTTY === true): Promise<number> {
  const json = args.includes('--json');
  try {
    const { values, positionals } = parseFlags(args, PULL_OPTIONS, 'pull');
    if (positionals.length !== 1) throw badArgs('pull takes one repository: owner/name[@revision]');
    if ((positionals[0] as string).trim() === '')
      throw badArgs('the repository is empty (""): give a repository, owner/name[@revision]');
    // A word, not a repository: say how to find one.
    if (!(positionals[0] as string).includes('/')) {
      throw badArgs(
        `"${positionals[0]}" is not a repository (owner/name): find one with kvdesk search ${JSON.stringify(positionals[0])}`,
      );
    }
    const { repo, variant: named } = pullName(positionals[0] as string, values.variant);
    const hub = values.revision !== undefined ? { revision: values.revision } : {};
    const listing = await listHubVariants(repo, hub);
    if (values.list) {
      if (json) io.out(`${JSON.stringify(listing)}\n`);
      else {
        io.out(`${listing.repo}@${listing.revision} (commit ${listing.commit.slice(0, 12)}):\n`);
        for (const v of listing.variants) {
          const mark = v.name === listing.recommended ? ' (default)' : '';
          io.out(`  ${v.name.padEnd(24)} ${formatBytes(v.bytes).padStart(10)}  ${v.layout}${mark}\n`);
        }
      }
      return 0;
    }
    const dataDir = dataDirOf(values['data-dir']);
    // Checked before anything downloads, as `serve` checks it (under /proc a recursive mkdir spins for good).
    await prepareDataDir(dataDir, (line) => io.err(`${line}\n`));
    const modelsDir = path.join(dataDir, 'models');
    const plan = await planDownload(listing, modelsDir, named);
    const { root, variant } = plan;
    // As `ollama pull` of a model it has: nothing to do.
    if (plan.present) io.err(`kvdesk: ${listing.repo} (${variant.name}) is downloaded already, in ${root}\n`);
    else {
      let last = 0;
      let lastPct = -1;
      let drawn = false;
      /** The latest state, not drawn yet (too soon after the last line): drawn before anything else is said. */
      let pending: string | null = null;
      const draw = (line: string) => {
        io.err(stderrIsTty ? `\r${line}\u001b[K` : `${line}\n`);
        drawn = true;
        pending = null;
      };
      /** A line of its own: after the progress line (at a terminal, that line ends first). */
      const say = (line: string) => {
        if (stderrIsTty && drawn) io.err('\n');
        drawn = false;
        io.err(`${line}\n`);
      };
      // Ctrl+C or SIGTERM: the download stops (what arrived stays, for the same command to resume from), and says
      // so; kvdesk then ends by that signal (main.ts).
      const interrupt = new AbortController();
      let stoppedBy: NodeJS.Signals = 'SIGINT';
      const onInterrupt = (signal: NodeJS.Signals) => {
        if (!interrupt.signal.aborted) stoppedBy = signal;
        interrupt.abort();
      };
      for (const signal of INTERRUPTS) process.on(signal, onInterrupt);
      try {
        await downloadHubModel(listing.repo, modelsDir, {
          ...hub,
          plan,
          signal: interrupt.signal,
          // What it removes (stopped downloads of this package at other revisions), a line each.
          log: say,
          // What an earlier try left (a pull interrupted or cut off): where each file goes on from.
          onResume: (files) => {
            const whole = files.filter((f) => f.doneBytes === f.totalBytes);
            if (whole.length > 0) {
              const bytes = whole.reduce((n, f) => n + f.totalBytes, 0);
              const what = whole.length === 1 ? (whole[0] as { file: string }).file : `${whole.length} files`;
              say(`kvdesk: resuming: ${what} (${formatBytes(bytes)}) arrived whole before`);
            }
            for (const f of files) {
              if (f.doneBytes < f.totalBytes)
                say(`kvdesk: resuming ${f.file} at ${formatBytes(f.doneBytes)} of ${formatBytes(f.totalBytes)}`);
            }
          },
          onProgress: (p) => {
            if (json) return;
            const now = Date.now();
            const pct = p.totalBytes > 0 ? Math.floor((p.doneBytes / p.totalBytes) * 100) : 100;
            const line = `pulling ${listing.repo} (${p.variant}): ${formatBytes(p.doneBytes)} / ${formatBytes(p.totalBytes)} ${pct}%`;
            // A terminal redraws its line 4 times a second; a log (CI) gets a line every 5 s or each 10 %, and the
            // last one.
            const due = stderrIsTty
              ? now - last >= 250
              : now - last >= NON_TTY_PROGRESS_MS || Math.floor(pct / 10) > Math.floor(lastPct / 10);
            if (!due && p.doneBytes < p.totalBytes) {
              pending = line;
              return;
            }
            last = now;
            lastPct = pct;
            draw(line);
          },
        });
      } catch (err) {
        if (!interrupt.signal.aborted) throw err;
        if (pending !== null) draw(pending);
        if (stderrIsTty && drawn) io.err('\n');
        drawn = false;
        io.err(`kvdesk: interrupted: run the same command again to resume (what arrived stays in ${plan.staging})\n`);
        // A script reads where it stopped (the download stopped first: what the folder holds is all that arrived).
        if (json) io.out(`${JSON.stringify(await interrupted(plan, stoppedBy))}\n`);
        return SIGNAL_EXITS[stoppedBy] as number;
      } finally {
        for (const signal of INTERRUPTS) process.off(signal, onInterrupt);
        // Where it stopped (a stall, a failure) is drawn before why, not a state from seconds before.
        if (pending !== null) draw(pending);
        // The progress line ends before whatever follows it (the id, or why it failed).
        if (stderrIsTty && drawn) io.err('\n');
      }
    }
    // The library finds the new folder in its models folder (and validates it once more).
    const library = await ModelLibrary.open(dataDir, { log: libraryLog });
    await library.refresh();
    const at = await canonicalPath(root);
    const id = library.list().find((e) => e.root === at)?.id ?? path.basename(root);
    if (json) {
      io.out(`${JSON.stringify({ id, root, variant: variant.name, bytes: variant.bytes, commit: listing.commit })}\n`);
    } else io.out(`${id}\n`);
    if (!json) io.err(`kvdesk: ${listing.repo} (${variant.name}) is in the library as ${id}: kvdesk chat ${id}\n`);
    return 0;
  } catch (err) {
    const info = toErrorInfo(err);
    const code = fail(io, json, info);
    // Another kvdesk downloads it now: try again once it has ended (4), as after a download cut off; not bad input.
    return info.detail?.busy === true ? 4 : code;
  }
}

/** The signals that stop a download (what arrived stays), each ending kvdesk by itself after. */
const INTERRUPTS = ['SIGINT', 'SIGTERM'] as const;

/**
 * What `pull --json` prints when a signal stopped its download: the bytes and files that arrived (in the staging
 * folder, which the same command resumes from) of the variant's.
 */
async function interrupted(plan: DownloadPlan, signal: NodeJS.Signals) {
  let doneBytes = 0;
  let filesDone = 0;
  let filesPartial = 0;
  for (const f of plan.variant.files) {
    const to = path.join(plan.staging, f.to);
    // A file is renamed from its part once it is complete and checked.
    const whole = await stat(to).catch(() => null);
    if (whole?.isFile()) {
      doneBytes += whole.size;
      filesDone++;
      continue;
    }
    const part = await stat(`${to}.part`).catch(() => null);
    if (part?.isFile() && part.size > 0) {
      doneBytes += Math.min(part.size, f.size);
      filesPartial++;
    }
  }
  return {
    status: 'interrupted',
    signal,
    repo: plan.listing.repo,
    variant: plan.variant.name,
    commit: plan.listing.commit,
    doneBytes,
    totalBytes: plan.variant.bytes,
    filesDone,
    filesPartial,
    filesTotal: plan.variant.files.length,
    staging: plan.staging,
    resume: 'run the same command again',
  };
}

/**
 * The repository and variant `kvdesk pull` names: `owner/name[@revision]`, or as `ollama pull` and chat/generate
 * take it, `hf.co/owner/name[:variant]` (the server's /api/pull splits it so too: splitPullName), the revision also
 * after the variant (`owner/name:variant@revision`); `:latest` is the variant kvdesk would take. A variant after `:`
 * and a different --variant are refused: which one was meant is not known.
 */
function pullName(arg: string, flag: string | undefined): { repo: string; variant?: string } {
  const split = splitPullName(arg);
  // No repository before the colon (`https://example.com/x`): parseRepo refuses the name as given.
  if (split === undefined) return { repo: arg, ...(flag !== undefined ? { variant: flag } : {}) };
  const { variant } = split;
  const repo = repoSpec(split);
  if (variant !== undefined && flag !== undefined && variant !== flag) {
    throw badArgs(`"${arg}" names the variant ${variant}, and --variant ${flag}: give one`);
  }
  const chosen = variant ?? flag;
  return { repo, ...(chosen !== undefined ? { variant: chosen } : {}) };
}

/**
 * `kvdesk search WORDS`: repositories on the hub with ONNX language models whose name matches, most downloaded
 * first (as LM Studio's model search); `kvdesk pull REPO --list` then shows what one offers.
 */
export async function search(args: string[], io: Io): Promise<number> {
  const json = args.includes('--json');
  try {
    const { values, positionals } = parseFlags(args, SEARCH_OPTIONS, 'search');
    const query = positionals.join(' ');
    if (!query.trim()) throw badArgs("search takes a word of the model's name, e.g. kvdesk search qwen3");
    const limit = parseNumber('limit', values.limit, true);
    if (limit !== undefined && (limit < 1 || limit > 100)) throw badArgs('--limit is 1 to 100');
    const hits = await searchHub(query, limit !== undefined ? { limit } : {});
    if (json) {
      io.out(`${JSON.stringify(hits)}\n`);
      return 0;
    }
    if (hits.length === 0) {
      io.err(`kvdesk: no ONNX language model on the hub matches "${query}": try a shorter word (qwen, phi, smollm…)\n`);
      return 0;
    }
    const rows = hits.map((h) => [
      h.repo,
      `${h.downloads.toLocaleString('en-US')} downloads`,
      `${h.likes.toLocaleString('en-US')} likes`,
      h.updatedAt?.slice(0, 10) ?? '',
      [h.library ?? '', h.gated ? 'gated (HF_TOKEN)' : ''].filter(Boolean).join(', '),
    ]);
    const widths = rows[0]?.map((_, c) => Math.max(...rows.map((r) => (r[c] as string).length))) ?? [];
    for (const r of rows) {
      io.out(
        `${r
          .map((cell, c) =>
            c === 1 || c === 2 ? cell.padStart(widths[c] as number) : cell.padEnd(widths[c] as number),
          )
          .join('  ')
          .trimEnd()}\n`,
      );
    }
    io.err(`kvdesk: kvdesk pull ${hits[0]?.repo} --list shows what a repository offers\n`);
    return 0;
  } catch (err) {
    return fail(io, json, toErrorInfo(err));
  }
}
