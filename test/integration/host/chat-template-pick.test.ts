/**
 * A chat template of the person's own (LoadModelRequest.chatTemplate), through HostApi over a real RunnerService:
 * the model's prompts are rendered with it, what it implies (a thinking model) is read from it, it is kept with
 * the library's pick across loads and restarts, null goes back to the package's, and one that does not render is
 * refused naming the field, with the model loaded as it was.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { defaultModelDir } from '../../helpers/fixtures';
import { graphVariantsModel } from '../../helpers/models';

const tmpDirs: string[] = [];
const apis: HostApi[] = [];
afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.close()));
});
afterAll(async () => {
  await Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function tmp(): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-template-'));
  tmpDirs.push(d);
  return d;
}

async function makeApi(dataDir: string): Promise<HostApi> {
  const api = await createHostApi({ runner: new RunnerService({ intraOpNumThreads: 1 }), dataDir, log: () => {} });
  apis.push(api);
  return api;
}

/** A template that writes each message on a line of its own, and opens a <think> reasoning for the reply. */
const MINE = "{% for m in messages %}{{ m.role + ': ' + m.content + '\n' }}{% endfor %}assistant: <think>\n";
const ASK = [{ role: 'user' as const, content: 'Why is the sky blue?' }];

describe('a chat template of the person’s own', () => {
  it('renders the prompts, makes the model what it says, is kept across loads and restarts, and null drops it', async () => {
    const dataDir = await tmp();
    const dir = path.join(dataDir, 'mine');
    await cp(defaultModelDir, dir, { recursive: true });
    const api = await makeApi(dataDir);
    const spec = () => api.runner.listModels().find((m) => m.id === 'mine')?.spec;
    const promptTokens = () => api.runner.measurePrompt({ model: 'mine', messages: ASK }).promptTokens;

    expect((await api.call('loadModel', { path: dir })).ok).toBe(true);
    expect(spec()?.reasoning).toBeUndefined();
    expect(spec()?.chatTemplateEdited).toBeUndefined();
    const packaged = promptTokens();

    const loaded = await api.call('loadModel', { path: dir, chatTemplate: MINE });
    if (!loaded.ok) throw new Error(loaded.error.message);
    expect(loaded.value.spec).toMatchObject({ chatTemplate: MINE, chatTemplateEdited: true });
    // Its <think> makes it a thinking model; the prompt is what the template writes, token for token.
    expect(loaded.value.spec.reasoning).toMatchObject({ open: '<think>', close: '</think>' });
    const tok = api.runner.tokenizerOf('mine');
    // (Jinja drops a template's last line break.)
    const rendered = 'user: Why is the sky blue?\nassistant: <think>';
    expect(promptTokens()).toBe(tok.encode(rendered, { addSpecialTokens: false }).length);
    expect(promptTokens()).not.toBe(packaged);
    // The reply starts inside the reasoning the template opened.
    const reply = await api.runner.generate({
      model: 'mine',
      messages: ASK,
      maxNewTokens: 4,
      sampling: { greedy: true },
    }).result;
    expect(reply.reasoningTokens).toBe(4);
    // A folder dropped again is shown as it would load: with the template kept for it.
    const checked = await api.call('checkPackage', { path: dir });
    expect(checked.ok && checked.value.ok && checked.value.spec).toMatchObject({ chatTemplateEdited: true });

    // Kept with the pick: a load without one, and after a restart, the library's entry and the next load use it.
    expect((await api.call('loadModel', { path: dir, variant: undefined })).ok).toBe(true);
    expect(spec()?.chatTemplate).toBe(MINE);
    await api.libraryChecked;
    await api.close();
    apis.splice(apis.indexOf(api), 1);
    const stored = JSON.parse(await readFile(path.join(dataDir, 'library.json'), 'utf8')) as {
      packages: Array<{ root: string; load?: unknown }>;
    };
    expect(stored.packages.find((p) => p.root.endsWith('/mine'))?.load).toEqual({ chatTemplate: MINE });
    const again = await makeApi(dataDir);
    await again.libraryChecked;
    const listed = await again.call('listLibrary', {});
    if (!listed.ok) throw new Error(listed.error.message);
    expect(listed.value.find((e) => e.id === 'mine')?.spec).toMatchObject({
      chatTemplateEdited: true,
      reasoning: { open: '<think>' },
    });
    await again.ensureModel('mine');
    expect(again.runner.listModels().find((m) => m.id === 'mine')?.spec.chatTemplate).toBe(MINE);

    // null: the package's own again, and nothing kept.
    const back = await again.call('loadModel', { path: dir, chatTemplate: null });
    if (!back.ok) throw new Error(back.error.message);
    expect(back.value.spec.chatTemplateEdited).toBeUndefined();
    expect(back.value.spec.reasoning).toBeUndefined();
    expect(again.runner.measurePrompt({ model: 'mine', messages: ASK }).promptTokens).toBe(packaged);
    const relisted = await again.call('listLibrary', {});
    expect(relisted.ok && relisted.value.find((e) => e.id === 'mine')?.load).toBeUndefined();
  });

  it('a change of template alone is taken without loading again: the kept KV stays, and a running reply goes on', async () => {
    const dataDir = await tmp();
    const dir = path.join(dataDir, 'swap');
    await cp(defaultModelDir, dir, { recursive: true });
    const api = await makeApi(dataDir);
    const engineLoads = vi.spyOn(api.runner.engine, 'load');
    expect((await api.call('loadModel', { path: dir })).ok).toBe(true);
    expect(engineLoads).toHaveBeenCalledTimes(1);
    const promptTokens = () => api.runner.measurePrompt({ model: 'swap', messages: ASK }).promptTokens;
    const packaged = promptTokens();
    // A session keeps its KV; a reply runs.
    await api.runner.generate({ model: 'swap', promptIds: [5, 6, 7], maxNewTokens: 2, sessionId: 'kept' }).result;
    const held = () =>
      api.runner
        .snapshot()
        .devices.flatMap((d) => d.sessions)
        .some((x) => x.sessionId === 'kept');
    expect(held()).toBe(true);
    let streaming: () => void = () => {};
    const firstTokens = new Promise<void>((resolve) => {
      streaming = resolve;
    });
    const running = api.runner.generate(
      { model: 'swap', messages: ASK, maxNewTokens: 200, sampling: { greedy: true } },
      (f) => f.type === 'tokens' && streaming(),
    );
    await firstTokens;

    const swapped = await api.call('loadModel', { path: dir, chatTemplate: MINE });
    if (!swapped.ok) throw new Error(swapped.error.message);
    expect(swapped.value.spec).toMatchObject({
      chatTemplate: MINE,
      chatTemplateEdited: true,
      reasoning: { open: '<think>' },
    });
    expect(engineLoads).toHaveBeenCalledTimes(1);
    expect(promptTokens()).not.toBe(packaged);
    expect(held()).toBe(true);
    // (It was running when the template changed: a load again would have been refused while it ran.)
    expect((await running.result).finishReason).toBe('length');
    const listed = await api.call('listModels', {});
    expect(listed.ok && listed.value.find((m) => m.id === 'swap')?.spec.chatTemplateEdited).toBe(true);

    // Back to the package's: the same.
    expect((await api.call('loadModel', { path: dir, chatTemplate: null })).ok).toBe(true);
    expect(engineLoads).toHaveBeenCalledTimes(1);
    expect(promptTokens()).toBe(packaged);
    // A load that names anything else loads again (and drops the KV computed by the old session).
    expect((await api.call('loadModel', { path: dir, backend: 'cpu' })).ok).toBe(true);
    expect(engineLoads).toHaveBeenCalledTimes(2);
    expect(held()).toBe(false);
  });

  it('a kept variant gone: the template stays; a kept template that no longer renders: the variant stays', async () => {
    const dataDir = await tmp();
    const dir = path.join(dataDir, 'variants');
    await cp(graphVariantsModel(), dir, { recursive: true });
    const log: string[] = [];
    let api = await createHostApi({
      runner: new RunnerService({ intraOpNumThreads: 1 }),
      dataDir,
      log: (l) => log.push(l),
    });
    apis.push(api);
    const kept = async () => {
      const listed = await api.call('listLibrary', {});
      return listed.ok ? listed.value.find((e) => e.root === dir)?.load : 'not listed';
    };
    expect((await api.call('loadModel', { path: dir, variant: 'q4', chatTemplate: MINE })).ok).toBe(true);
    expect((await api.call('unloadModel', { id: 'variants' })).ok).toBe(true);
    await rm(path.join(dir, 'onnx/model_q4.onnx'));
    const loaded = await api.call('loadModel', { path: dir });
    if (!loaded.ok) throw new Error(loaded.error.message);
    expect(loaded.value.spec).toMatchObject({
      graphPath: path.join(dir, 'onnx/model.onnx'),
      chatTemplate: MINE,
      chatTemplateEdited: true,
    });
    expect(await kept()).toEqual({ chatTemplate: MINE });
    // "The package's template" sticks, also when the load names nothing else.
    expect((await api.call('loadModel', { path: dir, chatTemplate: null })).ok).toBe(true);
    expect(await kept()).toBeUndefined();

    // A template kept in the library that no longer renders (written by hand here): loaded with the package's,
    // said in the log, the variant kept and the template dropped.
    await cp(graphVariantsModel(), dir, { recursive: true });
    expect((await api.call('loadModel', { path: dir, variant: 'q4' })).ok).toBe(true);
    await api.libraryChecked;
    await api.close();
    apis.splice(apis.indexOf(api), 1);
    const file = path.join(dataDir, 'library.json');
    const stored = JSON.parse(await readFile(file, 'utf8')) as { packages: Array<{ root: string; load?: object }> };
    for (const p of stored.packages) if (p.root === dir) p.load = { variant: 'q4', chatTemplate: '{% if %}' };
    await writeFile(file, JSON.stringify(stored));
    log.length = 0;
    api = await createHostApi({
      runner: new RunnerService({ intraOpNumThreads: 1 }),
      dataDir,
      log: (l) => log.push(l),
    });
    apis.push(api);
    const again = await api.call('loadModel', { path: dir });
    if (!again.ok) throw new Error(again.error.message);
    expect(again.value.spec.graphVariant).toBe('q4');
    expect(again.value.spec.chatTemplateEdited).toBeUndefined();
    expect(log.some((l) => l.includes('its kept chat template no longer renders'))).toBe(true);
    expect(await kept()).toEqual({ variant: 'q4' });
  });

  it("previewChatTemplate: what a template writes for a short conversation, with the model's BOS and EOS", async () => {
    const api = await makeApi(await tmp());
    expect((await api.call('loadModel', { path: defaultModelDir })).ok).toBe(true);
    const shown = await api.call('previewChatTemplate', {
      template: '{{ bos_token }}{% for m in messages %}{{ m.role[0] }}{% endfor %}{{ eos_token }}',
      model: 'default',
    });
    expect(shown).toEqual({ ok: true, value: { text: '<|endoftext|>suau<|im_end|>' } });
    // Without a model: no such tokens.
    const bare = await api.call('previewChatTemplate', { template: '[{{ bos_token }}]{{ messages | length }}' });
    expect(bare).toEqual({ ok: true, value: { text: '[]4' } });
    const broken = await api.call('previewChatTemplate', { template: '{% if %}' });
    expect(broken.ok).toBe(false);
    if (!broken.ok) expect(broken.error).toMatchObject({ code: 'BAD_REQUEST', detail: { field: 'template' } });
  });

  it('one that does not render is refused naming the field and why; the model stays as it was', async () => {
    const dataDir = await tmp();
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: defaultModelDir })).ok).toBe(true);
    const before = api.runner.listModels().find((m) => m.id === 'default')?.spec.chatTemplate;
    for (const [template, why] of [
      ['{% for m in messages %}{{ m.content }', 'not a valid Jinja template'],
      ["{{ raise_exception('no system message') }}", 'rejected this conversation: no system message'],
    ] as const) {
      const r = await api.call('loadModel', { path: defaultModelDir, chatTemplate: template });
      expect(r.ok).toBe(false);
      if (r.ok) continue;
      expect(r.error).toMatchObject({ code: 'BAD_REQUEST', detail: { field: 'chatTemplate' } });
      expect(r.error.message).toContain('This chat template cannot be used');
      expect(r.error.message).toContain(why);
    }
    expect(api.runner.listModels().find((m) => m.id === 'default')?.spec.chatTemplate).toBe(before);
    // One that renders the check's conversation but refuses a later one says whose template it is.
    const picky = "{% if messages[0].role == 'system' %}{{ raise_exception('no system messages') }}{% endif %}x";
    expect((await api.call('loadModel', { path: defaultModelDir, chatTemplate: picky })).ok).toBe(true);
    const refused = await api.call('measurePrompt', {
      model: 'default',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ],
    });
    expect(!refused.ok && refused.error.message).toBe(
      'The chat template of your own rejected this conversation: no system messages. Change the messages to the form this model expects.',
    );
    expect((await api.call('loadModel', { path: defaultModelDir, chatTemplate: null })).ok).toBe(true);
    // Nothing of it was kept.
    const listed = await api.call('listLibrary', {});
    expect(listed.ok && listed.value.find((e) => e.id === 'default')?.load).toBeUndefined();
  });
});
