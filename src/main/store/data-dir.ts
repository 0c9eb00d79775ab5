import { existsSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import { resolveUserPath } from './user-path';

/**
 * Electron's `userData` folder for kvdesk (`appData`/kvdesk, as Electron names it from package.json's name): where
 * the window kept its data before it used ~/.kvdesk, as `kvdesk serve` does.
 */
export function electronUserDataDir(
  platform: NodeJS.Platform = process.platform,
  env: NodeJS.ProcessEnv = process.env,
  home: string = os.homedir(),
): string {
  if (platform === 'darwin') return path.join(home, 'Library', 'Application Support', 'kvdesk');
  if (platform === 'win32') return path.join(env.APPDATA || path.join(home, 'AppData', 'Roaming'), 'kvdesk');
  const config = env.XDG_CONFIG_HOME;
  return path.join(config && path.isAbsolute(config) ? config : path.join(home, '.config'), 'kvdesk');
}

/** What only a kvdesk data folder holds (Electron's own folder also has Chromium's caches, which are no data). */
const KVDESK_DATA = ['threads', 'settings.json', 'library.json', 'models'];

/** Whether `dir` holds kvdesk's data: chats, settings, the library or uploads. */
export function holdsKvdeskData(dir: string, exists: (p: string) => boolean = existsSync): boolean {
  return KVDESK_DATA.some((name) => exists(path.join(dir, name)));
}

/** How many chats `dir` holds (its `threads` folder's chat files; 0 where there is none). */
export function chatsIn(dir: string): number {
  try {
    return readdirSync(path.join(dir, 'threads')).filter((f) => f.endsWith('.json')).length;
  } catch {
    return 0;
  }
}

export interface DataDirChoice {
  dir: string;
  /** Said once where the folder is not the one README names (~/.kvdesk) for a reason the person did not give. */
  note?: string;
}

/**
 * The data folder of the window and of `kvdesk serve` (the browser UI `npm start` falls back to) alike, so that both
 * show the same chats: `--data-dir`, else $KVDESK_DATA_DIR (an empty one is unset), else ~/.kvdesk. Where ~/.kvdesk
 * holds no kvdesk data but the window's old folder (Electron's userData) does, or the old folder holds chats and
 * ~/.kvdesk none (a `kvdesk serve` or `pull` run once leaves a library there, no chats), the old folder is used, and
 * said: an existing person's chats are never left behind. Where both hold chats, ~/.kvdesk is used and the other
 * named. A leading `~` is the home folder. An empty --data-dir is refused.
 */
export function chooseDataDir(options: {
  flag?: string | undefined;
  env?: NodeJS.ProcessEnv;
  home?: string;
  /** The window's old folder; Electron's userData for this platform unless given. */
  legacy?: string;
  exists?: (p: string) => boolean;
  /** How many chats a folder holds; {@link chatsIn} unless given. */
  chats?: (dir: string) => number;
}): DataDirChoice {
  const { flag } = options;
  if (flag !== undefined && flag.trim() === '') {
    throw new KvdeskError(
      'BAD_REQUEST',
      '--data-dir is empty: give a folder, or leave the flag out for $KVDESK_DATA_DIR or ~/.kvdesk',
      { flag: 'data-dir' },
    );
  }
  const env = options.env ?? process.env;
  const fromEnv = env.KVDESK_DATA_DIR;
  const given = flag ?? (fromEnv === undefined || fromEnv.trim() === '' ? undefined : fromEnv);
  if (given !== undefined) return { dir: resolveUserPath(given) };
  const home = options.home ?? os.homedir();
  const dir = path.join(home, '.kvdesk');
  const exists = options.exists ?? existsSync;
  const legacy = options.legacy ?? electronUserDataDir(process.platform, env, home);
  const chats = options.chats ?? chatsIn;
  if (!holdsKvdeskData(legacy, exists)) return { dir };
  const oldChats = chats(legacy);
  const newChats = holdsKvdeskData(dir, exists) ? chats(dir) : 0;
  if (!holdsKvdeskData(dir, exists) || (oldChats > 0 && newChats === 0)) {
    return {
      dir: legacy,
      note:
        `kvdesk: using the data folder ${legacy} (where the desktop window kept its chats before it used ${dir}, ` +
        `which holds none). To use ${dir}, move that folder's contents there while kvdesk is closed; --data-dir or ` +
        '$KVDESK_DATA_DIR picks another.',
    };
  }
  if (oldChats > 0) {
    return {
      dir,
      note:
        `kvdesk: using the data folder ${dir}; ${legacy}, where the desktop window kept its chats before, holds ` +
        `${oldChats} chat${oldChats === 1 ? '' : 's'} too: open ${oldChats === 1 ? 'it' : 'them'} with --data-dir ` +
        `"${legacy}", or import ${oldChats === 1 ? 'its file' : 'their files'} (its threads folder) into this one.`,
    };
  }
  return { dir };
}

/** The value of `--data-dir` among command-line arguments (`--data-dir V` or `--data-dir=V`; the last one wins). */
export function dataDirFlag(argv: readonly string[]): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--data-dir') value = argv[i + 1] ?? '';
    else if (arg.startsWith('--data-dir=')) value = arg.slice('--data-dir='.length);
  }
  return value;
}
