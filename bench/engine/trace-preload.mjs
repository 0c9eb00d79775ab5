// Loaded with NODE_OPTIONS=--import into `kvdesk serve` and, by inheritance, into its
// engine process; it acts only in the engine. It timestamps every `tokens` event the
// engine sends to the host (CLOCK_MONOTONIC, comparable across processes) and appends
// one JSON line per event to $KVDESK_BENCH_TRACE, so bench/sections/delivery.ts can
// measure engine → WebSocket client latency without any change to kvdesk itself.
import { appendFileSync } from 'node:fs';

const file = process.env.KVDESK_BENCH_TRACE;
const entry = (process.argv[1] ?? '').replaceAll('\\', '/');
const isEngine =
  typeof process.send === 'function' &&
  (entry.endsWith('/engine/process.ts') || entry.endsWith('/engine/process.js') || entry.endsWith('/engine.js'));

if (file && isEngine) {
  const send = process.send.bind(process);
  process.send = (msg, ...rest) => {
    const t = process.hrtime.bigint();
    const sent = send(msg, ...rest);
    if (msg && msg.type === 'tokens') {
      const n = msg.ids.reduce((a, row) => a + row.length, 0);
      appendFileSync(file, `${JSON.stringify({ r: msg.requestId, n, t: t.toString() })}\n`);
    }
    return sent;
  };
}
