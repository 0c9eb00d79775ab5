/**
 * The engine frees dead KV at once (src/main/engine/kv-cache.ts releaseKv): a tensor it is told is dead loses its
 * memory, one the next step still holds does not, and neither does a view over part of a buffer others may share.
 * The tests run with ArrayBuffer.prototype.transfer (vitest.config.mts passes the flag Node 20 needs), as the engine
 * process does (the host passes it there: engine-client.ts).
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { releaseKv } from '../../../src/main/engine/kv-cache';

const ROOT = path.resolve(__dirname, '../../..');
const kv = (n: number) => new ort.Tensor('float32', new Float32Array(n).fill(1), [1, 1, n, 1]);

describe('releaseKv', () => {
  it('frees the dead tensors, and none the next step holds', () => {
    const dead = [kv(64), kv(128)];
    const kept = kv(32);
    const live = new Map([['past.0.key', kept]]);
    releaseKv([...dead, kept, undefined], live);
    for (const t of dead) expect((t.data as Float32Array).buffer.byteLength).toBe(0);
    expect((kept.data as Float32Array).buffer.byteLength).toBe(128);
    expect(Array.from(kept.data as Float32Array).every((v) => v === 1)).toBe(true);
  });

  it('leaves a view over part of a larger buffer alone', () => {
    const shared = new Float32Array(256).fill(2);
    const view = new ort.Tensor('float32', shared.subarray(64, 128), [1, 1, 64, 1]);
    releaseKv([view], new Map());
    expect(shared.buffer.byteLength).toBe(1024);
    expect((view.data as Float32Array)[0]).toBe(2);
  });

  it('the engine process gets transfer: the host adds the flag where its runtime needs it', () => {
    // A fresh process without this test worker's flags: the host as `kvdesk serve` runs it.
    const run = (args: string[]) => execFileSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8' }).trim();
    const flags = JSON.parse(
      run([
        '--import',
        pathToFileURL(require.resolve('tsx')).href,
        '-e',
        "console.log(JSON.stringify(require('./src/main/host/engine-client.ts').ENGINE_V8_FLAGS))",
      ]),
    ) as string[];
    expect(run([...flags, '-p', 'typeof ArrayBuffer.prototype.transfer'])).toBe('function');
  });
});
