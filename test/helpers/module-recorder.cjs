// Preloaded into kvdesk's processes by a test (NODE_OPTIONS=--require this file, KVDESK_MODULE_LOG=<file>): each
// process appends one line, `<pid> <entry script> <package>`, for every npm package it loads, as it loads it, so a
// test reads which process loaded what while they run.
'use strict';
const fs = require('node:fs');
const Module = require('node:module');

const log = process.env.KVDESK_MODULE_LOG;
if (log) {
  const entry = process.argv[1] ?? '';
  const seen = new Set();
  const load = Module._load;
  Module._load = function recorded(request, ...rest) {
    const m = /^(@[^/]+\/[^/]+|[^./][^/]*)/.exec(request);
    if (m && !request.startsWith('node:') && !Module.isBuiltin(request) && !seen.has(m[1])) {
      seen.add(m[1]);
      fs.appendFileSync(log, `${process.pid} ${entry} ${m[1]}\n`);
    }
    return load.call(this, request, ...rest);
  };
}
