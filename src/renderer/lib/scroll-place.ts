/**
 * Where the open chat's message list is scrolled, as the list notes it at each scroll, and the place a chat's list
 * opens at when it comes back (a chat whose delete the host refused: it opens again as it was, not at its end).
 * A place is a message row and its top's distance below the list's top (the rows' heights are measured as they
 * render, so a pixel offset alone would not find the same text again); null: at the chat's end, following it.
 */

export interface ScrollPlace {
  messageId: string;
  /** The row's top below the list's top, in pixels (negative: scrolled past its top). */
  top: number;
}

/** The chat the list shows and its place (one list is on screen at a time). */
let shown: { threadId: string; place: ScrollPlace | null } | null = null;
/** Chats whose list opens at a place, once (by chat id). */
const openAt = new Map<string, ScrollPlace>();

/** The list shows chat `threadId` at `place` (null: at its end). */
export function noteScrollPlace(threadId: string, place: ScrollPlace | null): void {
  shown = { threadId, place };
}

/** Where chat `threadId`'s list is scrolled, if it is the one shown and not at its end. */
export function scrollPlaceOf(threadId: string): ScrollPlace | null {
  return shown?.threadId === threadId ? shown.place : null;
}

/** Chat `threadId`'s list opens at `place` the next time it opens (instead of at its end). */
export function openScrolledTo(threadId: string, place: ScrollPlace): void {
  openAt.set(threadId, place);
}

/** The place chat `threadId`'s list opens at this once, if one was asked for (taken: the next opening is at its end). */
export function takeOpenPlace(threadId: string): ScrollPlace | null {
  const place = openAt.get(threadId) ?? null;
  openAt.delete(threadId);
  return place;
}
