// Runs node with `args` as a child of this process: its stdio is this process's, the signals that stop this
// process stop it, it ends when this process is killed outright (and when this process's parent is gone, where that
// is an npm script's shell: endsWithParent), and this process exits as it does (ended by the same signal when a
// signal ended it).
'use strict';
const { spawn } = require('node:child_process');

function runNodeChild(args) {
  // (Windows never gives an orphan another parent: there is nothing to watch for.)
  const parent = process.platform !== 'win32' && endsWithParent() ? process.ppid : null;
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
  // The program is stopped as by a SIGTERM when this wrapper's parent is gone, where that parent would not pass a
  // signal on (endsWithParent); this wrapper exits as it does.
  if (parent !== null) {
    const timer = setInterval(() => {
      if (process.ppid === parent) return;
      clearInterval(timer);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    }, 500);
    timer.unref();
  }
  child.on('error', (err) => {
    process.stderr.write(`kvdesk: could not start node: ${err.message}\n`);
    process.exit(1);
  });
  child.on('exit', (code, signal) => {
    const exitCode = code ?? (signal ? 128 + (require('node:os').constants.signals[signal] ?? 0) : 1);
    // Killed by a signal: this wrapper ends by the same one, so that its parent sees it (a shell stops its loop
    // after a command Ctrl+C killed; one that exited 130 had handled the Ctrl+C itself, and the loop went on).
    if (signal && ENDS_BY.has(signal) && !windows) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    process.exit(exitCode);
  });
}

/** The signals a wrapper whose program they killed ends by in turn (not the ones that would leave a core dump). */
const ENDS_BY = new Set(['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGKILL']);

/**
 * Whether this wrapper ends its program when its parent is gone (POSIX: it is adopted, its ppid changes), where no
 * signal would reach it: started by an npm script (`npm start`, `npm run serve`, `npx kvdesk`), whose shell npm passes
 * a `kill <npm pid>` to, and dash (sh on Debian and Ubuntu) dies by it without passing it on; or by `npm start`'s own
 * program (src/cli/start.ts) killed outright, which names itself in KVDESK_END_WITH_PID. Else the wrapper ran on,
 * adopted by init, with the program, its server on its port and its engine. A wrapper started otherwise outlives
 * its shell (`nohup kvdesk serve &`).
 */
function endsWithParent() {
  const starter = Number(process.env.KVDESK_END_WITH_PID);
  delete process.env.KVDESK_END_WITH_PID;
  return Boolean(process.env.npm_lifecycle_event) || (starter > 0 && starter === process.ppid);
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
