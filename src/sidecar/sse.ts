/**
 * Just enough of Server-Sent Events to tell, before the first token is sent to a client, whether a streamed
 * completion began with tokens or with a failure. Pure: text in, events out.
 */

/** Splits a byte stream (decoded as UTF-8 text) into SSE events and returns each event's joined `data:` lines. */
export class SseSplitter {
  #buffer = '';

  /** Feed more text; returns the data of every event completed by it (events with no data lines are skipped). */
  push(text: string): string[] {
    this.#buffer += text.replace(/\r\n?/g, '\n');
    const out: string[] = [];
    for (let i = this.#buffer.indexOf('\n\n'); i >= 0; i = this.#buffer.indexOf('\n\n')) {
      const block = this.#buffer.slice(0, i);
      this.#buffer = this.#buffer.slice(i + 2);
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''));
      if (data.length > 0) out.push(data.join('\n'));
    }
    return out;
  }
}

/** What one streamed event means for the "did a token reach the client yet" question. */
export type EventKind =
  /** Carries generated output (text, a delta, token ids) or a normal finish. */
  | 'token'
  /** Carries nothing generated (a role-only first chunk, a usage chunk). */
  | 'empty'
  /** The worker reports a failure (an `error` object, or a choice finishing with `finish_reason: "error"`). */
  | 'error'
  | 'done';

/** Classify one event's data; the relay holds a stream until the first `token` and fails it on an earlier `error`. */
export function classifyEvent(data: string): { kind: EventKind; message?: string } {
  if (data.trim() === '[DONE]') return { kind: 'done' };
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return { kind: 'empty' };
  }
  if (v === null || typeof v !== 'object') return { kind: 'empty' };
  const o = v as Record<string, unknown>;
  if (o['error'] !== undefined && o['error'] !== null) return { kind: 'error', message: errorMessage(o['error']) };
  const choices = Array.isArray(o['choices']) ? (o['choices'] as unknown[]) : [];
  let token = false;
  for (const c of choices) {
    if (c === null || typeof c !== 'object') continue;
    const choice = c as Record<string, unknown>;
    if (choice['finish_reason'] === 'error')
      return { kind: 'error', message: 'the worker finished the request with finish_reason "error"' };
    if (carriesOutput(choice)) token = true;
  }
  return { kind: token ? 'token' : 'empty' };
}

function carriesOutput(choice: Record<string, unknown>): boolean {
  if (typeof choice['text'] === 'string' && choice['text'] !== '') return true;
  if (Array.isArray(choice['token_ids']) && choice['token_ids'].length > 0) return true;
  if (typeof choice['finish_reason'] === 'string') return true;
  const delta = choice['delta'];
  if (delta === null || typeof delta !== 'object') return false;
  const d = delta as Record<string, unknown>;
  return (
    (typeof d['content'] === 'string' && d['content'] !== '') ||
    REASONING_FIELDS.some((k) => typeof d[k] === 'string' && d[k] !== '') ||
    (Array.isArray(d['tool_calls']) && d['tool_calls'].length > 0)
  );
}

/**
 * A reasoning model's thinking is output like any other: vLLM streams it as `delta.reasoning` (PR #27752) and older
 * versions as `delta.reasoning_content`, which later versions stopped emitting (PR #33402). Either one is a generated
 * token, so the relay stops holding the stream at the first one and forwards every later chunk as it comes.
 */
const REASONING_FIELDS = ['reasoning', 'reasoning_content'] as const;

function errorMessage(e: unknown): string {
  if (typeof e === 'string') return e;
  const m = e !== null && typeof e === 'object' ? (e as Record<string, unknown>)['message'] : undefined;
  return typeof m === 'string' ? m : JSON.stringify(e);
}

/** The SSE frames that end a stream with an error after tokens were sent (the client sees why it stopped). */
export function sseErrorFrames(body: unknown): string {
  return `data: ${JSON.stringify(body)}\n\ndata: [DONE]\n\n`;
}
