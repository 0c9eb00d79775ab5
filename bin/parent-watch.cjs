// Preloaded (--require) into the program bin/run-child.cjs starts for the `kvdesk` command: ends it when that wrapper
// is gone without a word (SIGKILL, an OOM kill, `timeout -s KILL`), which no signal forwarding can pass on. Else the
// program (and its engine) ran on, adopted by init: a server kept its port, a generate its CPU. The SIGTERM it sends
// itself takes the usual way out (the engine stopped, the port closed). Programs it starts in turn skip it.
'use strict';
const wrapper = Number(process.env.KVDESK_WRAPPER_PID);
delete process.env.KVDESK_WRAPPER_PID;
if (wrapper > 0 && process.ppid === wrapper) {
  setInterval(() => {
    if (process.ppid !== wrapper) process.kill(process.pid, 'SIGTERM');
  }, 500).unref();
}
