/**
 * The CLI as a person runs it, on real onnxruntime and real packages: the acceptance commands of the foundation and
 * scheduler issues. What a command says and does runs through the CLI's own main() in this process (`kvdesk`; its
 * engine is a process of its own, as always); what the process around it does — the binary, its exit code, its
 * streams, stdin, its environment, a reader gone — runs a real `kvdesk` process (`kvdeskProcess`, `kvdeskWith`).
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { GENERATE_OPTIONS, INSPECT_OPTIONS, LIST_OPTIONS, main } from '../../src/cli/main';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures, repoRoot } from '../helpers/fixtures';
import { graphVariantsModel, installedPackage, slowModel, thinkingModel } from '../helpers/models';
import { writeTwinPackages } from '../helpers/static-cache-models';

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  json: Record<string, unknown>;
}

/** A real `kvdesk` process (bin/kvdesk.cjs, the bundle it runs): the process around the command is under test. */
function kvdeskProcess(...args: string[]): CliRun {
  return kvdeskWith({}, ...args);
}

/**
 * `kvdesk ARGS` run here, through the CLI's own main() (what bin/kvdesk.cjs runs, in this process): what a command
 * says and does, without two Node processes started for each (the engine it loads is still a process of its own).
 * Its output is what the command writes through its Io; the process around it (streams, exit, stdin, environment)
 * is tested with kvdeskProcess and kvdeskWith.
 */
async function kvdesk(...args: string[]): Promise<CliRun> {
  return kvdeskFed(undefined, ...args);
}

/** kvdesk through main() as above, its stdin a pipe that gives `input` (none: the process's own). */
async function kvdeskFed(input: Buffer | undefined, ...args: string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const before = processesRunning();
  const io = { out: (s: string) => (stdout += s), err: (s: string) => (stderr += s) };
  const code = await main(args, io, input === undefined ? undefined : Readable.from([input]));
  // What a real process would have shown by never exiting: a command that leaves its engine running (an engine
  // that has exited is listed until its handle closes, a moment later).
  await expect
    .poll(processesRunning, { message: `kvdesk ${args.join(' ')} left a process running`, timeout: 5_000 })
    .toBe(before);
  return { code, stdout, stderr, json: jsonOf(args, stdout, stderr) };
}

/** Child processes of this process still running. */
function processesRunning(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'ProcessWrap').length;
}

/** The one JSON line a command given --json writes on stdout; {} without --json. */
function jsonOf(args: string[], stdout: string, stderr: string): Record<string, unknown> {
  if (!args.includes('--json')) return {};
  const lines = stdout.trim().split('\n');
  expect(lines, `stdout must be exactly one JSON line, got: ${stdout} / stderr: ${stderr}`).toHaveLength(1);
  return JSON.parse(lines[0] as string);
}

/** kvdesk with its stdin (`input`), environment or working directory given. */
function kvdeskWith(opts: { input?: string; env?: NodeJS.ProcessEnv; cwd?: string }, ...args: string[]): CliRun {
  const r = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: 60_000,
    ...opts,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, json: jsonOf(args, r.stdout, r.stderr) };
}

const tinyLlmFamily = ['tiny-llm', 'tiny-llm-explicit-io', 'tiny-reasoning', 'tiny-llm-sharedbuffer'];

describe.skipIf(!haveFixtures)(
  `CLI on shared fixtures${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it.each(tinyLlmFamily)('%s: greedy ids 5,6,7 give the known 8 tokens', async (name) => {
      const r = await kvdesk(
        'generate',
        fixture(`onnx-genai/${name}`),
        '--prompt-ids',
        '5,6,7',
        '--max-new-tokens',
        '8',
        '--greedy',
        '--json',
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.json.tokenIds).toEqual([22, 22, 20, 1, 1, 18, 22, 25]);
      expect(r.json.finishReason).toBe('length');
      expect(r.json.promptTokens).toBe(3);
      expect(r.json.bpt).toBe(128);
    });

    it.each([
      ['0,0,195,731', [731, 114, 114, 114, 114, 114]],
      ['0,0,0,52', [204, 204, 204, 204, 204, 204]],
    ])('tiny-random-gpt2-fp32: prompt %s matches the onnxruntime-genai oracle', async (ids, expected) => {
      const r = await kvdesk(
        'generate',
        fixture('onnxruntime-genai/tiny-random-gpt2-fp32'),
        '--prompt-ids',
        ids,
        '--max-new-tokens',
        '6',
        '--greedy',
        '--json',
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.json.tokenIds).toEqual(expected);
    });

    it('inspect --json reports bpt 128 for tiny-llm and 1280 for tiny-random-gpt2-fp32', async () => {
      const a = await kvdesk('inspect', fixture('onnx-genai/tiny-llm'), '--json');
      expect(a.code, a.stderr).toBe(0);
      expect(a.json.bpt).toBe(128);
      expect(a.json.kvBytesFullContext).toBe(128 * 16);
      const b = await kvdesk('inspect', fixture('onnxruntime-genai/tiny-random-gpt2-fp32'), '--json');
      expect(b.code, b.stderr).toBe(0);
      expect(b.json.bpt).toBe(1280);
      expect(b.json.kvBytesFullContext).toBe(1280 * 512);
    });

    const tinyLlm = () => fixture('onnx-genai/tiny-llm');
    const budgetArgs = ['--prompt-ids', '5,6,7', '--max-new-tokens', '8', '--greedy', '--json'];

    it('--kv-budget 400 refuses with KV_BUDGET_EXCEEDED and exit 3', async () => {
      const r = await kvdesk('generate', tinyLlm(), ...budgetArgs, '--kv-budget', '400');
      expect(r.code).toBe(3);
      const error = r.json.error as Record<string, unknown>;
      expect(error).toMatchObject({
        code: 'KV_BUDGET_EXCEEDED',
        requiredBytes: 512,
        budgetBytes: 400,
        bpt: 128,
        promptTokens: 3,
        rows: 1,
      });
      expect(error.message).toMatch(/512/);
    });

    it('--kv-budget 400 without --json prints one human line with the numbers', () => {
      // A real process: its stderr is the engine's too.
      const r = kvdeskProcess(
        'generate',
        tinyLlm(),
        '--prompt-ids',
        '5,6,7',
        '--max-new-tokens',
        '8',
        '--greedy',
        '--kv-budget',
        '400',
      );
      expect(r.code).toBe(3);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/512/);
      expect(r.stderr).toMatch(/400/);
    });

    it('--kv-budget 1024 caps the reply at 5 tokens and says so', async () => {
      const r = await kvdesk('generate', tinyLlm(), ...budgetArgs, '--kv-budget', '1024');
      expect(r.code, r.stderr).toBe(0);
      expect(r.json.tokenIds).toEqual([22, 22, 20, 1, 1]);
      expect(r.json.budgetCap).toMatchObject({
        admittedMaxTokens: 5,
        requestedMaxTokens: 8,
        requestedBytes: 1408,
        admittedBytes: 1024,
      });
      const human = await kvdesk(
        'generate',
        tinyLlm(),
        '--prompt-ids',
        '5,6,7',
        '--max-new-tokens',
        '8',
        '--greedy',
        '--kv-budget',
        '1KiB',
      );
      expect(human.code).toBe(0);
      expect(human.stderr).toMatch(/capped at 5 tokens/);
    });

    it('--kv-budget 1408 gives the full 8 tokens and no budgetCap', async () => {
      const r = await kvdesk('generate', tinyLlm(), ...budgetArgs, '--kv-budget', '1408');
      expect(r.code, r.stderr).toBe(0);
      expect(r.json.tokenIds).toEqual([22, 22, 20, 1, 1, 18, 22, 25]);
      expect(r.json.budgetCap).toBeUndefined();
      expect(r.json.reservedBytes).toBe(1408);
    });

    it('a 16-token prompt on a 16-token context is CONTEXT_OVERFLOW, exit 2', async () => {
      const ids = Array.from({ length: 16 }, (_, i) => 4 + (i % 20)).join(',');
      const r = await kvdesk('generate', tinyLlm(), '--prompt-ids', ids, '--max-new-tokens', '8', '--greedy', '--json');
      expect(r.code).toBe(2);
      const error = r.json.error as Record<string, unknown>;
      expect(error.code).toBe('CONTEXT_OVERFLOW');
      expect(error.message).toMatch(/16 tokens/);
      expect(error.message).toMatch(/context.*16|16.*context/i);
    });

    it('--rows 4 reserves for all four rows and runs them as one batch', async () => {
      const r = await kvdesk(
        'generate',
        fixture('onnxruntime-genai/tiny-random-gpt2-fp32'),
        '--prompt-ids',
        '0,0,195,731',
        '--max-new-tokens',
        '4',
        '--greedy',
        '--rows',
        '4',
        '--json',
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.json.reservedBytes).toBe(4 * (4 + 4) * 1280);
      const rows = r.json.rows as Array<{ tokenIds: number[] }>;
      expect(rows).toHaveLength(4);
      for (const row of rows) expect(row.tokenIds).toEqual([731, 114, 114, 114]);
    });

    it('text the model vocabulary does not cover is refused with exit 2', async () => {
      const r = await kvdesk(
        'generate',
        fixture('onnxruntime-genai/tiny-random-gpt2-fp32'),
        '--prompt',
        'Hello world, this is text',
        '--json',
      );
      expect(r.code).toBe(2);
      expect((r.json.error as Record<string, unknown>).code).toBe('TOKEN_OUT_OF_VOCAB');
    });

    it('a package pulled from the hub is named by its hub name too (owner/name, hf.co/owner/name[:variant]), as on the Ollama API', async () => {
      const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-pulled-'));
      try {
        const dataDir = path.join(work, 'data');
        const root = path.join(dataDir, 'models', 'tiny-llm');
        cpSync(fixture('onnx-genai/tiny-llm'), root, { recursive: true });
        // As `kvdesk pull someone/tiny-llm` leaves it.
        writeFileSync(
          path.join(root, '.kvdesk-source.json'),
          JSON.stringify({ repo: 'someone/tiny-llm', revision: 'main', variant: 'fp32' }),
        );
        expect((await kvdesk('list', '--data-dir', dataDir)).stdout).toMatch(
          /\ntiny-llm\s+ok \(hf\.co\/someone\/tiny-llm fp32\)/,
        );
        const args = ['--data-dir', dataDir, '--prompt-ids', '5,6,7', '--max-new-tokens', '8', '--greedy', '--json'];
        for (const name of ['someone/tiny-llm', 'hf.co/someone/tiny-llm', 'hf.co/Someone/Tiny-LLM:fp32']) {
          const r = await kvdesk('generate', name, ...args);
          expect(r.code, `${name}: ${r.stderr}`).toBe(0);
          expect(r.json.tokenIds).toEqual([22, 22, 20, 1, 1, 18, 22, 25]);
        }
        const inspected = await kvdesk('inspect', 'hf.co/someone/tiny-llm', '--data-dir', dataDir, '--json');
        expect(inspected.code, inspected.stderr).toBe(0);
        expect(inspected.json).toMatchObject({ root: realpathSync(root) });
        const chat = kvdeskWith({ input: '' }, 'chat', 'someone/tiny-llm', '--data-dir', dataDir);
        expect(chat.code, chat.stderr).toBe(0);
        expect(chat.stderr).toMatch(/^kvdesk: tiny-llm \(.*\) loaded in/m);
        // Neither a folder nor a pulled package: both said, with what there is.
        for (const [name, pull] of [
          ['someone/other-llm', 'kvdesk pull someone/other-llm'],
          ['someone/tiny-llm:q4', 'kvdesk pull someone/tiny-llm --variant q4'],
        ] as const) {
          const missing = await kvdesk('generate', name, ...args);
          expect(missing.code).toBe(2);
          expect((missing.json.error as Record<string, unknown>).message).toBe(
            `there is no package folder ${path.join(repoRoot, name)}, and no package in the library at ${dataDir} was pulled from the hub as ${name} (pulled: hf.co/someone/tiny-llm:fp32); give a folder, or a package \`kvdesk list\` shows (\`${pull}\` downloads it)`,
          );
        }
        // A path that is no hub name is a folder to load, as before.
        expect((await kvdesk('generate', './no/such-model', ...args)).json.error).toMatchObject({
          message: expect.stringContaining('does not exist. Pick the folder that holds the model package.'),
        });
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });
  },
);

