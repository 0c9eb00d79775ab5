#!/usr/bin/env node
// `kvdesk` command: runs the CLI's bundle (out/cli, made by npm install and `npm run build`) while it is up to date
// with the sources, and the TypeScript sources through tsx otherwise, so it works right after `npm install` and
// right after an edit alike.
'use strict';
const path = require('node:path');
const { freshCliBundle } = require('./cli-bundle.cjs');

const bundle = freshCliBundle(path.resolve(__dirname, '..'));
if (bundle) {
  require('./run-child.cjs').runNodeChild([bundle, ...process.argv.slice(2)]);
} else {
  process.argv.splice(2, 0, 'src/cli/main.ts');
  require('./run-ts.cjs');
}
