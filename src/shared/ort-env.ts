/**
 * Environment of every process that loads onnxruntime (the engine, the backend probe). onnxruntime-node 1.30 keeps
 * a device id and a queue of usage events for Microsoft's telemetry under ~/.cache/Microsoft/DeveloperTools (and
 * warns on stderr where $HOME cannot be written): kvdesk runs models locally and sends nothing, so it is off. A
 * person's own ORT_DISABLE_TELEMETRY wins.
 */
export const ORT_ENV: Readonly<Record<string, string>> = { ORT_DISABLE_TELEMETRY: '1' };
