/**
 * A data folder's chats, settings, library and keys are its person's alone: kvdesk makes the folder and the folders
 * in it owner-only (0700) and each data file owner-only (0600), whatever the umask. Model packages (`models/`:
 * downloads, their partial files, uploads) are no private data: they keep the modes the umask gives, and may be
 * shared; inside a 0700 data folder no other user reaches them unless the person opens the folder up.
 *
 * A data folder that was there already, open to other users (made by an earlier kvdesk, or by hand), is tightened at
 * start where it is kvdesk's: its own files and folders (chats, settings, library, keys, and what the desktop
 * window's Chromium keeps there: CHROMIUM_NAMES) are made owner-only, and the folder itself too when it holds nothing
 * but those and a file manager's (OS_NAMES), said once. On a file system that keeps no modes (vfat, exFAT, ntfs-3g,
 * WSL's drvfs: a chmod succeeds and changes nothing) nothing is said. A folder that holds other things too (one the
 * person pointed --data-dir at) keeps its mode, said at each start with the command that closes it.
 *
 * POSIX only: on Windows, Node's modes set nothing but read-only, and a folder in the person's profile is theirs by
 * its ACLs.
 */
import { chmod, lstat, readdir, stat } from 'node:fs/promises';
import path from 'node:path';

/** A folder kvdesk makes for its data. */
export const PRIVATE_DIR_MODE = 0o700;
/** A data file kvdesk writes. */
export const PRIVATE_FILE_MODE = 0o600;

/** What kvdesk writes at the top of a data folder that is private (all but `models/`, the model packages). */
const PRIVATE_NAMES = new Set([
  'threads',
  'settings.json',
  'library.json',
  'deleted-threads.json',
  'kvdesk-id',
  'api-key',
  'mcp.json',
]);

/** Beside those: their locks, the copies of an unreadable one kept aside, a save's temp file, the write probe. */
const PRIVATE_BESIDE = /^(settings|library|deleted-threads|mcp)\.json\.(lock|unreadable-\d+)$|\.tmp$/;

/**
 * What the desktop window's browser (Electron's Chromium) keeps at the top of its data folder, which is the data
 * folder too (the app sets Electron's userData to it): caches, but also the person's unsent drafts (Local Storage),
 * cookies and the window's own state. The folder's own, and private: made owner-only as kvdesk's files are.
 */
export const CHROMIUM_NAMES: ReadonlySet<string> = new Set([
  'blob_storage',
  'Cache',
  'Code Cache',
  'Cookies',
  'Cookies-journal',
  'Crash Reports',
  'Crashpad',
  'databases',
  'DawnCache',
  'DawnGraphiteCache',
  'DawnWebGPUCache',
  'Dictionaries',
  'DIPS',
  'DIPS-journal',
  'GPUCache',
  'GrShaderCache',
  'IndexedDB',
  'Local State',
  'Local Storage',
  'Network',
  'Network Persistent State',
  'Partitions',
  'Preferences',
  'QuotaManager',
  'QuotaManager-journal',
  'sentry',
  'Service Worker',
  'Session Storage',
  'Shared Dictionary',
  'SharedStorage',
  'SharedStorage-wal',
  'shared_proto_db',
  'ShaderCache',
  'SingletonCookie',
  'SingletonLock',
  'SingletonSocket',
  'TransportSecurity',
  'Trust Tokens',
  'Trust Tokens-journal',
  'VideoDecodeStats',
  'WebStorage',
]);

/** What a file manager leaves in any folder it shows (macOS's Finder, Windows' Explorer, KDE's Dolphin): no data. */
export const OS_NAMES: ReadonlySet<string> = new Set(['.DS_Store', 'Thumbs.db', 'desktop.ini', '.directory']);

/** Whether `name` at the top of a data folder holds private data kvdesk (or its window) keeps: made owner-only. */
function privateName(name: string): boolean {
  return PRIVATE_NAMES.has(name) || PRIVATE_BESIDE.test(name) || CHROMIUM_NAMES.has(name);
}

/** Whether `name` at the top of a data folder is the folder's own: kvdesk's, its window's, a file manager's. */
function kvdeskMakes(name: string): boolean {
  return name === 'models' || privateName(name) || OS_NAMES.has(name) || /^\.kvdesk-write-test-/.test(name);
}

function modeText(mode: number): string {
  return `0${(mode & 0o777).toString(8)}`;
}

/**
 * Makes what kvdesk keeps in `dir` owner-only (see the top of this file); says in `log` what it did to the folder
 * itself, or why it left it. Nothing here stops a start: a file it may not change stays as it is.
 */
export async function tightenDataDir(
  dir: string,
  log: (line: string) => void,
  platform: NodeJS.Platform = process.platform,
  /** The file system's chmod (a test's stands for one that keeps no modes). */
  setMode: (file: string, mode: number) => Promise<void> = chmod,
): Promise<void> {
  if (platform === 'win32') return;
  const folder = await stat(dir).catch(() => null);
  // Another user's folder (a shared one this user may write in): not kvdesk's to change.
  if (folder === null || !folder.isDirectory() || folder.uid !== process.getuid?.()) return;
  const names = await readdir(dir).catch(() => [] as string[]);
  /** A chmod that succeeded and changed nothing: a file system that keeps no modes (vfat, exFAT, ntfs-3g, drvfs). */
  let keepsNoModes = false;
  for (const name of names) {
    if (!privateName(name)) continue;
    const at = path.join(dir, name);
    const s = await lstat(at).catch(() => null);
    // A link is the person's (and Chromium's Singleton* are links): what it points at is not changed.
    if (s === null || s.isSymbolicLink() || (s.mode & 0o077) === 0) continue;
    const changed = await setMode(at, s.isDirectory() ? PRIVATE_DIR_MODE : PRIVATE_FILE_MODE).then(
      () => true,
      () => false,
    );
    if (changed && ((await lstat(at).catch(() => s)).mode & 0o077) !== 0) keepsNoModes = true;
  }
  // Nothing to say where modes are not kept: no chmod closes the folder, and each start would say it again.
  if ((folder.mode & 0o077) === 0 || keepsNoModes) return;
  const others = names.filter((n) => !kvdeskMakes(n));
  if (others.length === 0) {
    await setMode(dir, PRIVATE_DIR_MODE).catch(() => {});
    // Said only where it is so: a file system may take the chmod and keep no modes.
    const after = await stat(dir).catch(() => folder);
    if ((after.mode & 0o077) !== 0) return;
    // An empty folder made for kvdesk had nothing to show: only one with kvdesk's data in it is said.
    if (names.length > 0)
      log(
        `kvdesk: the data folder ${dir} could be read by other users of this computer (mode ${modeText(folder.mode)}); it holds only kvdesk's data, so it is now yours only (0700), as kvdesk makes it`,
      );
    return;
  }
  const named = others.slice(0, 3).join(', ') + (others.length > 3 ? ', …' : '');
  log(
    `kvdesk: the data folder ${dir} can be read by other users of this computer (mode ${modeText(folder.mode)}). It holds more than kvdesk's data (${named}), so kvdesk leaves its mode as it is; its chats, settings and library in it are yours only. To close the folder too: chmod 700 ${dir}`,
  );
}
