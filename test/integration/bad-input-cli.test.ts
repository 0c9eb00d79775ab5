/**
 * Bad input on the command line, through the real `kvdesk` process: each is refused at once with exit 2 and a
 * message that names the flag or the package file and what to do (never exit 1, INTERNAL, or a minute's run).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultModelDir, repoRoot } from '../helpers/fixtures';
import { installedPackage } from '../helpers/models';
import { externalWeights } from './packages/edited-default';

const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bad-input-cli-'));
chmodSync(work, 0o755);
const dataDir = path.join(work, 'data');
afterAll(() => rmSync(work, { recursive: true, force: true }));

function kvdesk(args: string[], opts: { as?: string[]; input?: string } = {}) {
  const [cmd, ...pre] = opts.as ?? [process.execPath];
  const r = spawnSync(
    cmd as string,
    [...pre, ...(opts.as ? [process.execPath] : []), path.join(repoRoot, 'bin/kvdesk.cjs'), ...args],
    { cwd: repoRoot, encoding: 'utf8', timeout: 60_000, input: opts.input ?? '' },
  );
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

// As root a file of mode 000 is readable all the same: the tests of unreadable files run kvdesk as nobody then.
const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));
const root = process.getuid?.() === 0;

/** A copy of the default package, changed by `edit`. */
function pkg(name: string, edit: (dir: string) => void = () => {}): string {
  const dir = path.join(work, name);
  cpSync(defaultModelDir, dir, { recursive: true });
  edit(dir);
  return dir;
}

/** `kvdesk inspect dir` as a user who owns nothing here (root reads every file): nobody, with a data folder of its own. */
function inspectAsNobody(dir: string, dataName: string) {
  const nobodyData = path.join(work, dataName);
  mkdirSync(nobodyData, { mode: 0o777 });
  chmodSync(nobodyData, 0o777);
  const as = root
    ? [setpriv as string, '--reuid', '65534', '--regid', '65534', '--clear-groups', 'env', `HOME=${nobodyData}`]
    : undefined;
  return kvdesk(['inspect', dir, '--data-dir', nobodyData], as ? { as } : {});
}

describe('--threads is checked before anything loads', () => {
  const max = 4 * os.availableParallelism();

  it.each([
    ['generate', '-1'],
    ['generate', '0'],
    ['generate', '3000'],
    ['chat', '-1'],
    ['chat', '3000'],
  ])('%s --threads %s: exit 2 naming the range', (command, value) => {
    const extra = command === 'generate' ? ['--prompt', 'hi'] : [];
    const t0 = Date.now();
    const r = kvdesk([
      command,
      defaultModelDir,
      ...extra,
      '--max-new-tokens',
      '1',
      '--threads',
      value,
      '--data-dir',
      dataDir,
    ]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`--threads must be between 1 and ${max}, got ${value}`);
    expect(r.stderr).not.toContain('could not load'); // the model is not blamed
    expect(Date.now() - t0).toBeLessThan(30_000);
  });

  it('serve --threads 3000: exit 2 before it listens', () => {
    const r = kvdesk(['serve', '--port', '0', '--threads', '3000', '--data-dir', dataDir]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`--threads must be between 1 and ${max}, got 3000`);
  });
});

describe('--seed past the largest exact integer', () => {
  it.each([
    ['generate', '1e20', '100000000000000000000'],
    ['generate', '9007199254740992', '9007199254740992'],
    ['chat', '9007199254740992', '9007199254740992'],
  ])('%s --seed %s: exit 2 naming the real range', (command, value, said) => {
    const extra = command === 'generate' ? ['--prompt', 'hi'] : [];
    const r = kvdesk([command, defaultModelDir, ...extra, '--max-new-tokens', '1', '--seed', value]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`--seed must be between 0 and ${Number.MAX_SAFE_INTEGER}, got ${said}`);
  });

  it('the largest one is taken', () => {
    const r = kvdesk([
      'generate',
      defaultModelDir,
      '--prompt',
      'hi',
      '--max-new-tokens',
      '1',
      '--seed',
      '9007199254740991',
    ]);
    expect(r.code, r.stderr).toBe(0);
  });
});

