/**
 * `kvdesk pull` (a real process) named as `ollama pull` and chat/generate name a hub model: `hf.co/owner/name:variant`,
 * the variant after the colon, against a local imitation of the hub's file API (test/helpers/fake-hub.ts) serving
 * the generated default model. The name was refused ("is not a Hugging Face repository") though the server's
 * /api/pull and `kvdesk chat` took it.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultModelRepo, type FakeHub, startFakeHub } from '../helpers/fake-hub';
import { repoRoot } from '../helpers/fixtures';

const REPO = 'onnx-community/tiny-chat';
let hub: FakeHub;
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-pull-'));

beforeAll(async () => {
  hub = await startFakeHub({ [REPO]: defaultModelRepo() }, { lfsMinBytes: 10_000, revisions: ['main', 'dev'] });
}, 60_000);
afterAll(async () => {
  await hub?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** `kvdesk <args>` (a real process) against the fake hub; not spawnSync: the hub answers from this process. */
const kvdesk = (args: string[]) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args],
      { cwd: repoRoot, env: { ...process.env, HF_ENDPOINT: hub.url, HF_TOKEN: '' }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });

describe('kvdesk pull hf.co/owner/name:variant', () => {
  it('downloads the variant after the colon, as --variant does', async () => {
    const r = await kvdesk(['pull', `hf.co/${REPO}:fp32`, '--data-dir', dataDir]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe('tiny-chat-fp32\n');
    expect(r.stderr).toContain(`kvdesk: ${REPO} (fp32) is in the library as tiny-chat-fp32`);
    expect(readdirSync(path.join(dataDir, 'models'))).toEqual(['tiny-chat-fp32']);
    // Pulled, never loaded: the JSON says so as the table does (no time it was loaded; a download, not an upload).
    const listed = await kvdesk(['list', '--json', '--data-dir', dataDir]);
    expect(listed.status, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).packages).toEqual([
      expect.objectContaining({
        id: 'tiny-chat-fp32',
        uploaded: false,
        lastLoadedAt: null,
        neverLoaded: true,
        source: expect.objectContaining({ repo: REPO, variant: 'fp32' }),
      }),
    ]);
    // The same with --variant naming it too, and as its page's address: there already.
    for (const name of [`${REPO}:fp32`, `https://huggingface.co/${REPO}:fp32`]) {
      const again = await kvdesk(['pull', name, '--variant', 'fp32', '--data-dir', dataDir]);
      expect(again.status, again.stderr).toBe(0);
      expect(again.stdout).toBe('tiny-chat-fp32\n');
      expect(again.stderr).toContain(`kvdesk: ${REPO} (fp32) is downloaded already`);
    }
  }, 60_000);

  it('with --list: the repository behind the name', async () => {
    const r = await kvdesk(['pull', `hf.co/${REPO}:q4`, '--list', '--data-dir', dataDir]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/q4 .*hf-optimum \(default\)/);
  });

  it(':latest is the variant kvdesk would take; a revision goes before the colon', async () => {
    const r = await kvdesk(['pull', `hf.co/${REPO}@main:latest`, '--json', '--data-dir', dataDir]);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ id: 'tiny-chat-q4', variant: 'q4' });
  }, 60_000);

  it('a revision after the variant (:fp32@rev) is taken as that revision; two different ones are refused (exit 2)', async () => {
    const commit = hub.head(REPO);
    const asked = hub.requests.length;
    const r = await kvdesk(['pull', `hf.co/${REPO}:fp32@${commit}`, '--json', '--data-dir', dataDir]);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ id: 'tiny-chat-fp32', variant: 'fp32', commit });
    expect(hub.requests.slice(asked).map((q) => q.path)).toContain(`/api/models/${REPO}/revision/${commit}`);
    const two = await kvdesk(['pull', `${REPO}@main:fp32@${commit}`, '--data-dir', dataDir]);
    expect(two.status).toBe(2);
    expect(two.stderr).toContain(
      `kvdesk: "${REPO}@main:fp32@${commit}" names two revisions, main and ${commit}: name one, as owner/name@revision:variant.`,
    );
  }, 60_000);

  it('a variant after the colon and another --variant: refused naming both (exit 2)', async () => {
    const r = await kvdesk(['pull', `hf.co/${REPO}:q4`, '--variant', 'fp32', '--data-dir', dataDir]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`kvdesk: "hf.co/${REPO}:q4" names the variant q4, and --variant fp32: give one`);
  });

  it('a variant the repository lacks is said as for --variant', async () => {
    const r = await kvdesk(['pull', `hf.co/${REPO}:q8`, '--data-dir', dataDir]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/has no variant "q8": it offers q4 .*, fp32/);
  });

  it('generate takes every name pull takes (a revision before or after the variant); a revision not pulled says how to pull it (exit 2)', async () => {
    // Pulled by the name with its revision after the variant (there already: the earlier test's, at main).
    const pulled = await kvdesk(['pull', `hf.co/${REPO}:q4@main`, '--data-dir', dataDir]);
    expect(pulled.status, pulled.stderr).toBe(0);
    const commit = hub.head(REPO);
    const gen = ['--data-dir', dataDir, '--prompt', 'hi', '--max-new-tokens', '1'];
    // Each was refused (exit 2) as "pulled from the hub as onnx-community/tiny-chat:q4@main".
    for (const name of [`hf.co/${REPO}:q4@main`, `${REPO}@main:q4`, `${REPO}:fp32@${commit.slice(0, 7)}`]) {
      const r = await kvdesk(['generate', name, ...gen]);
      expect(r.status, `${name}: ${r.stderr}`).toBe(0);
    }
    const root = realpathSync(path.join(dataDir, 'models', 'tiny-chat-q4'));
    const dev = await kvdesk(['generate', `hf.co/${REPO}:q4@dev`, ...gen]);
    expect(dev.status).toBe(2);
    expect(dev.stderr).toBe(
      `kvdesk: "hf.co/${REPO}:q4@dev" names ${REPO} (q4) at revision dev, and the library's tiny-chat-q4 was pulled from ${REPO}:q4 at main (commit ${commit.slice(0, 12)}), not at dev: name it as ${REPO}:q4 or ${REPO}@main:q4, or, to have dev instead, delete ${root}, then \`kvdesk pull ${REPO}@dev --variant q4\`.\n`,
    );
    // A variant not pulled: the pull said names the revision, not "--variant int8@main".
    const none = await kvdesk(['generate', `hf.co/${REPO}:int8@main`, ...gen]);
    expect(none.status).toBe(2);
    expect(none.stderr).toContain(
      `was pulled from the hub as ${REPO}@main:int8 (pulled: hf.co/${REPO}:q4, hf.co/${REPO}:fp32); give a folder, or a package \`kvdesk list\` shows (\`kvdesk pull ${REPO}@main --variant int8\` downloads it)`,
    );
    // Doing as it says: the name at dev runs.
    rmSync(root, { recursive: true, force: true });
    const again = await kvdesk(['pull', `${REPO}@dev`, '--variant', 'q4', '--data-dir', dataDir]);
    expect(again.status, again.stderr).toBe(0);
    const atDev = await kvdesk(['generate', `hf.co/${REPO}:q4@dev`, ...gen]);
    expect(atDev.status, atDev.stderr).toBe(0);
  }, 90_000);
});
