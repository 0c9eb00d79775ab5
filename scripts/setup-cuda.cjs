#!/usr/bin/env node
/**
 * `npm run setup:cuda`: installs onnxruntime-node's CUDA (and TensorRT) provider libraries, which its npm tarball
 * leaves out and its postinstall (denied in package.json's allowScripts) would have fetched from NuGet.
 *
 * It runs onnxruntime-node's own installer, with `--onnxruntime-node-install` (install what this platform lacks:
 * the cuda12 manifest on linux/x64). Not `--onnxruntime-node-install=cuda12`: onnxruntime-node 1.30's parser drops
 * a named value (parseInstallFlag's default branch returns nothing), so under `npm run`, whose environment makes
 * the installer think it is onnxruntime-node's own `npm ci`, it exited 0 having installed nothing. npm's variables
 * are removed from the installer's environment for the same reason. Afterwards the libraries are looked for, and a
 * run that did not leave them says so and exits 1.
 */
'use strict';

const { spawnSync } = require('node:child_process');
const { existsSync } = require('node:fs');
const path = require('node:path');

/** Files the installer puts next to the binding (install-metadata.js's linux/x64:cuda12 manifest). */
const LIBRARIES = [
  'libonnxruntime_providers_shared.so',
  'libonnxruntime_providers_cuda.so',
  'libonnxruntime_providers_tensorrt.so',
];

function main() {
  const platform = `${process.platform}/${process.arch}`;
  if (platform !== 'linux/x64') {
    console.error(
      `kvdesk setup:cuda: onnxruntime-node publishes its CUDA and TensorRT providers for linux/x64 only, and this is ${platform}.` +
        (process.platform === 'win32'
          ? ' On Windows, DirectML comes with onnxruntime-node: choose the dml backend.'
          : '') +
        (process.platform === 'darwin'
          ? ' On macOS, CoreML comes with onnxruntime-node: choose the coreml backend.'
          : ''),
    );
    return 1;
  }
  let ortRoot;
  try {
    ortRoot = path.dirname(require.resolve('onnxruntime-node/package.json', { paths: [process.cwd(), __dirname] }));
  } catch {
    console.error('kvdesk setup:cuda: onnxruntime-node is not installed here: run `npm install` (or `npm ci`) first.');
    return 1;
  }
  const installer = path.join(ortRoot, 'script', 'install.js');
  const binDir = path.join(ortRoot, 'bin', 'napi-v6', process.platform, process.arch);
  const env = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^npm_|^ONNXRUNTIME_NODE_INSTALL/i.test(key)) env[key] = value;
  }
  // The installer's requests go through global-agent, which reads GLOBAL_AGENT_HTTPS_PROXY and the like only: the
  // usual variables are handed on under those names where the person has not set them.
  for (const name of ['HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY']) {
    const value = process.env[name] ?? process.env[name.toLowerCase()];
    if (value && env[`GLOBAL_AGENT_${name}`] === undefined) env[`GLOBAL_AGENT_${name}`] = value;
  }
  console.log(
    `kvdesk setup:cuda: onnxruntime-node's installer fetches the CUDA 12 provider from NuGet (api.nuget.org)…`,
  );
  const run = spawnSync(process.execPath, [installer, '--onnxruntime-node-install'], {
    cwd: ortRoot,
    env,
    stdio: 'inherit',
  });
  const missing = LIBRARIES.filter((name) => !existsSync(path.join(binDir, name)));
  if (run.status !== 0 || run.signal || missing.length > 0) {
    const how =
      run.error !== undefined
        ? `the installer did not start (${run.error.message})`
        : run.status !== 0 || run.signal
          ? `the installer failed (${run.signal ? `signal ${run.signal}` : `exit ${run.status}`}; its error is above)`
          : `the installer ended without them`;
    console.error(
      `kvdesk setup:cuda: the CUDA provider libraries were not installed: ${how}. ` +
        (missing.length > 0 ? `Missing from ${binDir}: ${missing.join(', ')}. ` : '') +
        'The download needs https://api.nuget.org: check the network (behind a proxy, set HTTPS_PROXY) and run ' +
        '`npm run setup:cuda` again.',
    );
    return 1;
  }
  console.log(
    `kvdesk setup:cuda: installed ${LIBRARIES.join(', ')} in ${binDir}. ` +
      'The cuda backend also needs an NVIDIA driver, CUDA 12 and cuDNN 9 on the library path (TensorRT: TensorRT 10): ' +
      'restart kvdesk, and the Models view or `kvdesk inspect PACKAGE --backend cuda` says whether it is usable.',
  );
  return 0;
}

if (require.main === module) process.exitCode = main();

module.exports = { LIBRARIES };
