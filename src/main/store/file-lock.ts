/**
 * A lock between processes on one data folder, for a read-merge-write of a shared file (two kvdesks on one data
 * folder: one's write must not drop what the other wrote since it read). The lock is a file made with O_CREAT|O_EXCL
 * (`open(path, 'wx')`): its making is atomic on every local file system of Windows, macOS and Linux, and on NFS v3
 * and later. It names its holder (pid, host, when, a token of its own). One left by a holder that is gone (a kvdesk
 * killed while it held it) is stale: its pid is no process any more on this host, or it is older than `staleMs` (a
 * holder on another host, or a pid used again); it is taken away by renaming it to a name of the taker's own first
 * (atomic: of two takers, one gets it), then checked to be the one found stale before it is removed.
 *
 * An append-only log (compacted later) was the other way: appends are atomic on POSIX with O_APPEND, but Windows
 * gives no such promise to Node's writes, and compacting it is a read-merge-write again, needing a lock all the same.
 */
import { randomBytes } from 'node:crypto';
import { type FileHandle, link, mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from './private-data';

export interface FileLockOptions {
  /** A lock older than this is stale whoever holds it (the holder's work takes milliseconds). */
  staleMs?: number;
  /** How long to wait for a lock a live holder keeps, before the error that names it. */
  waitMs?: number;
  /** The pause between tries (a random part is added, so that two waiters do not try in step). */
  retryMs?: number;
  /** What the lock guards, for the error ("the list of deleted chats"). */
  what?: string;
}

interface Holder {
  pid: number;
  host: string;
  at: number;
  token: string;
}

/** How long a lock kvdesk cannot read is tried again before the error that names it (at most waitMs). */
const UNREADABLE_WAIT_MS = 2_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether process `pid` runs on this host (a pid this user may not signal runs: EPERM). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The lock file's text, or null when there is none now. */
async function readLock(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

function parseHolder(text: string): Holder | null {
  try {
    const v = JSON.parse(text) as Partial<Holder>;
    if (typeof v.pid !== 'number' || typeof v.host !== 'string' || typeof v.at !== 'number') return null;
    if (typeof v.token !== 'string') return null;
    return v as Holder;
  } catch {
    return null; // being written (made, not written yet), or not a lock of kvdesk's
  }
}

/** The error for a lock file that could not be made or written: names it, why, and what to do. */
function cannotMake(lockFile: string, err: unknown, what: string | undefined): KvdeskError {
  const code = (err as NodeJS.ErrnoException).code;
  const fix =
    code === 'ENOSPC' || code === 'EDQUOT'
      ? 'free some space on its disk'
      : `give your user write access to ${path.dirname(lockFile)}`;
  return new KvdeskError(
    'INTERNAL',
    `could not make the lock file ${lockFile}${what ? ` for ${what}` : ''} (${code ?? (err as Error).message}): ${fix}`,
    { file: lockFile },
  );
}

/**
 * Runs `op` holding the lock `lockFile` (made beside the file it guards); the lock is let go after, whatever `op`
 * did. A lock a live holder keeps for longer than `waitMs` is an error that names the lock file, its holder and what
 * to do.
 */
export async function withFileLock<T>(lockFile: string, op: () => Promise<T>, opts: FileLockOptions = {}): Promise<T> {
  const staleMs = opts.staleMs ?? 30_000;
  const waitMs = opts.waitMs ?? 60_000;
  const retryMs = opts.retryMs ?? 5;
  const host = os.hostname();
  const token = `${process.pid}-${randomBytes(8).toString('hex')}`;
  const deadline = Date.now() + waitMs;
  let madeFolder = false;
  /** Since when the lock could not be read (unset while it can). */
  let unreadableSince: number | undefined;
  // When this process first met each lock it waits on: a lock made on another machine whose clock is ahead says a
  // time to come, and is aged from when it was met here instead.
  const met = new Map<string, number>();
  for (;;) {
    const mine: Holder = { pid: process.pid, host, at: Date.now(), token };
    let fd: FileHandle | undefined;
    try {
      fd = await open(lockFile, 'wx', PRIVATE_FILE_MODE);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // No folder yet (a data folder nothing was written in): made, as the file it guards would make it.
      if (code === 'ENOENT' && !madeFolder) {
        madeFolder = true;
        await mkdir(path.dirname(lockFile), { recursive: true, mode: PRIVATE_DIR_MODE }).catch(() => {});
        continue;
      }
      if (code !== 'EEXIST') throw cannotMake(lockFile, err, opts.what);
    }
    if (fd !== undefined) {
      try {
        await fd.writeFile(JSON.stringify(mine));
        await fd.close();
      } catch (err) {
        // Made but not written (a full disk): removed, or the next taker would wait out staleMs for a lock of no one.
        await fd.close().catch(() => {});
        await unlink(lockFile).catch(() => {});
        throw cannotMake(lockFile, err, opts.what);
      }
      break;
    }
    let text: string | null;
    try {
      text = await readLock(lockFile);
      unreadableSince = undefined;
    } catch (err) {
      // One it cannot read (a folder in its place, a file another user made: a run with sudo): tried again a moment
      // (a lock being removed can fail a read, on Windows), then an error that names it. Never taken away as stale:
      // what it is, is not known.
      unreadableSince ??= Date.now();
      if (Date.now() - unreadableSince >= Math.min(waitMs, UNREADABLE_WAIT_MS)) {
        const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
        throw new KvdeskError(
          'INTERNAL',
          `${opts.what ?? lockFile} is locked by ${lockFile}, which kvdesk cannot read (${code}): if no kvdesk runs on this data folder, delete it (a folder in its place, or a file another user made, running kvdesk with sudo)`,
          { file: lockFile },
        );
      }
      await sleep(retryMs + Math.random() * retryMs);
      continue;
    }
    if (text === null) continue; // let go meanwhile: try again at once
    const holder = parseHolder(text);
    // When it was made: as it says, or (being written, or not kvdesk's) as its file says.
    const said =
      holder?.at ??
      (await stat(lockFile).then(
        (s) => s.mtimeMs,
        () => Date.now(),
      ));
    if (!met.has(text)) met.set(text, Date.now());
    const at = Math.min(said, met.get(text) as number);
    const gone = holder !== null && holder.host === host && holder.pid !== process.pid && !alive(holder.pid);
    if (gone || Date.now() - at > staleMs) {
      await takeStale(lockFile, text, token);
      continue;
    }
    if (Date.now() > deadline) {
      throw new KvdeskError(
        'INTERNAL',
        `${opts.what ?? lockFile} is locked by ${lockFile}, kept by process ${holder?.pid ?? '?'} on ${holder?.host ?? '?'} for ${Math.round((Date.now() - at) / 1000)} s: if no kvdesk runs on this data folder, delete that file`,
        { file: lockFile },
      );
    }
    await sleep(retryMs + Math.random() * retryMs);
  }
  try {
    return await op();
  } finally {
    // Let go, if it is still this one's (one taken away as stale meanwhile is another's now).
    const now = await readLock(lockFile).catch(() => null);
    if (now !== null && parseHolder(now)?.token === token) await unlink(lockFile).catch(() => {});
  }
}

/**
 * Takes away the stale lock whose text is `seen`: renamed to a name of this taker's own (of two takers, one gets
 * it), removed when it is the one found stale. One made meanwhile by a live holder (taken away in its place) is put
 * back where no other was made since (a hard link makes no file over another).
 */
async function takeStale(lockFile: string, seen: string, token: string): Promise<void> {
  const aside = `${lockFile}.stale-${token}`;
  try {
    await rename(lockFile, aside);
  } catch {
    return; // taken away (or let go) by another meanwhile
  }
  const got = await readLock(aside).catch(() => null);
  if (got !== null && got !== seen) await link(aside, lockFile).catch(() => {});
  await unlink(aside).catch(() => {});
}
