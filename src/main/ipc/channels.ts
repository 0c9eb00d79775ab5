/**
 * IPC channel names between src/preload and src/main/ipc. The preload keeps
 * its own copy (a sandboxed preload bundles nothing from main);
 * test/unit/electron/preload.test.ts checks the two agree.
 */
export const CHANNELS = {
  /** invoke(name, request) → Result: every CallSchemas entry. */
  invoke: 'kvdesk:invoke',
  /** postMessage(request, [port]): one MessagePort per generation stream. */
  generate: 'kvdesk:generate',
  /** invoke(path) → Result<ModelInfo>: a dropped or chosen folder, read by the host. */
  importPath: 'kvdesk:import-path',
  /** invoke({ name, files }) → Result<ModelInfo>: files uploaded (no path available). */
  importFiles: 'kvdesk:import-files',
  /** invoke() → Result<string | null>: the folder chooser. */
  chooseFolder: 'kvdesk:choose-folder',
  /** main → renderer: (event name, payloads[]) host events, batched. */
  events: 'kvdesk:events',
} as const;
