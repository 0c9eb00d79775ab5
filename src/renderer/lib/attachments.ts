/**
 * Text files attached to a message (pure, unit-tested): reading one as UTF-8 text (refusing what is not), and
 * the message as the model reads it — the text, then each file in a fenced block under its name.
 */
import type { Attachment } from '../../shared/api';
import { cutText } from '../../shared/text';
import { fenced } from './fence';

/**
 * Largest file a message takes (the model's context is the real limit; the composer shows it): 2 MB, so its text
 * (never more characters than bytes) fits what a stored message may hold.
 */
export const MAX_ATTACHMENT_BYTES = 2_000_000;
/** Most files one message takes. */
export const MAX_ATTACHMENTS = 8;

/** A file's size as it was read (its text in UTF-8), for its chip. */
export function attachmentBytes(file: Attachment): number {
  return new TextEncoder().encode(file.text).length;
}

/** A file's bytes as an attachment, or why not (named): too big, or not UTF-8 text. */
export function attachmentFrom(
  name: string,
  bytes: Uint8Array,
): { ok: true; attachment: Attachment } | { ok: false; error: string } {
  if (bytes.byteLength > MAX_ATTACHMENT_BYTES) {
    return {
      ok: false,
      error: `${name} is ${(bytes.byteLength / 1e6).toFixed(1)} MB: a message takes text files of at most ${MAX_ATTACHMENT_BYTES / 1e6} MB.`,
    };
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return { ok: false, error: `${name} is not text (not UTF-8): attach text files (notes, code, CSV, JSON, …).` };
  }
  // A NUL is no text file's (a binary that happens to decode).
  if (text.includes('\u0000')) {
    return {
      ok: false,
      error: `${name} is not text (it holds NUL bytes): attach text files (notes, code, CSV, JSON, …).`,
    };
  }
  return { ok: true, attachment: { name: cutText(name, 255), text: text.replace(/^\uFEFF/, '') } };
}

/** A Markdown fence language from a file name's extension (`notes.md` → md), or none. */
function languageOf(name: string): string {
  const ext = /\.([A-Za-z0-9+#-]{1,12})$/.exec(name)?.[1]?.toLowerCase() ?? '';
  return ext === 'txt' ? '' : ext;
}

/** One file as the model reads it: its name, then its text in a fence longer than any run of backticks in it. */
export function attachmentBlock(a: Attachment): string {
  return `File ${a.name}:\n${fenced(a.text.replace(/\n$/, ''), languageOf(a.name))}`;
}

/** A message's content as the model reads it: the text, then each attached file. */
export function withAttachments(content: string, attachments: readonly Attachment[] | undefined): string {
  if (!attachments || attachments.length === 0) return content;
  return [content.trim(), ...attachments.map(attachmentBlock)].filter((p) => p.length > 0).join('\n\n');
}
