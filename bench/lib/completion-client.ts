/**
 * An OpenAI completions client that times what a user feels: time to first token (first streamed chunk that
 * carries a choice), total time, and the decode rate between the first and the last token. Non-streamed requests
 * report total time only (their first token is not observable). Never throws: failures are values.
 */
import http from 'node:http';

export interface CompletionTiming {
  readonly status: number;
  /** ms from sending to the first streamed choice; undefined when not streamed. */
  readonly ttftMs?: number;
  readonly totalMs: number;
  /** Completion tokens, from `usage` (streamed: `stream_options.include_usage`). */
  readonly tokens: number;
  /** ms from the first to the last streamed choice; undefined when not streamed. */
  readonly decodeMs?: number;
  /** The parsed JSON body (non-streamed) or the last usage chunk (streamed). */
  readonly json?: Record<string, any>;
  readonly error?: string;
}

function parseEvents(text: string): string[] {
  return text
    .split('\n\n')
    .map((e) => e.trim())
    .filter((e) => e.startsWith('data:'))
    .map((e) => e.slice(5).trim());
}

interface StreamState {
  first?: number;
  last?: number;
  usage?: Record<string, any>;
  error?: string;
  pending: string;
}

function onStreamData(state: StreamState, chunk: string, at: number): void {
  state.pending += chunk;
  const cut = state.pending.lastIndexOf('\n\n');
  if (cut < 0) return;
  const complete = state.pending.slice(0, cut);
  state.pending = state.pending.slice(cut + 2);
  for (const data of parseEvents(complete)) {
    if (data === '[DONE]') continue;
    let ev: Record<string, any>;
    try {
      ev = JSON.parse(data) as Record<string, any>;
    } catch {
      state.error ??= `unparseable event: ${data.slice(0, 80)}`;
      continue;
    }
    if (ev['error'] !== undefined) state.error ??= `error event: ${JSON.stringify(ev['error']).slice(0, 200)}`;
    if (Array.isArray(ev['choices']) && ev['choices'].length > 0) {
      state.first ??= at;
      state.last = at;
    }
    if (ev['usage'] != null) state.usage = ev;
  }
}

/** POST `body` as JSON to `url`; streamed when `body.stream` is true. */
export function postCompletion(
  url: string,
  body: Record<string, unknown>,
  headers: Record<string, string>,
  timeoutMs = 60_000,
): Promise<CompletionTiming> {
  const payload = Buffer.from(JSON.stringify(body));
  const streamed = body['stream'] === true;
  return new Promise((resolve) => {
    const t0 = performance.now();
    const fail = (status: number, error: string) => resolve({ status, totalMs: performance.now() - t0, tokens: 0, error });
    const req = http.request(url, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json', 'content-length': String(payload.length) },
      timeout: timeoutMs,
    });
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      const state: StreamState = { pending: '' };
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (streamed && status === 200 ? onStreamData(state, c, performance.now()) : (text += c)));
      res.on('error', (e) => fail(status, e.message));
      res.on('end', () => {
        const totalMs = performance.now() - t0;
        if (status !== 200) return fail(status, `status ${status}: ${text.slice(0, 300)}`);
        if (!streamed) {
          let json: Record<string, any> | undefined;
          try {
            json = JSON.parse(text) as Record<string, any>;
          } catch {
            return fail(status, 'response is not JSON');
          }
          return resolve({ status, totalMs, tokens: Number(json['usage']?.completion_tokens ?? 0), json });
        }
        onStreamData(state, '\n\n', performance.now());
        if (state.error !== undefined || state.first === undefined) return fail(status, state.error ?? 'no token was streamed');
        resolve({
          status,
          totalMs,
          ttftMs: state.first - t0,
          decodeMs: (state.last ?? state.first) - state.first,
          tokens: Number(state.usage?.['usage']?.completion_tokens ?? 0),
          ...(state.usage ? { json: state.usage } : {}),
        });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no response within ${timeoutMs} ms`)));
    req.on('error', (e) => fail(0, e.message));
    req.end(payload);
  });
}
