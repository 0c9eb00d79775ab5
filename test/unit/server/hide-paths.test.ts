/**
 * hideFolders (src/main/server/hide-paths.ts): what a page of another origin is answered names no folder of this
 * computer, each replaced where it is a whole path, in plain text and in JSON (Windows' backslashes doubled).
 */
import { describe, expect, it } from 'vitest';
import { hideFolders } from '../../../src/main/server/hide-paths';

const folders = [
  { at: '/home/ann/models/qwen', as: '<folder of model qwen>' },
  { at: '/home/ann/.kvdesk', as: '<data folder>' },
  { at: '/home/ann', as: '~' },
  { at: 'C:\\Users\\ann\\kvd', as: '<data folder>' },
];

describe('hideFolders', () => {
  it('replaces each folder where it is a whole path, the longest first', () => {
    expect(hideFolders('/home/ann/models/qwen is not a package', folders)).toBe(
      '<folder of model qwen> is not a package',
    );
    expect(hideFolders('read /home/ann/.kvdesk/threads/t1.json', folders)).toBe('read <data folder>/threads/t1.json');
    expect(hideFolders('(/home/ann/x)', folders)).toBe('(~/x)');
    // A longer name that starts the same is another folder.
    expect(hideFolders('/home/anna/x and /home/ann.old', folders)).toBe('/home/anna/x and /home/ann.old');
    // In any script: a letter or digit past the ASCII ones continues the name too.
    expect(hideFolders('/home/annö/x /home/ann٣/y /home/annа/z', folders)).toBe(
      '/home/annö/x /home/ann٣/y /home/annа/z',
    );
    expect(hideFolders('ö/home/ann/x', folders)).toBe('ö/home/ann/x');
    expect(hideFolders('«/home/ann/x»', folders)).toBe('«~/x»');
  });

  it('in JSON too, the stand-in written as JSON writes it', () => {
    const json = JSON.stringify({ root: '/home/ann/models/qwen', win: 'C:\\Users\\ann\\kvd\\threads' });
    const hidden = hideFolders(json, folders);
    expect(JSON.parse(hidden)).toEqual({ root: '<folder of model qwen>', win: '<data folder>\\threads' });
  });
});
