/**
 * Generation streams over MessagePorts (ARCHITECTURE.md: one port per
 * generation; closing it cancels). The renderer creates the channel and sends
 * one end with its request; frames go back on it; a `{ type: 'cancel' }`
 * message stops the request ('user'), the port closing (window closed,
 * reloaded, renderer crashed) stops it too ('disconnect'). Either way the
 * scheduler releases the reservation. Written against a structural port type
 * so it is unit-tested without Electron's MessagePortMain.
 */
import type { StreamFrame } from '../../shared/contract';
import { isStreamCancel } from './validate';

/** The part of Electron's MessagePortMain a stream uses. */
export interface StreamPort {
  postMessage(message: unknown): void;
  on(event: 'message', listener: (event: { data: unknown }) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  start(): void;
  close(): void;
}

/** Why a stream was stopped from this side. */
export type StreamCancelReason = 'user' | 'disconnect';

/** Starts a generation (HostApi.generate bound to its request). */
export type GenerationStarter = (onFrame: (frame: StreamFrame) => void) => {
  requestId: string;
  cancel(reason?: StreamCancelReason): void;
};

/** A generation bridged to a port. */
export interface BridgedGeneration {
  cancel(reason: StreamCancelReason): void;
  readonly ended: boolean;
}

/** True for the frames that end a stream. */
export function isTerminalFrame(frame: StreamFrame): boolean {
  return frame.type === 'done' || frame.type === 'error';
}

/**
 * Runs one generation on one port. Frames are posted in order; the terminal
 * frame (done | error) closes the port; after the port closed or the stream
 * ended nothing more is posted and `onEnd` has run exactly once.
 */
export function bridgeGeneration(
  port: StreamPort,
  start: GenerationStarter,
  onEnd: () => void = () => {},
): BridgedGeneration {
  let ended = false;
  let handle: ReturnType<GenerationStarter> | null = null;

  const finish = (closePort: boolean) => {
    if (ended) return;
    ended = true;
    onEnd();
    if (closePort) port.close();
  };
  const cancel = (reason: StreamCancelReason) => {
    // Port events arrive asynchronously, after `start` returned, so the handle exists by then.
    if (!ended) handle?.cancel(reason);
  };

  port.on('message', (event) => {
    if (isStreamCancel(event.data)) cancel('user');
  });
  port.on('close', () => {
    // The renderer is gone: nobody reads the frames any more, so stop the work and free the KV.
    cancel('disconnect');
    finish(false);
  });
  port.start();

  handle = start((frame) => {
    if (ended) return;
    port.postMessage(frame);
    if (isTerminalFrame(frame)) finish(true);
  });

  return {
    cancel: (reason) => {
      cancel(reason);
      // A stop from this side (window closing, app quitting) also ends the stream for the renderer.
      if (reason === 'disconnect') finish(true);
    },
    get ended() {
      return ended;
    },
  };
}

/** The generations each webContents started, so closing a window stops exactly its own. */
export class GenerationRegistry {
  private readonly byOwner = new Map<number, Set<BridgedGeneration>>();

  /** Records a generation of `owner`; the returned function forgets it (call it when the stream ends). */
  add(owner: number, generation: BridgedGeneration): () => void {
    let set = this.byOwner.get(owner);
    if (!set) {
      set = new Set();
      this.byOwner.set(owner, set);
    }
    set.add(generation);
    return () => {
      const s = this.byOwner.get(owner);
      if (!s) return;
      s.delete(generation);
      if (s.size === 0) this.byOwner.delete(owner);
    };
  }

  /** Generations of `owner` still streaming. */
  count(owner: number): number {
    return this.byOwner.get(owner)?.size ?? 0;
  }

  /** Cancels every generation of `owner` (its window closed or crashed); returns how many. */
  cancelAll(owner: number, reason: StreamCancelReason = 'disconnect'): number {
    const set = this.byOwner.get(owner);
    if (!set) return 0;
    this.byOwner.delete(owner);
    const all = [...set];
    for (const g of all) g.cancel(reason);
    return all.length;
  }

  /** Cancels everything (app quitting). */
  cancelEverything(reason: StreamCancelReason = 'disconnect'): number {
    let n = 0;
    for (const owner of [...this.byOwner.keys()]) n += this.cancelAll(owner, reason);
    return n;
  }
}
