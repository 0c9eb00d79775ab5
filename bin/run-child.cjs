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
  // On Windows the console gives Ctrl+C to every process attached to it, and a kill is TerminateProcess (SIGHUP
  // cannot be sent at all): only SIGTERM is passed on there.
  const windows = process.platform === 'win32';
  for (const signal of windows ? ['SIGTERM'] : ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      if (signal === 'SIGINT' && typedInForeground()) return;
      child.kill(signal);
    });
  }
  // Still heard, so this wrapper is not ended by them before its program.
  if (windows) for (const signal of ['SIGINT', 'SIGHUP']) process.on(signal, () => {});
  child.on('error', (err) => {
    process.stderr.write(`kvdesk: could not start node: ${err.message}\n`);
    process.exit(1);
  });
  child.on('exit', (code, signal) => {
    process.exit(code ?? (signal ? 128 + (require('node:os').constants.signals[signal] ?? 0) : 1));
  });
}

/**
 * Whether a SIGINT now is most likely the Ctrl+C of a person typing to this program: its input is a terminal whose
 * foreground process group is this one (Linux's /proc/self/stat; elsewhere false). The terminal signals the whole group,
 * the child too, so passing it on made every Ctrl+C come twice (a chat stopping a reply got the copy as it exited, and
 * died by it). A `kill -INT` of this pid from elsewhere while it runs in the foreground is then not passed on.
 */
function typedInForeground() {
  if (!require('node:tty').isatty(0)) return false;
  try {
    const stat = require('node:fs').readFileSync('/proc/self/stat', 'utf8');
    // After "pid (name) ": state ppid pgrp session tty_nr tpgid
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[5]) > 0 && fields[2] === fields[5];
  } catch {
    return false;
  }
}

module.exports = { runNodeChild };
