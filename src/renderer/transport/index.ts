/**
 * Picks the transport: Electron's preload exposes the API as `window.kvdesk`;
 * anywhere else the page was served by `kvdesk serve` and talks to it over
 * the WebSocket on the same origin.
 */
import type { KvdeskApi } from '../../shared/api';
import {
  addressWithoutToken,
  type ConnectionState,
  createWsClient,
  type FolderChange,
  type HostHello,
  urlsFromLocation,
} from './ws-client';

/**
 * What the Electron preload adds beyond KvdeskApi: the host path of a dropped
 * File (`webUtils.getPathForFile`) and the OS folder chooser.
 */
export interface ElectronExtras {
  getPathForFile?: (file: File) => string;
  chooseFolder?: () => Promise<string | null>;
}

export interface Transport {
  api: KvdeskApi & ElectronExtras;
  /** Connection state changes; Electron IPC is always open. */
  onConnection(listener: (state: ConnectionState) => void): () => void;
  /** The server serves another build of the UI than this page's (a browser page kept open across an update). */
  onOutdated?(listener: () => void): () => void;
  /** The server's hello on the connection open now (null: it closed first); none in Electron (nothing is kept). */
  hello?(): Promise<HostHello | null>;
  /**
   * A connection's server keeps another data folder than the one the page's chats came from: nothing written for that
   * one was sent to it (what waited ended with reason OTHER_FOLDER). Said before the connection is open.
   */
  onOtherFolder?(listener: (change: FolderChange) => void): () => void;
  /** kvdesk refuses this page's connection (its origin, its token): why, to show (none in Electron). */
  onRefused?(listener: (message: string) => void): () => void;
  /** The data folder's id the server last said (undefined: none). */
  readonly dataId?: string | undefined;
  readonly state: ConnectionState;
}

declare global {
  interface Window {
    kvdesk?: KvdeskApi & ElectronExtras;
  }
}

export function createTransport(): Transport {
  const preload = window.kvdesk;
  if (preload) {
    return { api: preload, onConnection: () => () => {}, state: 'open' };
  }
  const client = createWsClient(urlsFromLocation(window.location));
  // The client keeps the token; the address bar does not (the cookie the page got carries it on a reload).
  const clean = addressWithoutToken(window.location.href);
  if (clean !== null) window.history.replaceState(window.history.state, '', clean);
  return {
    api: client,
    onConnection: (l) => client.onConnection(l),
    onOutdated: (l) => client.onOutdated(l),
    hello: () => client.hello(),
    onOtherFolder: (l) => client.onOtherFolder(l),
    onRefused: (l) => client.onRefused(l),
    get dataId() {
      return client.dataId;
    },
    get state() {
      return client.state;
    },
  };
}

export type { ConnectionState, FolderChange } from './ws-client';
export { OTHER_FOLDER } from './ws-client';
