// Which code `kvdesk` runs: the bundle scripts/build-cli.cjs makes (out/cli/main.js, with the engine beside it)
// while it is at least as new as every file under src/ and package.json, so an edited source is never run stale.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

/** The newest modification time (ms) of the files under `dir`; 0 when there are none. */
function newestUnder(dir) {
  let newest = 0;
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestUnder(p));
    else if (entry.isFile()) newest = Math.max(newest, fs.statSync(p).mtimeMs);
  }
  return newest;
}

/** The CLI bundle under `root` to run, or null when it is missing, incomplete, or older than the sources. */
function freshCliBundle(root) {
  const dir = path.join(root, 'out/cli');
  let built = Number.POSITIVE_INFINITY;
  for (const name of ['main.js', 'engine.js', 'probe-process.js']) {
    try {
      built = Math.min(built, fs.statSync(path.join(dir, name)).mtimeMs);
    } catch {
      return null;
    }
  }
  let sources = newestUnder(path.join(root, 'src'));
  try {
    sources = Math.max(sources, fs.statSync(path.join(root, 'package.json')).mtimeMs);
  } catch {
    // no package.json: the sources decide
  }
  return built >= sources ? path.join(dir, 'main.js') : null;
}

module.exports = { freshCliBundle };
