// Runs node with `args` as a child of this process: its stdio is this process's, the signals that stop this
// process stop it, it ends when this process is killed outright, and this process exits as it does (128 + the
// signal's number when a signal ended it).
'use strict';
const { spawn } = require('node:child_process');

function runNodeChild(args) {
  // It ends itself when this wrapper is killed outright (parent-watch.cjs).
  const watch = require('node:path').join(__dirname, 'parent-watch.cjs');
  const child = spawn(process.execPath, ['--require', watch, ...args], {
    stdio: 'inherit',
    env: { ...process.env, KVDESK_WRAPPER_PID: String(process.pid) },
  });
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
}

module.exports = { runNodeChild };
