/**
 * Text files attached to a message (src/renderer/lib/attachments.ts): what is read as text and what is refused
 * (named), and the message as the model reads it — the files in fences no line of theirs can close.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { conversationOf } from '../../../src/renderer/bridge/prompt';
import {
  attachmentBlock,
  attachmentFrom,
  MAX_ATTACHMENT_BYTES,
  withAttachments,
} from '../../../src/renderer/lib/attachments';
import { StoredMessage } from '../../../src/shared/api';

const bytes = (s: string) => new TextEncoder().encode(s);

describe('attachmentFrom', () => {
  it('reads UTF-8 text, without a byte-order mark', () => {
    expect(attachmentFrom('notes.md', bytes('\uFEFF# Notes\nçà 🐦\n'))).toEqual({
      ok: true,
      attachment: { name: 'notes.md', text: '# Notes\nçà 🐦\n' },
    });
  });

  it('refuses what is not text or too big, naming the file', () => {
    const notUtf8 = attachmentFrom('photo.jpg', new Uint8Array([0xff, 0xd8, 0xff, 0xe0, 0x00]));
    expect(notUtf8).toEqual({ ok: false, error: expect.stringContaining('photo.jpg is not text (not UTF-8)') });
    const nul = attachmentFrom('data.bin', bytes('abc\u0000def'));
    expect(nul).toEqual({ ok: false, error: expect.stringContaining('data.bin is not text (it holds NUL bytes)') });
    const big = attachmentFrom('big.log', new Uint8Array(MAX_ATTACHMENT_BYTES + 1).fill(97));
    expect(big).toEqual({ ok: false, error: expect.stringContaining('big.log is 2.0 MB') });
    // The largest file it takes is a message the thread store keeps.
    const edge = attachmentFrom('edge.log', new Uint8Array(MAX_ATTACHMENT_BYTES).fill(97));
    expect(edge.ok).toBe(true);
    if (edge.ok) {
      const m = { id: 'u', role: 'user' as const, content: '', createdAt: 1, attachments: [edge.attachment] };
      expect(StoredMessage.safeParse(m).success).toBe(true);
    }
  });
});

describe('the message as the model reads it', () => {
  it('puts each file under its name in a fence, after the text', () => {
    const text = withAttachments('Summarise these.', [
      { name: 'a.py', text: 'print(1)\n' },
      { name: 'b.txt', text: 'plain' },
    ]);
    expect(text).toBe('Summarise these.\n\nFile a.py:\n```py\nprint(1)\n```\n\nFile b.txt:\n```\nplain\n```');
    expect(withAttachments('Only text', undefined)).toBe('Only text');
    expect(withAttachments('', [{ name: 'x.csv', text: 'a,b' }])).toBe('File x.csv:\n```csv\na,b\n```');
  });

  it('property: no line of a file closes its fence early', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom('`', '``', '```', '````', 'a', '\n', ' '), { maxLength: 60 }), (parts) => {
        const text = parts.join('');
        const block = attachmentBlock({ name: 'f.md', text });
        const lines = block.split('\n');
        const fence = /^(`+)/.exec(lines[1] ?? '')?.[1] ?? '';
        expect(fence.length).toBeGreaterThanOrEqual(3);
        // The closing fence is the last line; no line in between is a fence that long.
        expect(lines[lines.length - 1]).toBe(fence);
        for (const l of lines.slice(2, -1)) expect(l.trim().startsWith(fence)).toBe(false);
      }),
    );
  });

  it('a chat request carries a user message’s files, and no other message’s (an import could hide text there)', () => {
    const files = [{ name: 'n.txt', text: 'hi' }];
    const conv = conversationOf([
      { id: 'u', role: 'user', content: 'Read this', createdAt: 1, attachments: files },
      { id: 'a', role: 'assistant', content: 'Done.', createdAt: 2, attachments: files, stats: { tokens: 2 } },
    ]);
    expect(conv).toEqual([
      { role: 'user', content: 'Read this\n\nFile n.txt:\n```\nhi\n```' },
      { role: 'assistant', content: 'Done.' },
    ]);
  });
});
