/**
 * `kvdesk pull owner/name[@revision]`: a model package from the Hugging Face Hub into the library, as `ollama pull`
 * (see src/main/host/hub-download.ts). `--list` shows the repository's variants and sizes; `--variant` picks one
 * (default: the one that runs best on a CPU). Progress goes to stderr; the package's library id ends the output.
 * A package downloaded already is not downloaded again (its id is printed all the same).
 */
import path from 'node:path';
import { downloadHubModel, listHubVariants, planDownload } from '../main/host/hub-download';
import { canonicalPath, ModelLibrary } from '../main/host/model-library';
import { toErrorInfo } from '../shared/errors';
import { formatBytes } from '../shared/format';
import { badArgs, fail, type Io, parseFlags } from './common';
import { dataDirOf } from './data-dir';

export async function pull(args: string[], io: Io, stderrIsTty = process.stderr.isTTY === true): Promise<number> {
  const options = {
    variant: { type: 'string' },
    revision: { type: 'string' },
    list: { type: 'boolean' },
    json: { type: 'boolean' },
    'data-dir': { type: 'string' },
  } as const;
  const json = args.includes('--json');
  try {
    const { values, positionals } = parseFlags(args, options);
    if (positionals.length !== 1) throw badArgs('pull takes one repository: owner/name[@revision]');
    const hub = values.revision !== undefined ? { revision: values.revision } : {};
    const listing = await listHubVariants(positionals[0] as string, hub);
    if (values.list) {
      if (json) io.out(`${JSON.stringify(listing)}\n`);
      else {
        io.out(`${listing.repo}@${listing.revision}:\n`);
        for (const v of listing.variants) {
          const mark = v.name === listing.recommended ? ' (default)' : '';
          io.out(`  ${v.name.padEnd(24)} ${formatBytes(v.bytes).padStart(10)}  ${v.layout}${mark}\n`);
        }
      }
      return 0;
    }
    const dataDir = dataDirOf(values['data-dir']);
    const modelsDir = path.join(dataDir, 'models');
    const plan = await planDownload(listing, modelsDir, values.variant);
    const { root, variant } = plan;
    // As `ollama pull` of a model it has: nothing to do.
    if (plan.present) io.err(`kvdesk: ${listing.repo} (${variant.name}) is downloaded already, in ${root}\n`);
    else {
      let last = 0;
      let drawn = false;
      try {
        await downloadHubModel(listing.repo, modelsDir, {
          ...hub,
          plan,
          onProgress: (p) => {
            const now = Date.now();
            if (json || (now - last < 250 && p.doneBytes < p.totalBytes)) return;
            last = now;
            const pct = p.totalBytes > 0 ? Math.floor((p.doneBytes / p.totalBytes) * 100) : 100;
            const line = `pulling ${listing.repo} (${p.variant}): ${formatBytes(p.doneBytes)} / ${formatBytes(p.totalBytes)} ${pct}%`;
            io.err(stderrIsTty ? `\r${line}\u001b[K` : `${line}\n`);
            drawn = true;
          },
        });
      } finally {
        // The progress line ends before whatever follows it (the id, or why it failed).
        if (stderrIsTty && drawn) io.err('\n');
      }
    }
    // The library finds the new folder in its models folder (and validates it once more).
    const library = await ModelLibrary.open(dataDir);
    await library.refresh();
    const at = await canonicalPath(root);
    const id = library.list().find((e) => e.root === at)?.id ?? path.basename(root);
    if (json) io.out(`${JSON.stringify({ id, root, variant: variant.name, bytes: variant.bytes })}\n`);
    else io.out(`${id}\n`);
    if (!json) io.err(`kvdesk: ${listing.repo} (${variant.name}) is in the library as ${id}: kvdesk chat ${id}\n`);
    return 0;
  } catch (err) {
    return fail(io, json, toErrorInfo(err));
  }
}
