import os from 'node:os';
import path from 'node:path';
import { resolveUserPath } from '../main/store/user-path';
import { KvdeskError } from '../shared/errors';

/**
 * The data directory of `serve`, and so the library's: --data-dir, $KVDESK_DATA_DIR, or ~/.kvdesk (a leading `~`
 * of the first two is the home folder, as a shell reads it). An empty $KVDESK_DATA_DIR is unset (`KVDESK_DATA_DIR=`,
 * as the window reads it), not the working directory; an empty --data-dir (`--data-dir "$DIR"` with DIR unset) is
 * refused, for the same reason.
 */
export function dataDirOf(flag: string | undefined): string {
  if (flag !== undefined && flag.trim() === '') {
    throw new KvdeskError(
      'BAD_REQUEST',
      '--data-dir is empty: give a folder, or leave the flag out for $KVDESK_DATA_DIR or ~/.kvdesk',
      { flag: 'data-dir' },
    );
  }
  const env = process.env.KVDESK_DATA_DIR;
  const given = flag ?? (env === undefined || env.trim() === '' ? undefined : env);
  return given === undefined ? path.join(os.homedir(), '.kvdesk') : resolveUserPath(given);
}
