import { existsSync } from 'node:fs';
import path from 'node:path';

/** Repository root. */
export const repoRoot = path.resolve(__dirname, '../..');

/** ../shared/fixtures next to the checkout (present in CI, absent on some machines). */
export const fixturesRoot = path.resolve(repoRoot, '../shared/fixtures');

/** True when the shared fixture packages are available. */
export const haveFixtures = existsSync(path.join(fixturesRoot, 'onnx-genai/tiny-llm/model.onnx'));

/** Reason printed when fixture tests are skipped. */
export const fixturesSkipReason = `shared fixtures not found at ${fixturesRoot}: tests that use real third-party packages are skipped`;

if (!haveFixtures) {
  // Printed once per test file that imports this helper, so a skip is never silent.
  console.warn(`[kvdesk tests] ${fixturesSkipReason}`);
}

/** Absolute path of a fixture package, e.g. fixture('onnx-genai/tiny-llm'). */
export function fixture(rel: string): string {
  return path.join(fixturesRoot, rel);
}

/** The generated default model package. */
export const defaultModelDir = path.join(repoRoot, 'resources/models/default');
