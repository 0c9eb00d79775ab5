import os from 'node:os';
import path from 'node:path';

/** The data directory of `serve`, and so the library's: --data-dir, $KVDESK_DATA_DIR, or ~/.kvdesk. */
export function dataDirOf(flag: string | undefined): string {
  return path.resolve(flag ?? process.env.KVDESK_DATA_DIR ?? path.join(os.homedir(), '.kvdesk'));
}
