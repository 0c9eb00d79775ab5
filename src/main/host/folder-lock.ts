/**
 * Lock files for folders kvdesk writes into over a long time (a download's staging folder, an upload's): one
 * process at a time, also across processes (the window, `kvdesk serve`, `kvdesk pull`) on one data directory.
 *
 * A lock names its holder by more than its pid, which a container started again (a fresh PID namespace) hands to
 * the next kvdesk as often as not: the process's start time (Linux: /proc/self/stat), its PID namespace, the boot
 * it runs in, the host, and a random token per lock. The holder touches the file every few seconds, so a lock
 * whose holder kvdesk cannot look at (another container or machine sharing the folder) counts as held only while
 * it is touched. A lock whose holder is this very process but none of its live locks was left by a process that
 * had its pid before: it is stale, as is one of a process that is gone.
 */
import { randomBytes } from 'node:crypto';
import { type FileHandle, open, readFile, readlink, rm, stat, utimes } from 'node:fs/promises';
import os from 'node:os';
import { alive } from '../store/file-lock';

/** Who holds a lock, as its file says. */
export interface LockHolder {
  pid: number;
  /** The process's start (clock ticks since boot, /proc/<pid>/stat); absent where there is no /proc. */
  start?: string;
  /** The PID namespace (`pid:[4026531836]`), where there is /proc. */
  ns?: string;
  /** The kernel's boot id, where there is one. */
  boot?: string;
  host: string;
  token: string;
  since?: string;
}

/** How often a held lock is touched, and how old an untouched one of a holder kvdesk cannot look at may be. */
export const LOCK_TOUCH_MS = 5_000;
export const LOCK_STALE_MS = 20_000;

/** Tokens of the locks this process holds now. */
const heldHere = new Set<string>();

let self: Promise<Omit<LockHolder, 'token'>> | undefined;

/** This process, as a lock names it. */
function whoAmI(): Promise<Omit<LockHolder, 'token'>> {
  self ??= (async () => {
    const start = (await procStat(process.pid))?.start;
    const ns = await readlink(`/proc/${process.pid}/ns/pid`).catch(() => undefined);
    const boot = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => '')).trim() || undefined;
    return {
      pid: process.pid,
      ...(start !== undefined ? { start } : {}),
      ...(ns !== undefined ? { ns } : {}),
      ...(boot !== undefined ? { boot } : {}),
      host: os.hostname(),
    };
  })();
  return self;
}

/** A process's state and start time from /proc/<pid>/stat; undefined where there is none (no /proc, no process). */
async function procStat(pid: number): Promise<{ state: string; start: string } | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // The command name (field 2) may hold spaces and parentheses: the fields after it start past the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return rest[0] && rest[19] && /^\d+$/.test(rest[19]) ? { state: rest[0], start: rest[19] } : undefined;
}

/** A process killed whose parent has not reaped it yet (or none will: a container's init that reaps none). */
function zombie(proc: { state: string } | undefined): boolean {
  return proc !== undefined && (proc.state === 'Z' || proc.state === 'X');
}

/** What a lock file says of its holder: a holder, a bare pid (kvdesk before these locks), or nothing usable. */
function parseHolder(text: string): LockHolder | number | null {
  const bare = text.trim();
  if (/^\d+$/.test(bare)) return Number(bare);
  try {
    const v = JSON.parse(bare) as Partial<LockHolder>;
    return Number.isInteger(v.pid) && typeof v.host === 'string' && typeof v.token === 'string'
      ? (v as LockHolder)
      : null;
  } catch {
    return null;
  }
}

/** The state of a lock file: none, held by a live holder (who), or stale (left by a holder that is gone). */
export type LockState =
  | { state: 'none' }
  /** `seenMsAgo`: for a holder out of sight, how long ago it last touched the file. */
  | { state: 'held'; holder: LockHolder | number; seenMsAgo?: number }
  | { state: 'stale' };

