import os from 'node:os';
import path from 'node:path';

/**
 * A path a person gave (a flag's value, an environment variable), absolute: a leading `~` or `~/` is their home
 * folder, as a shell reads it unquoted. A shell leaves it as it is in `--data-dir=~/kvd` or in quotes
 * (`KVDESK_DATA_DIR='~/kvd'`), where it used to become a folder named `~` in the working directory.
 */
export function resolveUserPath(given: string): string {
  if (given === '~') return os.homedir();
  if (given.startsWith('~/') || (path.sep === '\\' && given.startsWith('~\\'))) {
    return path.resolve(os.homedir(), given.slice(2));
  }
  return path.resolve(given);
}
