#!/usr/bin/env node
// Runs a TypeScript entry of this repository with tsx's loader, so the CLI works
// right after `npm install` without a build step. The loader is passed through
// execArgv so child processes (the engine) inherit it.
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');

const [entry, ...args] = process.argv.slice(2);
if (!entry) {
  process.stderr.write('usage: run-ts.cjs <file.ts> [args...]\n');
  process.exit(2);
}
const root = path.resolve(__dirname, '..');
const tsx = require.resolve('tsx', { paths: [root] });
const child = spawn(
  process.execPath,
  ['--import', require('node:url').pathToFileURL(tsx).href, path.resolve(root, entry), ...args],
  { stdio: 'inherit' },
);
// Forward termination so `kill <this pid>` stops the program, not just this wrapper.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => child.kill(signal));
}
child.on('error', (err) => {
  process.stderr.write(`kvdesk: could not start node: ${err.message}\n`);
  process.exit(1);
});
child.on('exit', (code, signal) => {
  process.exit(code ?? (signal ? 128 + (require('node:os').constants.signals[signal] ?? 0) : 1));
});
