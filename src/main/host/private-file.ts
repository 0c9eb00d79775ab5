/**
 * A file only its owner may read (the API key): written through the store's atomic, durable writes, for the server,
 * which reaches the disk through the host (ARCHITECTURE.md's import rules).
 */
import { writeAtomic } from '../store/write-atomic';

/** Writes `text` to `file` atomically, mode 0600 whatever the umask. */
export function writePrivateFile(file: string, text: string): Promise<void> {
  return writeAtomic(file, text, { mode: 0o600 });
}
