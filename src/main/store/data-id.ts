/**
 * The data folder's identity: a random id kept in `kvdesk-id` inside it, made the first time it is asked for. A page
 * keeps a change made while kvdesk could not be reached with the id of the kvdesk it came from, and only makes it
 * in a kvdesk with that id: never in another data folder's kvdesk that runs on the same address later. The id is a
 * file, not the folder's path: a folder moved keeps it, and the page learns nothing of the paths.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from './private-data';
import { writeAtomic } from './write-atomic';

export const DATA_ID_FILE = 'kvdesk-id';
const SHAPE = /^[A-Za-z0-9-]{8,64}$/;

/**
 * The data folder's id (made once, kept in its kvdesk-id file); undefined, said in `log`, when it can be neither read
 * nor made: pages then keep their changes without one (made in whichever kvdesk runs on the address next).
 */
export async function dataFolderId(dataDir: string, log: (line: string) => void): Promise<string | undefined> {
  const file = path.join(dataDir, DATA_ID_FILE);
  /** The file's text, trimmed; undefined when there is no file. */
  const read = async () =>
    readFile(file, 'utf8').then(
      (text) => text.trim(),
      (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? undefined : ''),
    );
  const had = await read();
  if (had !== undefined && SHAPE.test(had)) return had;
  const id = randomUUID();
  try {
    await mkdir(dataDir, { recursive: true, mode: PRIVATE_DIR_MODE });
    // Written whole or not at all (a temp file, then its name): a full disk or a power cut leaves no empty id file.
    // With none there, one made meanwhile by another kvdesk is kept; a file there that is not an id (empty, cut
    // short by a kvdesk before this one) is replaced.
    const write = (exclusive: boolean) => writeAtomic(file, `${id}\n`, { mode: PRIVATE_FILE_MODE, exclusive });
    if (had !== undefined) await write(false);
    else
      await write(true).catch(async (err: NodeJS.ErrnoException) => {
        // A file system without hard links (FAT): replaced as above.
        if (err.code === 'EEXIST') throw err;
        await write(false);
      });
    const now = await read();
    return now !== undefined && SHAPE.test(now) ? now : id;
  } catch (err) {
    const now = await read();
    if (now !== undefined && SHAPE.test(now)) return now;
    log(
      `kvdesk: could not make ${file} (${(err as Error).message}): changes a browser keeps while this kvdesk cannot be reached may be made in another kvdesk started on its address later`,
    );
    return undefined;
  }
}
