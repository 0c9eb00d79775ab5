import { chooseDataDir } from '../main/store/data-dir';

/** The note of chooseDataDir, said once per process. */
let noted = false;

/**
 * The data directory of `serve`, and so the library's: --data-dir, $KVDESK_DATA_DIR, or ~/.kvdesk (a leading `~`
 * of the first two is the home folder, as a shell reads it), as the desktop window picks it (chooseDataDir: the
 * window's old folder where only that one holds kvdesk data, said once on stderr). An empty $KVDESK_DATA_DIR is
 * unset (`KVDESK_DATA_DIR=`, as the window reads it), not the working directory; an empty --data-dir
 * (`--data-dir "$DIR"` with DIR unset) is refused, for the same reason.
 */
export function dataDirOf(flag: string | undefined): string {
  const choice = chooseDataDir({ flag });
  if (choice.note !== undefined && !noted) {
    noted = true;
    process.stderr.write(`${choice.note}\n`);
  }
  return choice.dir;
}
