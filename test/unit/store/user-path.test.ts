/** resolveUserPath: a path a person gave, with a leading `~` read as a shell reads it unquoted. */
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveUserPath } from '../../../src/main/store/user-path';

describe('resolveUserPath', () => {
  it('reads a leading ~ or ~/ as the home folder', () => {
    expect(resolveUserPath('~')).toBe(os.homedir());
    expect(resolveUserPath('~/kvd')).toBe(path.join(os.homedir(), 'kvd'));
    expect(resolveUserPath('~/a/../b/')).toBe(path.join(os.homedir(), 'b'));
  });

  it('leaves every other path as path.resolve reads it (~ inside a name, ~user, relative, absolute)', () => {
    for (const p of ['~kvd', 'a/~/b', 'kvd~', './~', '/tmp/x', 'rel/dir', ''])
      expect(resolveUserPath(p)).toBe(path.resolve(p));
  });
});