describe('--variant and --backend', () => {
  it('generate and chat load the variant asked for; a backend this machine cannot use says so and runs on the CPU', async () => {
    const dir = graphVariantsModel();
    const ids = async (...extra: string[]) => {
      const r = await kvdesk(
        'generate',
        dir,
        '--prompt-ids',
        '5,6,7',
        '--max-new-tokens',
        '6',
        '--greedy',
        '--json',
        ...extra,
      );
      expect(r.code, r.stderr).toBe(0);
      return r.json.tokenIds;
    };
    const fp32 = await ids();
    // With --json too, a backend this machine cannot use is said: in the JSON's warnings, and on stderr.
    const cuda = await kvdesk(
      'generate',
      dir,
      '--prompt-ids',
      '5',
      '--max-new-tokens',
      '1',
      '--json',
      '--backend',
      'cuda',
    );
    expect(cuda.code, cuda.stderr).toBe(0);
    const fellBack = /^cuda was picked, but this machine cannot use it \(.+\).*; kvdesk runs the model on the CPU$/;
    expect(cuda.json.warnings).toEqual([expect.stringMatching(fellBack)]);
    expect(cuda.stderr).toContain(`kvdesk: warning: ${(cuda.json.warnings as string[])[0]}\n`);
    expect(await ids('--variant', 'fp32')).toEqual(fp32);
    expect(await ids('--variant', 'q4')).not.toEqual(fp32);
    const wrong = await kvdesk('generate', dir, '--prompt-ids', '5', '--variant', 'int8');
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('Graph variant "int8" is not in the package; the package offers: ');

    const chat = spawnSync(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'chat', dir, '--greedy', '--max-new-tokens', '4', '--backend', 'cuda'],
      { cwd: repoRoot, encoding: 'utf8', input: 'Hi\n', timeout: 60_000 },
    );
    expect(chat.status, chat.stderr).toBe(0);
    expect(chat.stderr).toMatch(
      /kvdesk: warning: cuda was picked, but this machine cannot use it \(.+\).*; kvdesk runs the model on the CPU/,
    );
    // An "installed" ORT package: refused without --trust-installed (exit 2, naming the field), loaded with it.
    const installed = installedPackage();
    const untrusted = await kvdesk('generate', installed, '--prompt-ids', '5', '--max-new-tokens', '2');
    expect(untrusted.code).toBe(2);
    expect(untrusted.stderr).toContain('only when you trust it explicitly');
    const trusted = await kvdesk(
      'generate',
      installed,
      '--prompt-ids',
      '5',
      '--max-new-tokens',
      '2',
      '--trust-installed',
    );
    expect(trusted.code, trusted.stderr).toBe(0);
    expect(trusted.stderr).toContain('was trusted');
    const inspected = await kvdesk('inspect', installed, '--trust-installed', '--json');
    expect(inspected.code, inspected.stderr).toBe(0);
    expect(inspected.json.layout).toBe('ort-package');
    const unknown = await kvdesk('generate', dir, '--prompt-ids', '5', '--backend', 'quantum');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('"quantum" is no backend onnxruntime knows');
  });
});