describe('--kv-budget naming a device kvdesk does not know', () => {
  /** A one-token generate with this budget flag. */
  const withBudget = (value: string) =>
    kvdesk(['generate', defaultModelDir, '--prompt', 'hi', '--max-new-tokens', '1', '--kv-budget', value]);

  it('generate: exit 2 naming the device and the ones kvdesk knows', () => {
    const r = withBudget('foo:0=1GiB');
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--kv-budget foo:0=1GiB');
    expect(r.stderr).toContain('"foo"');
    expect(r.stderr).toMatch(/cpu, cuda:0/);
  });

  it("a provider that shares another device's budget is pointed at that device", () => {
    const r = withBudget('tensorrt:0=1GiB');
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--kv-budget cuda:0=');
  });

  it('a known device still passes', () => {
    const r = withBudget('cuda:0=1GiB');
    expect(r.code, r.stderr).toBe(0);
  });
});

describe('an "installed" ORT package', () => {
  it('is refused naming the flag that trusts it', () => {
    const r = kvdesk(['inspect', installedPackage(), '--data-dir', dataDir]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--trust-installed');
    expect(r.stderr).not.toContain('the trustInstalled option');
  });
});

describe('packages that used to give INTERNAL (exit 1) name their file: exit 2', () => {
  it('a YAML alias bomb in inference_metadata.yaml', () => {
    const dir = path.join(work, 'bomb');
    mkdirSync(dir);
    const lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]'];
    for (let i = 1; i <= 9; i++)
      lines.push(
        `a${i}: &a${i} [${Array(9)
          .fill(`*a${i - 1}`)
          .join(',')}]`,
      );
    writeFileSync(
      path.join(dir, 'inference_metadata.yaml'),
      `model:\n  max_sequence_length: 16\n${lines.join('\n')}\n`,
    );
    cpSync(path.join(defaultModelDir, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
    cpSync(path.join(defaultModelDir, 'onnx/model.onnx'), path.join(dir, 'model.onnx'));
    const r = kvdesk(['inspect', dir, '--data-dir', dataDir]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^kvdesk: inference_metadata\.yaml /);
  });

  it.skipIf(root && setpriv === undefined)('a package folder its user cannot read (mode 000)', () => {
    const dir = pkg('locked');
    chmodSync(dir, 0o000);
    try {
      const r = inspectAsNobody(dir, 'nobody-data');
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`the package folder ${dir}`);
      expect(r.stderr).toContain('EACCES');
    } finally {
      chmodSync(dir, 0o755);
    }
  });

  it('KV inputs listed twice: refused at check time, not by every request', () => {
    const dir = path.join(work, 'kvdup');
    cpSync(defaultModelDir, dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'inference_metadata.yaml'),
      [
        'model:',
        '  max_sequence_length: 16',
        '  io:',
        '    token_input: input_ids',
        '    attention_mask_input: attention_mask',
        '    position_ids_input: position_ids',
        '    logits_output: logits',
        '    kv_inputs: [past_key_values.0.key, past_key_values.0.value, past_key_values.0.key, past_key_values.0.value]',
        '    kv_outputs: [present.0.key, present.0.value, present.0.key, present.0.value]',
        '',
      ].join('\n'),
    );
    // An onnx-genai package: the graph beside its metadata, no config.json.
    cpSync(path.join(dir, 'onnx/model.onnx'), path.join(dir, 'model.onnx'));
    rmSync(path.join(dir, 'onnx'), { recursive: true });
    rmSync(path.join(dir, 'config.json'));
    const r = kvdesk(['generate', dir, '--prompt-ids', '5,6,7', '--max-new-tokens', '2', '--data-dir', dataDir]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('inference_metadata.yaml: `model.io.kv_inputs[2]` repeats "past_key_values.0.key"');
  });
});

describe('a package cloned without Git LFS', () => {
  const pointer = 'version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 1012842\n';

  it.each(['onnx/model.onnx', 'tokenizer.json'])(
    '%s a Git LFS pointer: inspect says so and how to get the file (exit 2)',
    (file) => {
      const dir = pkg(`lfs-${file.replace(/\W/g, '-')}`, (d) => writeFileSync(path.join(d, file), pointer));
      const r = kvdesk(['inspect', dir, '--data-dir', dataDir]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(
        `kvdesk: ${file} is a Git LFS pointer, not the file itself: run \`git lfs install && git lfs pull\` in the package's folder`,
      );
      expect(r.stderr).not.toMatch(/wire type|not valid JSON/);
    },
  );
});

describe('an external-data file its user cannot read (mode 000)', () => {
  it.skipIf(root && setpriv === undefined)(
    'inspect refuses it, naming the file and EACCES (exit 2), instead of passing it to fail at load',
    async () => {
      const dir = pkg('data-unreadable');
      await externalWeights(dir);
      const data = path.join(dir, 'onnx/model.onnx.data');
      chmodSync(data, 0o000);
      try {
        const r = inspectAsNobody(dir, 'nobody-data-2');
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toContain('kvdesk: Could not read onnx/model.onnx.data in the package (EACCES');
        expect(r.stderr).toContain('Check that the folder and its files are readable (their permissions)');
      } finally {
        chmodSync(data, 0o644);
      }
    },
  );
});

describe('serve --token that is empty or only whitespace', () => {
  /** `kvdesk serve` with `env` added to the environment, without $KVDESK_TOKEN unless it sets one. */
  function serveWith(args: string[], env: Record<string, string> = {}) {
    const { KVDESK_TOKEN: _, ...rest } = process.env;
    const r = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', ...args], {
      cwd: repoRoot,
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...rest, ...env },
    });
    return { code: r.status ?? -1, stderr: r.stderr };
  }

  // It ran with no token asked for, and printed "open http://…/?token= in a browser".
  it.each([
    ['--token ""', ['--token', ''], {}, '--token is empty'],
    ['--token "  "', ['--token', '  '], {}, '--token is only whitespace'],
    ['KVDESK_TOKEN=""', [], { KVDESK_TOKEN: '' }, '$KVDESK_TOKEN is empty'],
    ['KVDESK_TOKEN=" "', [], { KVDESK_TOKEN: ' ' }, '$KVDESK_TOKEN is only whitespace'],
  ] as const)('%s: exit 2 before it listens, naming where it came from', (_, args, env, said) => {
    const r = serveWith([...args, '--data-dir', dataDir], env);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^kvdesk: ${said.replace(/[$]/g, '\\$')}, which protects nothing`));
    expect(r.stderr).toContain('Give the secret clients must send');
    expect(r.stderr).not.toContain('serving');
    expect(r.stderr).not.toContain('?token=');
  });
});

describe('an empty path ("" from `"$MODEL"` with MODEL unset) is refused, not read as the current folder', () => {
  it.each([
    [['inspect', ''], 'the package is empty ("")'],
    [['generate', '', '--prompt', 'hi', '--max-new-tokens', '1'], 'the package is empty ("")'],
    [['chat', ''], 'the package is empty ("")'],
    [['pull', ''], 'the repository is empty ("")'],
    [['serve', '--port', '0', '--model', ''], '--model is empty'],
    [['serve', '--port', '0', '--static-dir', ' '], '--static-dir is empty'],
    [['generate', defaultModelDir, '--prompt', 'hi', '--chat-template', ''], '--chat-template is empty'],
  ])('kvdesk %j: exit 2, naming it', (args, said) => {
    const r = kvdesk([...args, '--data-dir', dataDir]);
    expect(r.stderr).toContain(`kvdesk: ${said}: give a`);
    expect(r.stderr).not.toContain(repoRoot);
    expect(r.stdout).not.toContain('kvdesk serving');
    expect(r.code).toBe(2);
  });
});
