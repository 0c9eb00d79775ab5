import os from 'node:os';
import path from 'node:path';
import { resolveUserPath } from '../main/store/user-path';

/**
 * The data directory of `serve`, and so the library's: --data-dir, $KVDESK_DATA_DIR, or ~/.kvdesk (a leading `~`
 * of the first two is the home folder, as a shell reads it).
 */
export function dataDirOf(flag: string | undefined): string {
  const given = flag ?? process.env.KVDESK_DATA_DIR;
  return given === undefined ? path.join(os.homedir(), '.kvdesk') : resolveUserPath(given);
}
