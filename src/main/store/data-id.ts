/**
 * The data folder's identity: a random id kept in `kvdesk-id` inside it, made the first time it is asked for. A page
 * keeps a change made while kvdesk could not be reached with the id of the kvdesk it came from, and only makes it
 * in a kvdesk with that id: never in another data folder's kvdesk that runs on the same address later. The id is a
 * file, not the folder's path: a folder moved keeps it, and the page learns nothing of the paths.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from './private-data';

export const DATA_ID_FILE = 'kvdesk-id';
const SHAPE = /^[A-Za-z0-9-]{8,64}$/;

/**
 * The data folder's id (made once, kept in its kvdesk-id file); undefined, said in `log`, when it can be neither read
 * nor made: pages then keep their changes without one (made in whichever kvdesk runs on the address next).
 */
export async function dataFolderId(dataDir: string, log: (line: string) => void): Promise<string | undefined> {
  const file = path.join(dataDir, DATA_ID_FILE);
  const read = async () => (await readFile(file, 'utf8').catch(() => '')).trim();
  const had = await read();
  if (SHAPE.test(had)) return had;
  const id = randomUUID();
  try {
    await mkdir(dataDir, { recursive: true, mode: PRIVATE_DIR_MODE });
    // A file there that is not an id (empty, cut short) is replaced; one made meanwhile by another kvdesk is kept.
    await writeFile(file, `${id}\n`, { flag: had === '' ? 'wx' : 'w', mode: PRIVATE_FILE_MODE });
    return id;
  } catch (err) {
    const now = await read();
    if (SHAPE.test(now)) return now;
    log(
      `kvdesk: could not make ${file} (${(err as Error).message}): changes a browser keeps while this kvdesk cannot be reached may be made in another kvdesk started on its address later`,
    );
    return undefined;
  }
}
