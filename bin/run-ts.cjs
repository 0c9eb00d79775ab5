#!/usr/bin/env node
// Runs a TypeScript entry of this repository with tsx's loader, so the CLI works
// right after `npm install` without a build step. The loader is passed through
// execArgv so child processes (the engine) inherit it.
'use strict';
const path = require('node:path');
const { runNodeChild } = require('./run-child.cjs');

const [entry, ...args] = process.argv.slice(2);
if (!entry) {
  process.stderr.write('usage: run-ts.cjs <file.ts> [args...]\n');
  process.exit(2);
}
const root = path.resolve(__dirname, '..');
const tsx = require.resolve('tsx', { paths: [root] });
runNodeChild(['--import', require('node:url').pathToFileURL(tsx).href, path.resolve(root, entry), ...args]);
