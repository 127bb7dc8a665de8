/**
 * Just enough of Server-Sent Events to tell, before the first token is sent to a client, whether a streamed
 * completion began with tokens or with a failure. Pure: text in, events out.
 */

/** Splits a byte stream (decoded as UTF-8 text) into SSE events and returns each event's joined `data:` lines. */
export class SseSplitter {
  /** The text since the last event ended, in the pieces it came in (it holds no blank line). */
  #pending: string[] = [];
  #carriageReturn = false;

  /**
   * Feed more text; returns the data of every event completed by it (events with no data lines are skipped). Linear
   * in what is fed: the text of an event that has not ended is kept in pieces and searched once, never joined or
   * re-scanned per chunk, so a worker streaming one endless event costs what it sends, not its square.
   */
  push(text: string): string[] {
    // A CR ends a line at once; a CRLF split between two chunks is still one line end, not two.
    const raw = this.#carriageReturn && text.startsWith('\n') ? text.slice(1) : text;
    if (text.length > 0) this.#carriageReturn = text.endsWith('\r');
    const more = raw.replace(/\r\n?/g, '\n');
    const out: string[] = [];
    let from = 0;
    const last = this.#pending.at(-1);
    if (last?.endsWith('\n') && more.startsWith('\n')) {
      // The blank line began at the end of the text before.
      this.#pending[this.#pending.length - 1] = last.slice(0, -1);
      this.#emit(out);
      from = 1;
    }
    for (let i = more.indexOf('\n\n', from); i >= 0; i = more.indexOf('\n\n', from)) {
      this.#pending.push(more.slice(from, i));
      this.#emit(out);
      from = i + 2;
    }
    if (from < more.length) this.#pending.push(more.slice(from));
    return out;
  }

  #emit(out: string[]): void {
    const block = this.#pending.join('');
    this.#pending = [];
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length > 0) out.push(data.join('\n'));
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