/** Whether the lock file `file` is held, and by whom. */
export async function lockState(file: string): Promise<LockState> {
  let text: string;
  let touchedMs: number;
  try {
    text = await readFile(file, 'utf8');
    touchedMs = (await stat(file)).mtimeMs;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'none' };
    throw err;
  }
  const holder = parseHolder(text);
  // Half written (a crash between create and write): its age decides, as for a holder out of sight.
  if (holder === null)
    return Date.now() - touchedMs < LOCK_STALE_MS ? { state: 'held', holder: 0 } : { state: 'stale' };
  if (typeof holder === 'number') {
    // An older kvdesk's lock: no call of this process writes one, so this pid's is a dead process's.
    return holder !== process.pid && holder > 0 && alive(holder) && !zombie(await procStat(holder))
      ? { state: 'held', holder }
      : { state: 'stale' };
  }
  const me = await whoAmI();
  const here = holder.host === me.host;
  if (here && holder.boot !== undefined && me.boot !== undefined && holder.boot !== me.boot) return { state: 'stale' };
  if (here && holder.ns === me.ns) {
    // A process kvdesk can look at.
    if (holder.pid === process.pid) return heldHere.has(holder.token) ? { state: 'held', holder } : { state: 'stale' };
    if (!alive(holder.pid)) return { state: 'stale' };
    const proc = await procStat(holder.pid);
    // A zombie (killed, its parent gone too, and not yet reaped) answers kill(0) as a live process does.
    if (zombie(proc)) return { state: 'stale' };
    const start = holder.start === undefined ? undefined : proc?.start;
    return start !== undefined && start !== holder.start ? { state: 'stale' } : { state: 'held', holder };
  }
  // Another machine or container: held while its holder touches it.
  const ago = Math.max(0, Date.now() - touchedMs);
  return ago < LOCK_STALE_MS ? { state: 'held', holder, seenMsAgo: ago } : { state: 'stale' };
}

/** A lock this process holds: `release` removes its file (safe to call twice). */
export interface HeldLock {
  file: string;
  release(): Promise<void>;
}

/**
 * Takes the lock file `file` for this process: a lock left by a holder that is gone is taken over; one held by
 * a live holder (this process's other calls included) is refused: `{ holder }`.
 */
export async function takeLock(file: string): Promise<HeldLock | Extract<LockState, { state: 'held' }>> {
  const me: LockHolder = {
    ...(await whoAmI()),
    token: randomBytes(8).toString('hex'),
    since: new Date().toISOString(),
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    let fd: FileHandle;
    try {
      fd = await open(file, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const now = await lockState(file);
      if (now.state === 'held') return now;
      if (now.state === 'stale') await rm(file, { force: true });
      continue;
    }
    try {
      await fd.writeFile(`${JSON.stringify(me)}\n`);
    } catch (err) {
      // Made but not written (a full disk): the empty file is this call's own, and would stand for a lock 20 s.
      await fd.close().catch(() => {});
      await rm(file, { force: true });
      throw err;
    }
    await fd.close();
    // Two takers of one stale lock: the one whose file stands holds it.
    const written = parseHolder(await readFile(file, 'utf8').catch(() => ''));
    if (typeof written !== 'object' || written?.token !== me.token) continue;
    heldHere.add(me.token);
    const touch = setInterval(() => {
      const t = new Date();
      void utimes(file, t, t).catch(() => {});
    }, LOCK_TOUCH_MS);
    touch.unref();
    let held = true;
    return {
      file,
      release: async () => {
        if (!held) return;
        held = false;
        clearInterval(touch);
        heldHere.delete(me.token);
        // Only our own: a lock taken over meanwhile (ours judged stale) is the other's.
        const still = parseHolder(await readFile(file, 'utf8').catch(() => ''));
        if (typeof still === 'object' && still?.token === me.token) await rm(file, { force: true });
      },
    };
  }
  const last = await lockState(file);
  return last.state === 'held' ? last : { state: 'held', holder: 0 };
}

/**
 * A lock's holder as a person reads it: "process 812 on vm (since …)", and for one out of sight (another container
 * or machine) when it last showed life and when it no longer counts.
 */
export function describeHolder(held: Extract<LockState, { state: 'held' }>): string {
  const { holder, seenMsAgo } = held;
  if (typeof holder === 'number') return holder > 0 ? `process ${holder}` : 'another process';
  const who = `process ${holder.pid} on ${holder.host}${holder.since ? ` (since ${holder.since})` : ''}`;
  if (seenMsAgo === undefined) return who;
  return `${who}, in another container or machine, which touched the lock ${Math.round(seenMsAgo / 1000)} s ago; it is taken over once untouched for ${LOCK_STALE_MS / 1000} s`;
}
