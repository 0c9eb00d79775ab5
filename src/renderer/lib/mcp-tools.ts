/**
 * A chat's MCP tools as the model is offered them: each tool of the chat's servers as a function (OpenAI's tools
 * form), named by the tool alone where that is unambiguous and valid, else `server.tool` (made valid, at most 64
 * characters, numbered apart when two still meet), and the route back from each name to its server and tool.
 * Pure, for the tests.
 */
import type { McpStatus, Thread, ToolRoute } from '../../shared/api';
import type { ToolCall, ToolDefinition } from '../../shared/contract';

const VALID = /^[A-Za-z0-9_.-]{1,64}$/;

/** A tool as a chat's "runs without asking" list names it: `server/tool`. */
export const toolKey = (route: ToolRoute): string => `${route.server}/${route.tool}`;

/** What the model reads for a call the person skipped. */
export const SKIPPED_ANSWER = 'The person did not let this tool run.';

/** Rounds of calls the model may make in a row, since the person last wrote, before its calls wait for them again. */
export const MAX_AUTO_ROUNDS = 5;
const clean = (s: string) => s.replace(/[^A-Za-z0-9_.-]/g, '_');

export interface ChatTools {
  definitions: ToolDefinition[];
  routes: Record<string, ToolRoute>;
  /** Servers the chat names that do not run (not in mcp.json, or failed to start), with why. */
  missing: Array<{ server: string; why: string }>;
}

/**
 * The calls of a reply that run without asking: those of tools the chat lets run (`toolsAllowed`), unless the
 * model has made more than MAX_AUTO_ROUNDS replies of calls since the person last wrote (`capped`: a loop of calls).
 */
export function autoRunCalls(thread: Thread, messageId: string): { calls: ToolCall[]; capped: boolean } {
  const message = thread.messages.find((m) => m.id === messageId);
  const allowed = new Set(thread.toolsAllowed ?? []);
  if (!message?.toolCalls?.length || message.stats?.error || allowed.size === 0) return { calls: [], capped: false };
  const calls = message.toolCalls.filter((c) => {
    const route = message.toolRoutes?.[c.name];
    return route !== undefined && allowed.has(toolKey(route));
  });
  const sinceUser = thread.messages.slice(thread.messages.findLastIndex((m) => m.role === 'user') + 1);
  const rounds = sinceUser.filter((m) => m.role === 'assistant' && m.toolCalls?.length).length;
  return rounds > MAX_AUTO_ROUNDS && calls.length > 0 ? { calls: [], capped: true } : { calls, capped: false };
}

export function chatTools(status: McpStatus, servers: readonly string[]): ChatTools {
  const tools = servers.flatMap((server) => {
    const s = status.servers.find((x) => x.name === server);
    return s?.state === 'ready' ? s.tools.map((t) => ({ server, t })) : [];
  });
  const count = new Map<string, number>();
  for (const { t } of tools) count.set(t.name, (count.get(t.name) ?? 0) + 1);
  const definitions: ToolDefinition[] = [];
  const routes: Record<string, ToolRoute> = {};
  for (const { server, t } of tools) {
    let name = count.get(t.name) === 1 && VALID.test(t.name) ? t.name : clean(`${server}.${t.name}`).slice(0, 64);
    for (let n = 2; routes[name]; n++) name = `${name.slice(0, 60)}-${n}`;
    routes[name] = { server, tool: t.name };
    definitions.push({
      name,
      ...(t.description ? { description: t.description } : {}),
      ...(t.inputSchema ? { parameters: t.inputSchema } : {}),
    });
  }
  const missing = servers.flatMap((server) => {
    const s = status.servers.find((x) => x.name === server);
    if (!s) return [{ server, why: `${status.configPath} names no server "${server}"` }];
    return s.state === 'ready' ? [] : [{ server, why: s.error ?? `it is ${s.state}` }];
  });
  return { definitions, routes, missing };
}
