/**
 * The model a chat's next turn goes to. The open chat's is the picker's (its own model, restored when it opened,
 * or the person's pick since). Another chat — a tool's answer read back while the person is elsewhere — keeps its
 * own: the pick made in it while a reply ran, else the model of its replies, while that is loaded; else the picker's.
 */
export function turnModel(
  st: {
    activeThreadId: string | null;
    activeModelId: string | null;
    models: readonly { id: string }[];
    threads: readonly { id: string; modelId?: string | undefined }[];
  },
  threadId: string,
  pendingPick?: string,
): string | null {
  if (threadId === st.activeThreadId) return st.activeModelId;
  const own = pendingPick ?? st.threads.find((t) => t.id === threadId)?.modelId;
  return own !== undefined && st.models.some((m) => m.id === own) ? own : st.activeModelId;
}
