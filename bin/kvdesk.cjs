#!/usr/bin/env node
// `kvdesk` command: runs the TypeScript CLI through tsx, so it works right after `npm install`.
'use strict';
process.argv.splice(2, 0, 'src/cli/main.ts');
require('./run-ts.cjs');
