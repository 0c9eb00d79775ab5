// Loaded with NODE_OPTIONS="--expose-gc --import …" into kvdesk's engine process by the KV-truth
// measurement (bench/sections/kv-truth.ts). Before the engine sends each `tokens` event it runs a full
// garbage collection and appends the tokens generated so far, the process's VmRSS and the bytes held by
// ArrayBuffers (the KV tensors, the latest logits) to
// $KVDESK_BENCH_MEMTRACE, so the memory the engine really keeps per token can be told apart from
// KV-sized garbage that merely waits for the collector. It slows the engine; only memory is measured.
import { appendFileSync, readFileSync } from 'node:fs';

const file = process.env.KVDESK_BENCH_MEMTRACE;
const entry = (process.argv[1] ?? '').replaceAll('\\', '/');
const isEngine =
  typeof process.send === 'function' &&
  (entry.endsWith('/engine/process.ts') || entry.endsWith('/engine/process.js') || entry.endsWith('/engine.js'));
const collect = globalThis.gc;

if (file && isEngine && typeof collect === 'function') {
  const send = process.send.bind(process);
  const generated = new Map();
  process.send = (msg, ...rest) => {
    if (msg && msg.type === 'tokens') {
      const n = (generated.get(msg.requestId) ?? 0) + msg.ids.reduce((a, row) => a + row.length, 0);
      generated.set(msg.requestId, n);
      // Twice: the second full collection also finishes sweeping the ArrayBuffers the first one found dead.
      collect();
      collect();
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
      const ab = process.memoryUsage().arrayBuffers;
      if (m) appendFileSync(file, `${JSON.stringify({ r: msg.requestId, n, rss: Number(m[1]) * 1024, ab })}\n`);
    }
    return send(msg, ...rest);
  };
}