describe('the library pick in the CLI', () => {
  it('generate loads a package as the library last loaded it, unless a flag says otherwise', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-pick-'));
    try {
      const dataDir = path.join(work, 'data');
      const dir = path.join(work, 'variants');
      cpSync(graphVariantsModel(), dir, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(dir, await loadModelSpec(dir, { graphVariant: 'q4' }), { variant: 'q4' });
      await library.flush();
      const ids = async (...extra: string[]) => {
        const r = await kvdesk(
          'generate',
          dir,
          '--data-dir',
          dataDir,
          '--prompt-ids',
          '5,6,7',
          '--max-new-tokens',
          '6',
          '--greedy',
          '--json',
          ...extra,
        );
        expect(r.code, r.stderr).toBe(0);
        return r.json.tokenIds;
      };
      const kept = await ids();
      expect(kept).toEqual(await ids('--variant', 'q4'));
      expect(await ids('--variant', 'fp32')).not.toEqual(kept);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('inspect shows a package as the library last loaded it (its graph, its template), unless a flag says otherwise', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-inspect-pick-'));
    try {
      const dataDir = path.join(work, 'data');
      const dir = path.join(work, 'pkga');
      cpSync(graphVariantsModel(), dir, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      const template = "{% for m in messages %}{{ m.content + '\\n' }}{% endfor %}";
      await library.loaded(dir, await loadModelSpec(dir, { graphVariant: 'q4' }), {
        variant: 'q4',
        chatTemplate: template,
      });
      await library.flush();
      const inspect = async (...extra: string[]) => {
        const r = await kvdesk('inspect', dir, '--data-dir', dataDir, '--json', ...extra);
        expect(r.code, r.stderr).toBe(0);
        return r.json;
      };
      // The graph it reads, as its text says it.
      const graph = async (...extra: string[]) => {
        const r = await kvdesk('inspect', dir, '--data-dir', dataDir, ...extra);
        expect(r.code, r.stderr).toBe(0);
        return /graph {10}(\S+)/.exec(r.stdout)?.[1];
      };
      expect((await inspect()).chatTemplateEdited).toBe(true);
      expect(await graph()).toBe('onnx/model_q4.onnx');
      // By the library id too, as generate takes it.
      expect((await kvdesk('inspect', 'pkga', '--data-dir', dataDir, '--json')).json.chatTemplateEdited).toBe(true);
      // The flags win over the kept pick.
      expect((await inspect('--package-template')).chatTemplateEdited).toBe(false);
      expect(await graph('--variant', 'fp32')).toBe('onnx/model.onnx');
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describe('--chat-template', () => {
  it("generate, chat's prompt and inspect take a file's template; the library's kept one by default, unless --package-template; a bad one is exit 2", async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-template-'));
    try {
      const dataDir = path.join(work, 'data');
      const file = path.join(work, 'mine.jinja');
      // Each message on a line of its own, and a reasoning opened for the reply: a thinking model.
      writeFileSync(
        file,
        "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}assistant: <think>",
      );
      const prompt = async (...extra: string[]) => {
        const r = await kvdesk(
          'generate',
          defaultModelDir,
          '--data-dir',
          dataDir,
          '--chat',
          '--prompt',
          'Why?',
          '--max-new-tokens',
          '3',
          '--greedy',
          '--json',
          ...extra,
        );
        expect(r.code, r.stderr).toBe(0);
        return r.json;
      };
      const packaged = await prompt();
      const mine = await prompt('--chat-template', file);
      // "user: Why?\nassistant: <think>" — its reply starts inside the reasoning the template opened.
      expect(mine.promptTokens).not.toBe(packaged.promptTokens);
      expect(mine.reasoningTokens).toBe(3);
      expect(packaged.reasoningTokens).toBeUndefined();
      // inspect shows the model as the template makes it.
      const inspected = await kvdesk('inspect', defaultModelDir, '--chat-template', file, '--json');
      expect(inspected.code, inspected.stderr).toBe(0);
      expect(inspected.json.reasoning).toMatchObject({ open: '<think>', close: '</think>' });
      // The library's kept template (picked on the card in the window) is the default; the flag still wins.
      const library = await ModelLibrary.open(dataDir);
      const spec = await loadModelSpec(defaultModelDir, {});
      await library.loaded(defaultModelDir, spec, { chatTemplate: '{{ messages[0].content }}' });
      await library.flush();
      const kept = await prompt();
      expect(kept.promptTokens).toBeLessThan(packaged.promptTokens as number);
      expect((await prompt('--chat-template', file)).promptTokens).toBe(mine.promptTokens);
      // --package-template: the package's own for this run, the kept one left kept; with --chat-template, exit 2.
      expect((await prompt('--package-template')).promptTokens).toBe(packaged.promptTokens);
      expect((await ModelLibrary.open(dataDir)).list()[0]?.load).toEqual({ chatTemplate: '{{ messages[0].content }}' });
      const both = await kvdesk(
        'generate',
        defaultModelDir,
        '--prompt',
        'x',
        '--package-template',
        '--chat-template',
        file,
      );
      expect(both.code).toBe(2);
      expect(both.stderr).toContain('--package-template and --chat-template contradict');
      // A file that is not there, or a template that does not render: exit 2, naming the flag or the field.
      const missing = await kvdesk(
        'generate',
        defaultModelDir,
        '--prompt',
        'x',
        '--chat-template',
        path.join(work, 'no.jinja'),
      );
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain('--chat-template: cannot read');
      const broken = path.join(work, 'broken.jinja');
      writeFileSync(broken, '{% for m in messages %}');
      const bad = await kvdesk('generate', defaultModelDir, '--prompt', 'x', '--chat-template', broken);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain(`--chat-template ${broken} cannot be used: The chat template is not a valid Jinja`);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describe('generate --prompt-ids on a package whose tokenizer.json lacks a token its chat template writes', () => {
  it('says nothing of it (no template rendered, no text encoded); a text prompt still warns', async () => {
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-lacking-'));
    try {
      const dir = path.join(work, 'lacking');
      cpSync(defaultModelDir, dir, { recursive: true });
      const configFile = path.join(dir, 'tokenizer_config.json');
      const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
      config.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}{{ '<|assistant|>' }}";
      writeFileSync(configFile, JSON.stringify(config));
      const run = (...prompt: string[]) => kvdesk('generate', dir, ...prompt, '--max-new-tokens', '2', '--greedy');
      const text = await run('--chat', '--prompt', 'Hi');
      expect(text.code, text.stderr).toBe(0);
      expect(text.stderr).toContain('tokenizer.json has no token for <|assistant|>, which the chat template writes');
      for (const ids of [
        ['--prompt-ids', '5,6,7'],
        ['--prompt-ids', '5,6', '--prompt-ids', '7,8'],
      ]) {
        const r = await run(...ids);
        expect(r.code, r.stderr).toBe(0);
        expect(r.stderr).not.toContain('has no token for');
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describe('--effort', () => {
  it('a thinking model takes it with --chat; a level it does not know, or no --chat, is exit 2 naming it', async () => {
    // A template that shows the effort it gets: the prompt grows by that line.
    const model = thinkingModel(
      'thinking-effort-cli',
      "{{ messages[0].content + '\\n' }}{% if reasoning_effort is defined %}{{ 'Reasoning: ' + reasoning_effort + '\\n' }}{% endif %}{{ '<think>\\n' }}",
    );
    const run = async (...extra: string[]) =>
      await kvdesk('generate', model, '--chat', '--prompt', 'Why?', '--max-new-tokens', '2', '--json', ...extra);
    const without = await run();
    const ok = await run('--effort', 'low');
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.json.promptTokens as number).toBeGreaterThan(without.json.promptTokens as number);
    const bad = await kvdesk('generate', model, '--chat', '--prompt', 'Why?', '--effort', 'extreme');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--effort expects minimal, low, medium, high; got "extreme"');
    const plain = await kvdesk('generate', model, '--prompt', 'Why?', '--effort', 'low');
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain('--effort goes with --chat');
  });
});

describe('CLI on the generated default model', () => {
  it('a --kv-budget over what the memory holds is taken, with its note on stderr; one that fits says nothing', async () => {
    const args = ['generate', defaultModelDir, '--prompt-ids', '1,2,3', '--max-new-tokens', '2', '--greedy', '--json'];
    const over = await kvdesk(...args, '--kv-budget', '64TiB');
    expect(over.code, over.stderr).toBe(0);
    expect(over.stderr).toMatch(
      /^kvdesk: KV budget note: 64\.0 TiB is more than system RAM holds beside the weights \(.+\): replies admitted under it can run out of memory before the budget stops them\.$/m,
    );
    const fits = await kvdesk(...args, '--kv-budget', '64KiB');
    expect(fits.code, fits.stderr).toBe(0);
    expect(fits.stderr).not.toContain('KV budget note');
  });

  it('a name in a folder that is there is a folder, not a hub name to pull; a hub name elsewhere is one', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-path-'));
    try {
      // `test` is a folder of the working directory (the repository's root): `test/no-such-model@1` is a folder in it.
      expect(process.cwd()).toBe(repoRoot);
      // Also where the library holds a package pulled under that name at another revision.
      const pulled = path.join(dataDir, 'models', 'no-such-model');
      cpSync(defaultModelDir, pulled, { recursive: true });
      writeFileSync(
        path.join(pulled, '.kvdesk-source.json'),
        JSON.stringify({ repo: 'test/no-such-model', revision: 'main', variant: 'fp32' }),
      );
      const { ModelLibrary } = await import('../../src/main/host/model-library');
      const { loadModelSpec } = await import('../../src/main/packages');
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(pulled, await loadModelSpec(pulled));
      await library.flush();
      const inFolder = await kvdesk('generate', 'test/no-such-model@1', '--data-dir', dataDir, '--prompt', 'x');
      expect(inFolder.code).toBe(2);
      expect(inFolder.stderr).toBe(
        `kvdesk: ${path.join(repoRoot, 'test/no-such-model@1')} does not exist. Pick the folder that holds the model package.\n`,
      );
      // No folder `no-such-owner` here: a hub name, not pulled.
      const hub = await kvdesk('generate', 'no-such-owner/model@1', '--data-dir', dataDir, '--prompt', 'x');
      expect(hub.code).toBe(2);
      expect(hub.stderr).toMatch(
        /^kvdesk: there is no package folder .*, and no package in the library at .* was pulled from the hub as no-such-owner\/model@1 \(pulled: hf\.co\/test\/no-such-model:fp32\); .*`kvdesk pull no-such-owner\/model@1` downloads it/,
      );
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('a prompt the context cannot take is said for one generate call: shorten it, or a longer context', async () => {
    // The default model's context is 2048 tokens.
    const ids = Array.from({ length: 2048 }, (_, i) => 1 + (i % 100)).join(',');
    const r = await kvdesk('generate', defaultModelDir, '--prompt-ids', ids, '--max-new-tokens', '2');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      "kvdesk: The prompt has 2048 tokens, which leaves no room for a reply in the model's context of 2048 tokens. Shorten the prompt, or use a model with a longer context.\n",
    );
    // One of several: named by its flag and row, not by the request's field (promptIdRows[1]).
    const rows = await kvdesk('generate', defaultModelDir, '--prompt-ids', '5', '--prompt-ids', ids);
    expect(rows.code).toBe(2);
    expect(rows.stderr).toBe(
      "kvdesk: --prompt-ids, row 1: the prompt has 2048 tokens, which leaves no room for a reply in the model's context of 2048 tokens. Shorten it or leave it out.\n",
    );
  });

  it('`default` is the bundled model, as serve loads it, also where the library lists a gone clone by that id', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-default-'));
    try {
      const dataDir = path.join(work, 'data');
      // Another clone's bundled model, loaded (so `default` in library.json), then that clone deleted.
      const gone = path.join(work, 'gone-clone', 'resources', 'models', 'default');
      cpSync(defaultModelDir, gone, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(gone, await loadModelSpec(gone));
      await library.flush();
      expect(library.list()).toMatchObject([{ id: 'default', root: gone }]);
      rmSync(path.join(work, 'gone-clone'), { recursive: true, force: true });

      const args = ['--prompt-ids', '1,2,3', '--max-new-tokens', '4', '--greedy', '--json'];
      const byId = await kvdesk('generate', 'default', '--data-dir', dataDir, ...args);
      expect(byId.code, byId.stderr).toBe(0);
      expect(byId.json.tokenIds).toEqual((await kvdesk('generate', defaultModelDir, ...args)).json.tokenIds);
      const inspected = await kvdesk('inspect', 'default', '--data-dir', dataDir, '--json');
      expect(inspected.code, inspected.stderr).toBe(0);
      expect(inspected.json).toMatchObject({ root: defaultModelDir });
      // With Ollama's default tag, as any library id takes it.
      const tagged = await kvdesk('inspect', 'default:latest', '--data-dir', dataDir, '--json');
      expect(tagged.code, tagged.stderr).toBe(0);
      expect(tagged.json).toMatchObject({ root: defaultModelDir });
      // A folder of your own named `default` that is there keeps the id: the bundled model is `default-2` then.
      const mine = path.join(work, 'mine', 'default');
      const mineData = path.join(work, 'mine-data');
      cpSync(defaultModelDir, mine, { recursive: true });
      const own = await ModelLibrary.open(mineData);
      await own.loaded(mine, await loadModelSpec(mine));
      await own.flush();
      expect((await kvdesk('inspect', 'default', '--data-dir', mineData, '--json')).json).toMatchObject({ root: mine });
      const second = await kvdesk('inspect', 'default-2', '--data-dir', mineData, '--json');
      expect(second.code, second.stderr).toBe(0);
      expect(second.json).toMatchObject({ root: defaultModelDir });
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('--seed -1 is a random seed, as the APIs read seed -1; another negative is refused, saying so', async () => {
    const args = ['generate', defaultModelDir, '--prompt-ids', '1,2,3', '--max-new-tokens', '12', '--temperature', '2'];
    const run = async (seed: string) => {
      const r = await kvdesk(...args, '--seed', seed, '--json');
      expect(r.code, r.stderr).toBe(0);
      return r.json.tokenIds;
    };
    // Two random seeds: two replies (twelve tokens at temperature 2 are not drawn alike twice).
    expect(await run('-1')).not.toEqual(await run('-1'));
    // The same seed, the same tokens; a negative other than -1 is no seed, and the refusal names -1.
    expect(await run('5')).toEqual(await run('5'));
    const bad = await kvdesk(...args, '--seed', '-5');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('kvdesk: --seed must be 0 or more, got -5 (-1: a random seed)');
  });

  it('list shows the library serve keeps; generate takes a library id as it takes a folder', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-library-'));
    try {
      const dataDir = path.join(work, 'data');
      const mine = path.join(work, 'lib-model');
      const gone = path.join(work, 'gone-model');
      cpSync(defaultModelDir, mine, { recursive: true });
      cpSync(defaultModelDir, gone, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(gone, await loadModelSpec(gone));
      await library.loaded(mine, await loadModelSpec(mine), { backend: 'cpu' });
      await library.flush();
      rmSync(gone, { recursive: true, force: true });

      const listed = await kvdesk('list', '--data-dir', dataDir, '--json');
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.json.packages).toMatchObject([
        {
          id: 'lib-model',
          root: mine,
          state: 'ok',
          uploaded: false,
          bpt: 1024,
          contextLength: 2048,
          load: { backend: 'cpu' },
        },
        { id: 'gone-model', root: gone, state: 'missing' },
      ]);
      const text = await kvdesk('list', '--data-dir', dataDir);
      expect(text.stdout).toMatch(/^ID\s+STATE\s+WEIGHTS/);
      expect(text.stdout).toMatch(/\nlib-model\s+ok\s+/);
      expect(text.stdout).toMatch(/\ngone-model\s+missing\s+/);

      const args = ['--prompt-ids', '1,2,3', '--max-new-tokens', '6', '--greedy', '--json'];
      const inspected = await kvdesk('inspect', 'lib-model', '--data-dir', dataDir, '--json');
      expect(inspected.code, inspected.stderr).toBe(0);
      expect(inspected.json).toMatchObject({ root: mine });
      const byId = await kvdesk('generate', 'lib-model', '--data-dir', dataDir, ...args);
      expect(byId.code, byId.stderr).toBe(0);
      expect(byId.json.tokenIds).toEqual((await kvdesk('generate', mine, ...args)).json.tokenIds);
      // Ollama's default tag, as `ollama run NAME:latest` takes it and the server's Ollama routes do: the id itself.
      const tagged = await kvdesk('generate', 'lib-model:latest', '--data-dir', dataDir, ...args);
      expect(tagged.code, tagged.stderr).toBe(0);
      expect(tagged.json.tokenIds).toEqual(byId.json.tokenIds);
      // Another tag is no id: said so, with what kvdesk takes instead.
      const otherTag = await kvdesk('inspect', 'lib-model:7b', '--data-dir', dataDir, '--json');
      expect(otherTag.code).toBe(2);
      expect((otherTag.json.error as Record<string, unknown>).message).toBe(
        `there is no package folder "lib-model:7b", and library ids take no tag: give the id alone ("lib-model"; \`:latest\` may follow it, as Ollama's default tag), or a package pulled from the hub as owner/name:7b or hf.co/owner/name:7b (the library at ${dataDir} has: lib-model; \`kvdesk list\` shows them)`,
      );
      // One whose folder has gone is said so (not "no package of that id… it has: gone-model"), with what to do.
      const missing = await kvdesk('generate', 'gone-model', '--data-dir', dataDir, ...args);
      expect(missing.code).toBe(2);
      expect((missing.json.error as Record<string, unknown>).message).toBe(
        `there is no package folder "gone-model", and the library's package of that id was at ${gone}, which is not there any more: put that folder back, or give another package (\`kvdesk list\` shows the library; Forget on its row in kvdesk serve's window takes it out)`,
      );
      const goneTagged = await kvdesk('generate', 'gone-model:latest', '--data-dir', dataDir, ...args);
      expect(goneTagged.code).toBe(2);
      expect((goneTagged.json.error as Record<string, unknown>).message).toContain(
        `the library's package of that id was at ${gone}, which is not there any more`,
      );
      // An id it has not: the ids it has that load.
      const unknown = await kvdesk('generate', 'no-such-model', '--data-dir', dataDir, ...args);
      expect(unknown.code).toBe(2);
      expect((unknown.json.error as Record<string, unknown>).message).toMatch(
        /no package of that id in the library at .* \(it has: lib-model\)/,
      );
      // A package given (an upload, a download) and never loaded says so.
      const given = path.join(work, 'given-model');
      cpSync(defaultModelDir, given, { recursive: true });
      await library.added(given, await loadModelSpec(given));
      await library.flush();
      const withGiven = await kvdesk('list', '--data-dir', dataDir, '--json');
      expect(withGiven.json.packages).toContainEqual(expect.objectContaining({ id: 'given-model', neverLoaded: true }));
      expect((await kvdesk('list', '--data-dir', dataDir)).stdout).toMatch(/\ngiven-model\s+ok\s+.*\s+never\s+/);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('generate --json works offline on the default model', async () => {
    const r = await kvdesk('generate', defaultModelDir, '--prompt', 'Hello', '--max-new-tokens', '16', '--json');
    expect(r.code, r.stderr).toBe(0);
    const ids = r.json.tokenIds as number[];
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.length).toBeLessThanOrEqual(16);
    expect(typeof r.json.text).toBe('string');
    expect(r.json.promptTokens).toBeGreaterThan(0);
    const timings = r.json.timings as Record<string, number>;
    expect(timings.loadMs).toBeGreaterThan(0);
    expect(timings.tokensPerSecond).toBeGreaterThan(0);
  });

  it('--logprobs N adds each token’s log-probability and N alternatives; penalties and JSON mode reach the model', async () => {
    const args = ['generate', defaultModelDir, '--prompt', 'Hello', '--max-new-tokens', '12', '--greedy', '--json'];
    const r = await kvdesk(...args, '--logprobs', '2');
    expect(r.code, r.stderr).toBe(0);
    const lps = r.json.logprobs as Array<{ id: number; logprob: number; top: Array<{ id: number }> }>;
    expect(lps.map((t) => t.id)).toEqual(r.json.tokenIds);
    for (const t of lps) {
      expect(t.top).toHaveLength(2);
      expect(t.top[0]?.id).toBe(t.id);
    }
    expect((await kvdesk(...args)).json.logprobs).toBeUndefined();
    const textOnly = await kvdesk('generate', defaultModelDir, '--prompt', 'Hello', '--logprobs', '2');
    expect(textOnly.code).toBe(2);
    expect(textOnly.stderr).toContain('--logprobs adds them to the JSON result');
    const penalized = await kvdesk(...args, '--frequency-penalty', '1.5', '--presence-penalty', '1');
    expect(penalized.code, penalized.stderr).toBe(0);
    expect(penalized.json.tokenIds).not.toEqual(r.json.tokenIds);
    const json = await kvdesk(...args, '--response-format', 'json', '--max-new-tokens', '40');
    expect(json.code, json.stderr).toBe(0);
    expect((json.json.text as string).startsWith('{')).toBe(true);
    expect((await kvdesk(...args, '--response-format', 'yaml')).code).toBe(2);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-schema-'));
    const file = path.join(dir, 'schema.json');
    writeFileSync(file, JSON.stringify({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }));
    const structured = await kvdesk(...args, '--json-schema', file, '--max-new-tokens', '40');
    expect(structured.code, structured.stderr).toBe(0);
    expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(structured.json.text as string));
    writeFileSync(file, JSON.stringify({ type: 'object', properties: { ok: { type: 'string', pattern: 'x' } } }));
    const refused = await kvdesk(...args, '--json-schema', file);
    expect(refused.code).toBe(2);
    expect((refused.json.error as Record<string, unknown>).message).toContain('schema.properties.ok.pattern');
    rmSync(dir, { recursive: true, force: true });
    const bad = await kvdesk(...args, '--presence-penalty', '3');
    expect(bad.code).toBe(2);
    expect((bad.json.error as Record<string, unknown>).message).toContain(
      '--presence-penalty must be between -2 and 2, got 3',
    );
  });

  it('--tools with --tool-choice makes the reply a call, in the JSON result and as a line of text', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-tools-'));
    const file = path.join(dir, 'tools.json');
    writeFileSync(
      file,
      JSON.stringify([
        {
          type: 'function',
          function: {
            name: 'lamp',
            parameters: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
          },
        },
      ]),
    );
    const args = ['generate', defaultModelDir, '--chat', '--prompt', 'Light?', '--max-new-tokens', '40', '--greedy'];
    const json = await kvdesk(...args, '--tools', file, '--tool-choice', 'lamp', '--json');
    expect(json.code, json.stderr).toBe(0);
    expect(json.json.finishReason).toBe('tool_calls');
    const calls = json.json.toolCalls as Array<{ name: string; arguments: string }>;
    expect(calls).toHaveLength(1);
    expect(calls[0]?.name).toBe('lamp');
    expect([{ on: true }, { on: false }]).toContainEqual(JSON.parse(calls[0]?.arguments ?? ''));
    const text = await kvdesk(...args, '--tools', file, '--tool-choice', 'required');
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^call lamp\(\{"on":(true|false)\}\)$/m);
    writeFileSync(file, '{"name": "lamp"}');
    const notList = await kvdesk(...args, '--tools', file, '--json');
    expect(notList.code).toBe(2);
    expect((notList.json.error as Record<string, unknown>).message).toContain('--tools: the file must hold');
    rmSync(dir, { recursive: true, force: true });
  });

  it('streams text to stdout and a summary to stderr without --json', () => {
    const r = kvdeskProcess(
      'generate',
      defaultModelDir,
      '--chat',
      '--prompt',
      'Hi',
      '--max-new-tokens',
      '8',
      '--seed',
      '3',
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/tokens, finish/);
    // Several rows: every row's tokens, not the first row's alone.
    const rows = kvdeskProcess(
      'generate',
      defaultModelDir,
      '--prompt',
      'Once upon a time',
      '--rows',
      '3',
      '--max-new-tokens',
      '3',
      '--greedy',
    );
    expect(rows.code, rows.stderr).toBe(0);
    expect(rows.stderr).toMatch(/^kvdesk: 9 tokens in 3 rows \(3 each\), finish length, .* tok\/s per row, /m);
  });

  it('list lines its columns up by terminal cells: a CJK id takes two a character', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-wide-'));
    try {
      const dataDir = path.join(work, 'data');
      // Six characters, twelve cells; the other id is eleven of both.
      const wide = path.join(work, '日本語モデル');
      const plain = path.join(work, 'plain-model');
      cpSync(defaultModelDir, wide, { recursive: true });
      cpSync(defaultModelDir, plain, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(plain, await loadModelSpec(plain));
      await library.loaded(wide, await loadModelSpec(wide));
      await library.flush();
      const r = await kvdesk('list', '--data-dir', dataDir);
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.trimEnd().split('\n');
      // STATE starts at cell 14 on every line: after the widest id (12 cells) and two spaces.
      expect(lines).toEqual([
        expect.stringMatching(/^ID {12}STATE {2}WEIGHTS/),
        expect.stringMatching(/^日本語モデル {2}ok {5}989 KiB/),
        expect.stringMatching(/^plain-model {3}ok {5}989 KiB/),
      ]);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('takes a library id typed decomposed (NFD: as macOS writes names, and a paste from there brings them), as the server does', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-nfd-'));
    try {
      const dataDir = path.join(work, 'data');
      const emoji = path.join(work, 'émoji 👩🏽\u200d💻');
      cpSync(defaultModelDir, emoji, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(emoji, await loadModelSpec(emoji));
      await library.flush();
      const decomposed = 'e\u0301moji';
      expect(decomposed).not.toBe('émoji');
      expect(decomposed.normalize('NFC')).toBe('émoji');
      const inspected = await kvdesk('inspect', decomposed, '--data-dir', dataDir, '--json');
      expect(inspected.code, inspected.stderr).toBe(0);
      expect(inspected.json).toMatchObject({ id: 'émoji', root: emoji });
      // Greedy: a sampled reply may end at its end-of-text token after one (about 1 run in 30).
      const args = ['--data-dir', dataDir, '--prompt-ids', '1,2', '--max-new-tokens', '2', '--greedy', '--json'];
      const generated = await kvdesk('generate', decomposed, ...args);
      expect(generated.code, generated.stderr).toBe(0);
      expect(generated.json.tokenIds).toHaveLength(2);
      // Its folder gone: said so of the id, typed either way.
      rmSync(emoji, { recursive: true, force: true });
      const gone = await kvdesk('generate', decomposed, ...args);
      expect(gone.code).toBe(2);
      expect((gone.json.error as { message: string }).message).toContain(
        `the library's package of that id was at ${emoji}`,
      );
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it("list shows each folder's name as it is written: joiners kept (an emoji of several, Persian's ZWNJ), overrides escaped", async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-names-'));
    try {
      const dataDir = path.join(work, 'data');
      // An emoji of four joined by U+200D; Persian with a zero-width non-joiner (U+200C); a right-to-left override.
      const emoji = path.join(work, 'émoji 👩🏽\u200d💻');
      const persian = path.join(work, 'می\u200cخواهم');
      const spoof = path.join(work, 'evil\u202etxt.onnx');
      const library = await ModelLibrary.open(dataDir);
      for (const dir of [spoof, persian, emoji]) {
        cpSync(defaultModelDir, dir, { recursive: true });
        await library.loaded(dir, await loadModelSpec(dir));
      }
      await library.flush();
      const r = await kvdesk('list', '--data-dir', dataDir);
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.trimEnd().split('\n');
      // The joiners are the names' own: each folder as it is, to be pasted back into a shell.
      expect(lines[1]).toMatch(/^émoji {10}ok {5}989 KiB/);
      expect(lines[1]?.endsWith(` ${emoji}`)).toBe(true);
      expect(lines[2]).toMatch(/^می-خواهم {7}ok {5}989 KiB/);
      expect(lines[2]?.endsWith(` ${persian}`)).toBe(true);
      // An override still shows as its escape: the name is not made to look like what it is not.
      expect(lines[3]).toMatch(/^evil-txt\.onnx {2}ok {5}989 KiB/);
      expect(lines[3]?.endsWith(` ${path.join(work, 'evil\\u202etxt.onnx')}`)).toBe(true);
      // FOLDER starts in the same cell on every row: under its heading.
      for (const line of lines.slice(1)) expect(line.indexOf(work)).toBe(lines[0]?.indexOf('FOLDER'));
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('list says a package is invalid in its row, and why on a line below, the bytes of a file it quotes escaped', async () => {
    const { ModelLibrary } = await import('../../src/main/host/model-library');
    const { loadModelSpec } = await import('../../src/main/packages');
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-invalid-'));
    try {
      const dataDir = path.join(work, 'data');
      const good = path.join(work, 'good-model');
      const bad = path.join(work, 'bad-model');
      cpSync(defaultModelDir, good, { recursive: true });
      cpSync(defaultModelDir, bad, { recursive: true });
      const library = await ModelLibrary.open(dataDir);
      await library.loaded(good, await loadModelSpec(good));
      await library.loaded(bad, await loadModelSpec(bad));
      await library.flush();
      // A file gone bad: gzip's first bytes, a control character, bytes that are not UTF-8.
      writeFileSync(path.join(bad, 'tokenizer.json'), Buffer.from([0x1f, 0x8b, 0x08, 0x64, 0x6b, 0x1c, 0xff, 0x45]));
      const r = await kvdesk('list', '--data-dir', dataDir);
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(4);
      expect(lines[0]).toMatch(/^ID {10}STATE {4}WEIGHTS/);
      expect(lines[1]).toMatch(/^bad-model {3}invalid {2}— /);
      expect(lines[1]).toContain(bad);
      // Under STATE, what is wrong, said as kvdesk says it elsewhere, each character a terminal would not show escaped.
      expect(lines[2]).toMatch(/^ {12}tokenizer\.json is not valid JSON: .*\\x1f\\ufffd\\x08dk\\x1c\\ufffdE/);
      expect(lines[3]).toMatch(/^good-model {2}ok {7}989 KiB/);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
      expect(r.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\ufffd]/);
      // The JSON keeps the message as it is.
      const listed = await kvdesk('list', '--data-dir', dataDir, '--json');
      const rows = listed.json.packages as Array<{ id: string; state: string; error?: { message: string } }>;
      expect(rows.map((p) => [p.id, p.state])).toEqual([
        ['bad-model', 'invalid'],
        ['good-model', 'ok'],
      ]);
      expect(rows[0]?.error?.message).toContain('\u001c');
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('bad arguments exit 2 with a JSON error and no stack trace', () => {
    const r = kvdeskProcess('generate', defaultModelDir, '--prompt-ids', '1,x', '--json');
    expect(r.code).toBe(2);
    expect((r.json.error as Record<string, unknown>).code).toBe('BAD_REQUEST');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('flags that contradict, or values out of range, exit 2 naming the flag, before anything loads', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-flags-'));
    const badTools = path.join(dir, 'tools.json');
    writeFileSync(badTools, JSON.stringify([{ type: 'function', function: { name: 'get weather' } }]));
    const cases: Array<[string[], RegExp]> = [
      [['--system', 'Be brief.'], /--system goes with --chat/],
      [['--greedy', '--temperature', '1.5'], /give --greedy or --temperature, not both/],
      // A value out of range in plain words, with both ends where it has them.
      [['--top-p', '9'], /^--top-p must be between 0 and 1, got 9 \(see kvdesk --help\)$/],
      [['--logprobs', '21'], /^--logprobs must be between 0 and 20, got 21 /],
      [['--repetition-penalty', '0'], /^--repetition-penalty must be more than 0 and at most 10, got 0 /],
      // More than any context holds is clipped, not refused: only its lower end is said.
      [['--max-new-tokens', '0'], /^--max-new-tokens must be 1 or more, got 0 /],
      [['--kv-budget', 'cuda:0=lots'], /Cannot read "lots" as a byte size/],
      [['--device-memory', '8GiB'], /--device-memory 8GiB: give DEVICE=SIZE/],
      [['--backend', 'bogus'], /"bogus" is no backend onnxruntime knows/],
      [['--chat', '--tools', badTools], /^--tools \(tools\[0\]\.name\): letters, digits/],
      // A value forgotten: the next flag is not taken as the value.
      [['--system', '--chat'], /^--system needs a value \(see kvdesk generate --help\)$/],
    ];
    for (const [flags, message] of cases) {
      const r = await kvdesk('generate', defaultModelDir, '--prompt', 'Hello', ...flags, '--json');
      expect(r.code, flags.join(' ')).toBe(2);
      expect((r.json.error as Record<string, unknown>).message, flags.join(' ')).toMatch(message);
    }
    const inspect = await kvdesk('inspect', defaultModelDir, '--backend', 'bogus', '--json');
    expect(inspect.code).toBe(2);
    expect((inspect.json.error as Record<string, unknown>).message).toMatch(/"bogus" is no backend/);
    const unknown = await kvdesk('inspect', defaultModelDir, '--bogus', '--json');
    expect(unknown.code).toBe(2);
    expect((unknown.json.error as Record<string, unknown>).code).toBe('BAD_REQUEST');
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes a value that starts with "-", a per-device KV budget, and more new tokens than any context (clipped)', async () => {
    const base = ['generate', defaultModelDir, '--greedy', '--max-new-tokens', '4', '--json'];
    const r = await kvdesk(...base, '--prompt', '- a list', '--frequency-penalty', '-0.5', '--presence-penalty', '-1');
    expect(r.code, r.stderr).toBe(0);
    const same = await kvdesk(...base, '--prompt=- a list', '--frequency-penalty=-0.5', '--presence-penalty=-1');
    expect(r.json.tokenIds).toEqual(same.json.tokenIds);
    expect(r.json.promptTokens).toBe(same.json.promptTokens);
    // The CPU's budget as a device key, another device's memory beside it: the request runs under the CPU's.
    const devices = await kvdesk(
      'generate',
      defaultModelDir,
      '--prompt',
      'Hello',
      '--max-new-tokens',
      '100',
      '--greedy',
      '--kv-budget',
      'cpu=40KiB',
      '--device-memory',
      'webgpu:0=8GiB',
      '--json',
    );
    expect(devices.code, devices.stderr).toBe(0);
    expect((devices.json.budgetCap as { availableBytes: number }).availableBytes).toBe(40 * 1024);
    // Clipped as the HTTP API clips max_tokens, and the note names the number asked, not the ceiling it passed.
    const huge = await kvdesk('generate', defaultModelDir, '--prompt', 'x', '--greedy', '--max-new-tokens', '1e9');
    expect(huge.code, huge.stderr).toBe(0);
    expect(huge.stderr).toMatch(/max new tokens clipped from 1000000000 to 2047 by the context window \(2048 tokens\)/);
    const hugeJson = await kvdesk(
      'generate',
      defaultModelDir,
      '--prompt',
      'x',
      '--greedy',
      '--max-new-tokens',
      '1e9',
      '--json',
    );
    expect(hugeJson.json.clipped).toEqual({ requestedMaxTokens: 1e9, clippedMaxTokens: 2047, contextLength: 2048 });
  });

  it('--prefill-chunk below 1 exits 2 naming the flag', async () => {
    const r = await kvdesk('generate', defaultModelDir, '--prompt', 'Hello', '--prefill-chunk', '0', '--json');
    expect(r.code).toBe(2);
    expect((r.json.error as Record<string, unknown>).message).toMatch(/--prefill-chunk expects a whole number ≥ 1/);
  });

  it('--lookup and --prediction-file: drafts reach the JSON and the summary line, 0 turns them off with the same tokens, 17 exits 2', async () => {
    // The default model's greedy reply to this prompt repeats a few pairs of its own tokens: lookup drafts there.
    const args = ['generate', defaultModelDir, '--prompt', '1 2 3 4 5 6 7 8 9 10 11 12', '--greedy'];
    const on = await kvdesk(...args, '--max-new-tokens', '96', '--json');
    expect(on.code, on.stderr).toBe(0);
    const lookup = on.json.lookup as { drafted: number; accepted: number };
    expect(lookup.drafted).toBeGreaterThan(0);
    expect(lookup.accepted).toBeLessThanOrEqual(lookup.drafted);
    const off = await kvdesk(...args, '--max-new-tokens', '96', '--lookup', '0', '--json');
    expect(off.code, off.stderr).toBe(0);
    expect(off.json.lookup).toBeUndefined();
    expect(off.json.tokenIds).toEqual(on.json.tokenIds);
    const text = await kvdesk(...args, '--max-new-tokens', '96');
    expect(text.stderr).toMatch(/lookup took \d+ of \d+ drafted tokens/);
    // A predicted reply (the reply itself): the same tokens, most of them drafted from it.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-prediction-'));
    const file = path.join(dir, 'expected.txt');
    writeFileSync(file, on.json.text as string);
    const predicted = await kvdesk(...args, '--max-new-tokens', '96', '--prediction-file', file, '--json');
    expect(predicted.json.tokenIds).toEqual(on.json.tokenIds);
    expect((predicted.json.lookup as { accepted: number }).accepted).toBeGreaterThan(lookup.accepted + 40);
    const missing = await kvdesk(...args, '--prediction-file', path.join(dir, 'none.txt'), '--json');
    expect(missing.code).toBe(2);
    expect((missing.json.error as Record<string, unknown>).message).toMatch(/--prediction-file: cannot read/);
    // A prediction with lookup decoding off would do nothing: said, not ignored.
    const unused = await kvdesk(...args, '--prediction-file', file, '--lookup', '0', '--json');
    expect(unused.code).toBe(2);
    expect((unused.json.error as Record<string, unknown>).message).toMatch(/--prediction-file .*--lookup 0/);
    // A model whose graph cannot check drafts (a static KV cache): the reply is the model's, and the prediction's
    // fate is said on stderr and in the JSON.
    const twins = writeTwinPackages(dir, { layers: 2, hidden: 32, heads: 2, capacity: 256, seed: 7 });
    const fixed = ['generate', twins.staticDir, '--prompt', '1 2 3', '--greedy', '--max-new-tokens', '8'];
    const own = await kvdesk(...fixed, '--json');
    writeFileSync(file, own.json.text as string);
    const staticUnused = await kvdesk(...fixed, '--prediction-file', file, '--json');
    expect(staticUnused.code, staticUnused.stderr).toBe(0);
    expect(staticUnused.json.tokenIds).toEqual(own.json.tokenIds);
    expect(staticUnused.json.predictionUnused).toEqual({
      reason: 'lookup_unavailable',
      detail: expect.stringMatching(/static/),
    });
    expect(staticUnused.stderr).toMatch(
      /--prediction-file was not drafted from: lookup decoding cannot run on this model/,
    );
    rmSync(dir, { recursive: true, force: true });
    const bad = await kvdesk(...args, '--lookup', '17', '--json');
    expect(bad.code).toBe(2);
    expect((bad.json.error as Record<string, unknown>).message).toMatch(
      /--lookup expects a whole number from 0 \(off\) to 16/,
    );
  });

  it('a folder that is not a package exits 2 naming the problem', async () => {
    const r = await kvdesk('inspect', path.join(repoRoot, 'src'), '--json');
    expect(r.code).toBe(2);
    expect((r.json.error as Record<string, unknown>).code).toBe('PACKAGE_INVALID');
  });
});

/**
 * A run whose stdout's reader goes away: at once (`| true`), or after the first text (`| head -c 10`).
 * Its exit code and stderr.
 */
async function kvdeskStdoutClosed(
  args: string[],
  opts: { afterFirstText?: boolean; input?: string } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  const child = spawn(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args], {
    cwd: repoRoot,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += String(d);
  });
  if (opts.afterFirstText) child.stdout.once('data', () => child.stdout.destroy());
  else child.stdout.destroy();
  child.stdin.end(opts.input ?? '');
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  return { code, signal, stderr };
}

/** A port nothing listens on: the hub there cannot be reached. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('the CLI around its commands: a closed stdout, help, versions, stdin, the hub unreachable', () => {
  const noCrash = (stderr: string) => {
    expect(stderr).not.toMatch(/EPIPE|Unhandled|internal error|\n\s+at /);
  };

  it('a reader that goes away (| head) stops the reply: no stack trace, no summary, exit 141', async () => {
    // The slow model's reply runs for seconds: had it not been stopped, the summary line would follow.
    const r = await kvdeskStdoutClosed(
      ['generate', slowModel(), '--prompt', 'Tell me a long story.', '--greedy', '--max-new-tokens', '2000'],
      { afterFirstText: true },
    );
    noCrash(r.stderr);
    expect(r.stderr).not.toMatch(/tokens, finish/);
    expect(r.code, r.stderr).toBe(141);
    // Commands that print once: the same quiet end.
    for (const args of [
      ['inspect', defaultModelDir],
      // (An empty library's sentence goes to stderr: its JSON is what goes to stdout.)
      ['list', '--json', '--data-dir', path.join(repoRoot, 'no-such-dir')],
    ]) {
      const quiet = await kvdeskStdoutClosed(args);
      noCrash(quiet.stderr);
      expect(quiet.code, `${args.join(' ')}: ${quiet.stderr}`).toBe(141);
    }
  }, 90_000);

  it("stderr's reader gone too is no crash; output that cannot be written (a full disk) is said, exit 1", async () => {
    // `2>&1 | true`: the refusal's line goes nowhere, and the exit code is still the refusal's.
    const quiet = spawn(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'generate', '/nonexistent', '--prompt', 'x'],
      {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    quiet.stdout.destroy();
    quiet.stderr.destroy();
    const [code] = (await once(quiet, 'close')) as [number | null];
    expect(code).toBe(2);
    if (existsSync('/dev/full')) {
      const full = openSync('/dev/full', 'w');
      try {
        const r = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), 'inspect', defaultModelDir], {
          cwd: repoRoot,
          stdio: ['ignore', full, 'pipe'],
          encoding: 'utf8',
        });
        expect(r.stderr).toContain('kvdesk: could not write the output: ENOSPC');
        noCrash(r.stderr);
        expect(r.status).toBe(1);
      } finally {
        closeSync(full);
      }
    }
  }, 60_000);

  it('each command answers --help and -h with its usage and every flag it takes; kvdesk help COMMAND too', async () => {
    const { CHAT_OPTIONS } = await import('../../src/cli/chat');
    const { PULL_OPTIONS, SEARCH_OPTIONS } = await import('../../src/cli/pull');
    // In this process (help loads nothing); the real binary once, below.
    const commands: Array<[string, Record<string, unknown>]> = [
      ['generate', GENERATE_OPTIONS],
      ['chat', CHAT_OPTIONS],
      ['inspect', INSPECT_OPTIONS],
      ['list', LIST_OPTIONS],
      ['pull', PULL_OPTIONS],
      ['search', SEARCH_OPTIONS],
    ];
    for (const [command, options] of commands) {
      const r = await kvdesk(command, '--help');
      expect(r.code, `${command}: ${r.stderr}`).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^Usage:\\n  kvdesk ${command} `));
      // Each flag once, on a line of its own description (a line of several sampling flags counts for each).
      for (const flag of Object.keys(options)) {
        expect(r.stdout, `${command} --help: --${flag}`).toMatch(new RegExp(`\\n  (--[a-z-]+ [^\\n]*)?--${flag}\\b`));
      }
      expect((await kvdesk(command, '-h')).stdout, `${command} -h`).toBe(r.stdout);
    }
    // Generate's lines, as the top-level help has them: one source.
    const top = (await kvdesk('--help')).stdout;
    const generate = kvdeskProcess('generate', '--help');
    expect(generate.code).toBe(0);
    expect(generate.stdout).toBe((await kvdesk('generate', '--help')).stdout);
    for (const line of generate.stdout.split('\n').filter((l) => l.startsWith('  --'))) expect(top).toContain(line);
    expect((await kvdesk('help', 'generate')).stdout).toBe(generate.stdout);
    // A flag's value is not a request for help; serve's help still works.
    expect((await kvdesk('generate', defaultModelDir, '--prompt', '-h', '--max-new-tokens', '1')).code).toBe(0);
    const serve = await kvdesk('serve', '--help');
    expect(serve.code).toBe(0);
    expect(serve.stdout).toContain('--first-use-ttl TIME');
  }, 90_000);

  it('an unknown flag is named with its command, with the flag meant when one is a typo away', async () => {
    const typo = await kvdesk('generate', defaultModelDir, '--promt', 'hi');
    expect(typo.code).toBe(2);
    expect(typo.stderr).toBe(
      'kvdesk: unknown option --promt for kvdesk generate: did you mean --prompt? (see kvdesk generate --help)\n',
    );
    const two = await kvdesk('chat', defaultModelDir, '--top-x', '3');
    expect(two.stderr).toContain('unknown option --top-x for kvdesk chat: did you mean --top-k or --top-p?');
    const far = await kvdesk('list', '--colourful');
    expect(far.code).toBe(2);
    expect(far.stderr).toBe('kvdesk: unknown option --colourful for kvdesk list (see kvdesk list --help)\n');
    const json = await kvdesk('inspect', defaultModelDir, '--jsn', '--json');
    expect(json.json.error).toMatchObject({ code: 'BAD_REQUEST', flag: '--jsn' });
    expect((json.json.error as { message: string }).message).toContain('did you mean --json?');
    for (const r of [typo, two, far]) {
      expect(r.stderr.split("'").length % 2, r.stderr).toBe(1);
      expect(r.stderr.split('"').length % 2, r.stderr).toBe(1);
    }
    // Other tools' names, a flag without its value, a command typed wrong: one line each, saying what to do.
    expect(await kvdesk('generate', defaultModelDir, '--max-tokens', '3')).toMatchObject({
      code: 2,
      stdout: '',
      stderr:
        'kvdesk: unknown option --max-tokens for kvdesk generate: did you mean --max-new-tokens? (see kvdesk generate --help)\n',
    });
    expect(await kvdesk('chat', defaultModelDir, '--temperature')).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'kvdesk: --temperature needs a value (see kvdesk chat --help)\n',
    });
    const command = await kvdesk('genrate', defaultModelDir);
    expect(command.code).toBe(2);
    expect(command.stderr).toMatch(
      /^kvdesk: unknown command "genrate": did you mean generate\? \(commands: inspect, .*\)\n$/,
    );
  });

  it('habits from Ollama and llama.cpp (a prompt as an argument, `run`, `-p`, `-m`, `--repeat-penalty`) get what to use instead', async () => {
    /** What a refused command says (exit 2). */
    const refused = async (...args: string[]) => {
      const r = await kvdesk(...args);
      expect(r.code, args.join(' ')).toBe(2);
      return r.stderr;
    };
    const M = defaultModelDir;
    // A prompt given as ollama run takes it.
    expect(await refused('generate', M, 'why is the sky blue?')).toBe(
      'kvdesk: generate takes exactly one package path or library id, got 2 arguments; give the prompt with --prompt: `kvdesk generate M --prompt "…"` (or on stdin: `echo "…" | kvdesk generate M`) (see kvdesk --help)\n',
    );
    // Ollama's commands.
    const commands = 'commands: inspect, generate, chat, list, pull, search, serve, version, help; see kvdesk --help';
    expect(await refused('run', M)).toBe(
      `kvdesk: unknown command "run": did you mean chat? \`kvdesk chat M\` talks with a model as \`ollama run M\` does; \`kvdesk generate M --prompt "…"\` gives one reply (${commands})\n`,
    );
    expect(await refused('show', M)).toBe(`kvdesk: unknown command "show": did you mean inspect? (${commands})\n`);
    expect(await refused('rm', 'default')).toBe(
      `kvdesk: unknown command "rm": the library forgets a package with Forget on its row in kvdesk serve's window, or DELETE /api/delete to a running kvdesk serve (a folder of yours stays where it is; kvdesk's copy of an upload is deleted) (${commands})\n`,
    );
    // llama.cpp's flags (and Ollama's parameters), with the command's own flag, or what to do where it has none.
    const unknown = (flag: string, command: string, hint: string) =>
      `kvdesk: unknown option ${flag} for kvdesk ${command}: ${hint} (see kvdesk ${command} --help)\n`;
    for (const [args, flag, hint] of [
      [['generate', M, '-p', 'hi'], '-p', 'did you mean --prompt?'],
      [['generate', M, '-s', '1'], '-s', 'did you mean --seed?'],
      [['generate', M, '-t', '2'], '-t', 'did you mean --threads?'],
      [['generate', M, '--repeat-penalty', '1.1'], '--repeat-penalty', 'did you mean --repetition-penalty?'],
      [['chat', M, '--repeat_last_n', '64'], '--repeat_last_n', 'did you mean --repetition-window?'],
      [
        ['generate', '-m', M],
        '-m',
        "the package is the command's argument, not a flag: kvdesk generate PACKAGE (a folder, or a library id)",
      ],
      [
        ['chat', M, '-p', 'hi'],
        '-p',
        'chat takes its turns as you type them, or from a pipe (`echo "…" | kvdesk chat M`); for one reply to a prompt use `kvdesk generate M --chat --prompt "…"`',
      ],
      [['serve', '-p', '8080'], '-p', 'did you mean --port?'],
      [['serve', '-m', M], '-m', 'did you mean --model?'],
    ] as const) {
      expect(await refused(...args), args.join(' ')).toBe(unknown(flag, args[0], hint));
    }
    expect(await refused('list', '--constructor')).toBe(
      'kvdesk: unknown option --constructor for kvdesk list (see kvdesk list --help)\n',
    );
    // A KV budget that rounds down to no byte is refused, not taken as "0 B".
    expect(await refused('generate', M, '--prompt', 'x', '--kv-budget', '0.5')).toBe(
      'kvdesk: --kv-budget: "0.5" is 0 bytes (a size rounds down to whole bytes); give 1 byte or more, e.g. 512MiB or 2GiB\n',
    );
    expect(await refused('chat', M, '--kv-budget', 'cuda:0=0')).toBe(
      'kvdesk: --kv-budget: "0" is 0 bytes; give 1 byte or more, e.g. 512MiB or 2GiB\n',
    );
  });

  it('help and refusals name the flags a person typed, and say what to do', async () => {
    // chat's --system is its own (chat has no --chat); --rows says its limit.
    const chatHelp = (await kvdesk('chat', '--help')).stdout;
    expect(chatHelp).toContain('\n  --system TEXT            the system prompt (also /set system)\n');
    expect(chatHelp).not.toContain('with --chat');
    expect((await kvdesk('generate', '--help')).stdout).toContain('one batched request (1 to 64)');
    // kvdesk alone: the usage is an error's, on stderr.
    const bare = await kvdesk();
    expect(bare.code).toBe(2);
    expect(bare.stdout).toBe('');
    expect(bare.stderr).toMatch(/^kvdesk — .*\n\nUsage:\n/);
    expect((await kvdesk('--help')).stdout).toBe(bare.stderr);
    const tools = path.join(mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-tools-')), 'tools.json');
    writeFileSync(tools, JSON.stringify([{ type: 'function', function: { name: 'get_weather', parameters: {} } }]));
    const gen = ['generate', defaultModelDir, '--chat', '--prompt', 'x'];
    for (const [args, text] of [
      [[...gen, '--tool-choice', 'nope'], '--tool-choice names the tool "nope", but no --tools FILE lists any tools'],
      [
        [...gen, '--tool-choice', 'required'],
        '--tool-choice asks for a tool call, but no --tools FILE lists any tools',
      ],
      [
        [...gen, '--tools', tools, '--tool-choice', 'nope'],
        `--tool-choice names the tool "nope", which ${tools} does not list (it has: get_weather); or give auto, none or required`,
      ],
      [[...gen, '--stop', ''], '--stop expects the text to stop at, got an empty one'],
      [
        ['generate', defaultModelDir, '--rows', '2', '--prompt', 'x', '--prompt', 'y'],
        '--rows copies one prompt 2 times: give a single --prompt with it, or several --prompt flags alone (a row each)',
      ],
      [
        ['chat', defaultModelDir, 'some prompt'],
        'chat takes exactly one package path or library id, got 2 arguments; for one reply to a prompt use `kvdesk generate M --chat --prompt "…"`, or pipe the turns in: `echo "…" | kvdesk chat M`',
      ],
    ] as const) {
      const r = await kvdesk(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toBe(`kvdesk: ${text} (see kvdesk --help)\n`);
    }
    rmSync(path.dirname(tools), { recursive: true, force: true });
  });

  it('a number flag given an empty value (`--temperature "$T"` with T unset) is refused naming it, not read as 0', async () => {
    const left = 'got an empty value: give one, or leave the flag out (see kvdesk --help)';
    for (const [command, args, text] of [
      ['generate', ['--temperature', ''], `--temperature expects a number, ${left}`],
      ['generate', ['--seed', ''], `--seed expects an integer, ${left}`],
      ['generate', ['--top-k', ' '], `--top-k expects an integer, ${left}`],
      ['generate', ['--max-new-tokens='], `--max-new-tokens expects an integer, ${left}`],
      ['generate', ['--threads='], `--threads expects an integer, ${left}`],
      ['generate', ['--lookup', ''], `--lookup expects a whole number from 0 (off) to 16, ${left}`],
      ['chat', ['--temperature', ''], `--temperature expects a number, ${left}`],
    ] as const) {
      const prompt = command === 'generate' ? ['--prompt', 'x'] : [];
      const r = await kvdesk(command, defaultModelDir, ...prompt, ...args);
      expect(r, `${command} ${args.join(' ')}`).toMatchObject({ code: 2, stdout: '', stderr: `kvdesk: ${text}\n` });
    }
  });

  it("onnxruntime's own log prints no warning of a $HOME it cannot write (a service account): not in generate, not in the backend probe", () => {
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-home-'));
    try {
      // A home that is a file: nothing can be made under it, whoever runs the test (root too).
      const home = path.join(work, 'home');
      writeFileSync(home, '');
      const env = { ...process.env, HOME: home, USERPROFILE: home, NO_COLOR: '1' };
      // Run in the temporary folder: onnxruntime keeps its telemetry session (`:memory:.ses`) in the working directory
      // when it cannot under $HOME.
      const r = kvdeskWith(
        { env, cwd: work },
        'generate',
        defaultModelDir,
        '--prompt',
        'Hi',
        '--greedy',
        '--max-new-tokens',
        '2',
        '--data-dir',
        path.join(work, 'data'),
      );
      expect(r.code, r.stderr).toBe(0);
      // The summary line alone: no `[W:onnxruntime:…] Failed to persist telemetry device ID`, coloured or not.
      expect(r.stderr).toMatch(/^kvdesk: 2 tokens, finish length, [^\n]*\n$/);
      // The probe process (inspect's, the window's): what it prints is the reason given when a provider crashes it.
      const probe = spawnSync(
        process.execPath,
        [
          '--import',
          pathToFileURL(require.resolve('tsx')).href,
          path.join(repoRoot, 'src/main/backends/probe-process.ts'),
          '--skip=',
        ],
        { cwd: work, encoding: 'utf8', timeout: 60_000, env },
      );
      expect(probe.status, probe.stderr).toBe(0);
      expect(JSON.parse(probe.stdout.trim().split('\n').at(-1) as string)).toMatchObject({ type: 'report' });
      // (A GPU runtime may say what it could not load: WebGPU's Vulkan, on a machine without it.)
      expect(probe.stderr).not.toMatch(/onnxruntime|telemetry/);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 60_000);

  it("leaves nothing of onnxruntime's telemetry in $HOME or the working folder (a device id, an event queue)", () => {
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-telemetry-'));
    try {
      const home = path.join(work, 'home');
      const cwd = path.join(work, 'cwd');
      mkdirSync(home);
      mkdirSync(cwd);
      const { ORT_DISABLE_TELEMETRY: _own, ...rest } = process.env;
      const r = kvdeskWith(
        { env: { ...rest, HOME: home, USERPROFILE: home }, cwd },
        'generate',
        defaultModelDir,
        '--prompt',
        'Hi',
        '--max-new-tokens',
        '2',
        '--data-dir',
        path.join(work, 'data'),
      );
      expect(r.code, r.stderr).toBe(0);
      // (It kept ~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}.)
      expect(readdirSync(home)).toEqual([]);
      expect(readdirSync(cwd)).toEqual([]);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 60_000);

  it('--version, -v and version print kvdesk’s version and onnxruntime’s', async () => {
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string };
    const ort = JSON.parse(readFileSync(path.join(repoRoot, 'node_modules/onnxruntime-node/package.json'), 'utf8')) as {
      version: string;
    };
    const versions = `kvdesk ${pkg.version}\nonnxruntime-node ${ort.version}\n`;
    // The binary once; the other spellings through main() (the same switch case, two processes less).
    expect(kvdeskProcess('--version')).toMatchObject({ code: 0, stdout: versions });
    for (const flag of ['-v', 'version']) {
      const r = await kvdesk(flag);
      expect(r.code, flag).toBe(0);
      expect(r.stdout, flag).toBe(versions);
    }
  });

  it('generate reads its prompt from stdin: --prompt -, or no prompt flag with stdin from a pipe; empty stdin is exit 2', async () => {
    const args = ['generate', defaultModelDir, '--greedy', '--max-new-tokens', '6', '--json'];
    // The reply to the prompt given as a flag, the reference (stdin plays no part in it: through main()).
    const flag = await kvdesk(...args, '--prompt', 'Tell me about rivers.');
    expect(flag.code, flag.stderr).toBe(0);
    // The last line break is dropped, as `$(cat FILE)` drops it.
    const piped = kvdeskWith({ input: 'Tell me about rivers.\n' }, ...args);
    expect(piped.code, piped.stderr).toBe(0);
    expect(piped.json.tokenIds).toEqual(flag.json.tokenIds);
    expect(piped.json.promptTokens).toBe(flag.json.promptTokens);
    const dash = kvdeskWith({ input: 'Tell me about rivers.' }, ...args, '--prompt', '-');
    expect(dash.json.tokenIds).toEqual(flag.json.tokenIds);
    // Beside another prompt: a batch of two rows, stdin's the second.
    const batch = kvdeskWith({ input: 'Tell me about rivers.\n' }, ...args, '--prompt', 'Hi', '--prompt', '-');
    expect((batch.json.rows as Array<{ tokenIds: number[] }>)[1]?.tokenIds).toEqual(flag.json.tokenIds);
    for (const extra of [[], ['--prompt', '-']]) {
      const empty = kvdeskWith({ input: '' }, ...args, ...extra);
      expect(empty.code, extra.join(' ')).toBe(2);
      expect((empty.json.error as { message: string }).message).toMatch(/^stdin is empty, and it is the prompt/);
    }
    // Refused from the flags alone, before stdin is read: through main().
    const twice = await kvdesk(...args, '--prompt', '-', '--prompt', '-');
    expect(twice.code).toBe(2);
    expect((twice.json.error as { message: string }).message).toMatch(/--prompt - reads stdin once/);
  }, 60_000);

  it('generate reads stdin and the files its flags name as UTF-8, its BOM dropped, or UTF-16 by its BOM; other bytes are refused saying where', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-encodings-'));
    try {
      const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
      const utf16le = (s: string) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(s, 'utf16le')]);
      const utf16be = (s: string) => Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from(s, 'utf16le').swap16()]);
      const write = (name: string, bytes: Buffer) => {
        writeFileSync(path.join(dir, name), bytes);
        return path.join(dir, name);
      };
      const schema = JSON.stringify({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] });
      const prompt = 'Tell me about rivers.\n';
      const args = ['generate', defaultModelDir, '--greedy', '--max-new-tokens', '12', '--json'];
      const plain = await kvdeskFed(
        Buffer.from(prompt),
        ...args,
        '--json-schema',
        write('plain.json', Buffer.from(schema)),
      );
      expect(plain.code, plain.stderr).toBe(0);
      // Notepad's and PowerShell's UTF-8: the mark is no part of the prompt (it was 3 tokens more) or of the JSON.
      const marked = await kvdeskFed(
        Buffer.concat([BOM, Buffer.from(prompt)]),
        ...args,
        '--json-schema',
        write('bom.json', Buffer.concat([BOM, Buffer.from(schema)])),
      );
      expect(marked.code, marked.stderr).toBe(0);
      expect(marked.json.promptTokens).toBe(plain.json.promptTokens);
      expect(marked.json.tokenIds).toEqual(plain.json.tokenIds);
      // PowerShell 5's `>`: UTF-16 LE; and BE. The same text, not text laced with NULs.
      const wide = await kvdeskFed(utf16le(prompt), ...args, '--json-schema', write('be.json', utf16be(schema)));
      expect(wide.code, wide.stderr).toBe(0);
      expect(wide.json.promptTokens).toBe(plain.json.promptTokens);
      expect(wide.json.tokenIds).toEqual(plain.json.tokenIds);
      // Latin-1 ("café"): refused where it goes wrong, not read as U+FFFD; before anything loads.
      const latin1 = Buffer.from('{"x": "caf\xe9"}', 'latin1');
      const bad = await kvdeskFed(latin1, ...args);
      expect(bad.code).toBe(2);
      expect((bad.json.error as { message: string }).message).toBe(
        'stdin is not UTF-8 text (byte 0xe9 at offset 10): save it as UTF-8',
      );
      const file = write('latin1.txt', latin1);
      for (const flag of ['--json-schema', '--tools', '--prediction-file', '--chat-template']) {
        const r = await kvdesk(...args, '--prompt', 'x', flag, file);
        expect(r.code, flag).toBe(2);
        expect((r.json.error as { message: string }).message, flag).toBe(
          `${flag}: ${file} is not UTF-8 text (byte 0xe9 at offset 10): save it as UTF-8`,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--prompt-ids repeated is a batch, a row each, as --prompt repeated is (only the last was kept)', async () => {
    const args = ['generate', defaultModelDir, '--greedy', '--max-new-tokens', '4', '--json'];
    const one = await kvdesk(...args, '--prompt-ids', '5,6,7');
    const two = await kvdesk(...args, '--prompt-ids', '9');
    expect(one.code, one.stderr).toBe(0);
    const batch = await kvdesk(...args, '--prompt-ids', '5,6,7', '--prompt-ids', '9');
    expect(batch.code, batch.stderr).toBe(0);
    expect((batch.json.rows as Array<{ tokenIds: number[] }>).map((r) => r.tokenIds)).toEqual([
      one.json.tokenIds,
      two.json.tokenIds,
    ]);
    // Without --json: a line per row, as for several --prompt.
    const text = await kvdesk(
      'generate',
      defaultModelDir,
      '--greedy',
      '--max-new-tokens',
      '2',
      '--prompt-ids',
      '5,6,7',
      '--prompt-ids',
      '9',
    );
    expect(text.stdout).toMatch(/^\[row 0\] .*\n\[row 1\] .*\n$/);
    expect(text.stderr).toContain('4 tokens in 2 rows (2 each)');
    // A row the model cannot take is named by its flag and row; --rows copies one prompt, not several.
    const bad = await kvdesk(
      'generate',
      defaultModelDir,
      '--max-new-tokens',
      '1',
      '--prompt-ids',
      '5',
      '--prompt-ids',
      '99999',
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(
      /^kvdesk: --prompt-ids, row 1: Prompt id 99999 at position 0 is outside the model's vocabulary/,
    );
    const rows = await kvdesk('generate', defaultModelDir, '--rows', '2', '--prompt-ids', '5', '--prompt-ids', '6');
    expect(rows.code).toBe(2);
    expect(rows.stderr).toBe(
      'kvdesk: --rows copies one prompt 2 times: give a single --prompt-ids with it, or several --prompt-ids flags alone (a row each) (see kvdesk --help)\n',
    );
  }, 60_000);

  it('a package whose weights are damaged (scores that are not numbers) fails as the package, not as a reply of token 0', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-nan-'));
    try {
      const pkg = path.join(root, 'damaged');
      cpSync(defaultModelDir, pkg, { recursive: true });
      // Eight 0xFF bytes in a weight: a float that is not a number, which every score then becomes.
      const fd = openSync(path.join(pkg, 'onnx', 'model.onnx'), 'r+');
      try {
        writeSync(fd, Buffer.alloc(8, 0xff), 0, 8, 600_000);
      } finally {
        closeSync(fd);
      }
      const r = await kvdesk(
        'generate',
        pkg,
        '--prompt',
        'hi',
        '--max-new-tokens',
        '3',
        '--greedy',
        '--json',
        '--data-dir',
        root,
      );
      expect(r.code, r.stdout).toBe(2);
      expect(r.json.error).toMatchObject({ code: 'PACKAGE_INVALID' });
      expect((r.json.error as { message: string }).message).toMatch(/not numbers \(NaN\).*replace the package/);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 60_000);

  it('generate with stdin a pipe that stays silent says it waits for the prompt there, and goes on once it comes', async () => {
    const child = spawn(
      process.execPath,
      [
        path.join(repoRoot, 'bin/kvdesk.cjs'),
        'generate',
        defaultModelDir,
        '--greedy',
        '--max-new-tokens',
        '4',
        '--json',
      ],
      { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += String(d);
    });
    const waiting = new Promise<void>((resolve) => {
      child.stderr.on('data', (d) => {
        stderr += String(d);
        if (stderr.includes('waiting for the prompt on stdin')) resolve();
      });
    });
    await waiting;
    expect(stderr).toContain('kvdesk: waiting for the prompt on stdin (no --prompt given); end it with Ctrl+D');
    expect(stdout).toBe('');
    child.stdin.end('Tell me about rivers.\n');
    const [code] = (await once(child, 'close')) as [number | null];
    expect(code, stderr).toBe(0);
    expect((JSON.parse(stdout.trim()) as { tokenIds: number[] }).tokenIds).toHaveLength(4);
  }, 60_000);

  // A terminal: `script` gives the CLI one, as a person's shell does.
  const script = spawnSync('script', ['--version'], { encoding: 'utf8' });
  it.skipIf(script.status !== 0)('with stdin a terminal and no prompt, generate says how to give one', () => {
    const command = [process.execPath, path.join(repoRoot, 'bin/kvdesk.cjs'), 'generate', defaultModelDir]
      .map((a) => `'${a}'`)
      .join(' ');
    const r = spawnSync('script', ['-qec', command, '/dev/null'], { cwd: repoRoot, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stdout).toBe(2);
    expect(r.stdout).toContain('give --prompt TEXT or --prompt-ids 1,2,3, or the prompt on stdin');
  });

  it('search and pull with the hub out of reach exit 4, the code for a hub or download that failed', async () => {
    const env = { ...process.env, HF_ENDPOINT: `http://127.0.0.1:${await closedPort()}`, HF_TOKEN: '' };
    const data = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-no-hub-'));
    try {
      for (const args of [
        ['search', 'qwen3'],
        ['pull', 'onnx-community/tiny-chat', '--data-dir', data],
        ['pull', 'onnx-community/tiny-chat', '--list'],
      ]) {
        const r = kvdeskWith({ env }, ...args);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(4);
        expect(r.stderr).toMatch(
          /^kvdesk: could not reach http:\/\/127\.0\.0\.1:\d+: fetch failed \(ECONNREFUSED.*\)\. Check the network \(or HF_ENDPOINT\)/,
        );
      }
      const json = kvdeskWith({ env }, 'search', 'qwen3', '--json');
      expect(json.code).toBe(4);
      expect((json.json.error as { code: string }).code).toBe('DOWNLOAD_FAILED');
    } finally {
      rmSync(data, { recursive: true, force: true });
    }
  }, 60_000);

  it('search and pull with a hub that takes the connection and never answers fail within the timeout, saying so', async () => {
    // Listening, never answering: the kernel takes the connection while this process waits on the CLI.
    const silent = net.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const at = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
    const env = { ...process.env, HF_ENDPOINT: at, HF_TOKEN: '', KVDESK_HUB_TIMEOUT_MS: '500' };
    try {
      for (const args of [
        ['search', 'qwen3'],
        ['pull', 'onnx-community/tiny-chat', '--list'],
      ]) {
        const started = Date.now();
        const r = kvdeskWith({ env }, ...args);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(4);
        expect(r.stderr).toBe(
          `kvdesk: the hub at ${at} accepted the connection but did not answer within 500 ms: try again later, or check HF_ENDPOINT.\n`,
        );
        expect(Date.now() - started).toBeLessThan(20_000);
      }
    } finally {
      silent.close();
    }
  }, 60_000);

  it('an HF_ENDPOINT that is no address is bad input naming it (exit 2), not an internal error', () => {
    for (const HF_ENDPOINT of ['notaurl', 'huggingface.co']) {
      const r = kvdeskWith({ env: { ...process.env, HF_ENDPOINT } }, 'pull', 'a/b', '--json');
      expect(r.code, r.stderr).toBe(2);
      expect(r.json.error).toMatchObject({
        code: 'BAD_REQUEST',
        message: `HF_ENDPOINT "${HF_ENDPOINT}" is not an http(s) address: set it to the hub or a mirror of its API, e.g. https://huggingface.co or https://hf-mirror.com (or unset it).`,
      });
      const search = kvdeskWith({ env: { ...process.env, HF_ENDPOINT } }, 'search', 'qwen3');
      expect(search.code).toBe(2);
      expect(search.stderr).toContain(`HF_ENDPOINT "${HF_ENDPOINT}" is not an http(s) address`);
    }
  }, 60_000);
});
