/**
 * Limits on client JSON that hold before anything parses or walks it. A body nested 20,000 levels deep parses
 * (V8's JSON.parse is iterative) but overflows the stack of every recursive walk after it, `JSON.stringify`
 * included; so the gate and the sidecars refuse it first, by scanning the text, with a 400 and an audit line.
 * Pure.
 */

/** The deepest object/array nesting a request body may have. OpenAI bodies (messages, tools with JSON schemas)
 * stay far below it. */
export const MAX_JSON_DEPTH = 64;

/** True when `text` opens more than `max` nested objects or arrays at some point (brackets inside strings do not
 * count). Linear, no recursion; for text that is not JSON the answer is only a bound. */
export function jsonNestingExceeds(text: string, max: number = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: jump past it (a prompt is most of a body, and nothing inside a string nests).
      const end = jsonStringEnd(text, i);
      if (end === -1) return false; // unterminated: the rest is inside it
      i = end - 1;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/**
 * The index just after the JSON string whose opening quote is at `quote`, or -1 when it is not closed. A backslash
 * escapes the character after it, so the string ends at the first quote preceded by an even run of backslashes;
 * the quotes are found with `indexOf` rather than by stepping through every character of the string.
 */
export function jsonStringEnd(text: string, quote: number): number {
  let q = text.indexOf('"', quote + 1);
  while (q !== -1) {
    let b = q - 1;
    while (text.charCodeAt(b) === 0x5c) b--; // stops at the opening quote at the latest
    if ((q - 1 - b) % 2 === 0) return q + 1;
    q = text.indexOf('"', q + 1);
  }
  return -1;
}

/**
 * Whether a parsed JSON value holds Infinity anywhere: JSON.parse reads a literal beyond a double's range (1e400) as
 * Infinity, which canonical JSON (the contract's prompt digest, the attestation's transfer digest) cannot represent
 * and JSON.stringify would pass on as null. Recursive: call it only on text `jsonNestingExceeds` accepted.
 */
export function hasNonFiniteNumber(v: unknown): boolean {
  if (typeof v === 'number') return !Number.isFinite(v);
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) {
    for (const x of v) if (hasNonFiniteNumber(x)) return true;
    return false;
  }
  for (const x of Object.values(v)) if (hasNonFiniteNumber(x)) return true;
  return false;
}

/** The body fields that make a worker load cache computed elsewhere, from wherever they point. */
export type TransferParamsField = 'kv_transfer_params' | 'ec_transfer_params';

/** Where a client body spells a transfer-parameters field: its JSON path (cut to 128 characters) and which field. */
export interface TransferParamsFound {
  readonly path: string;
  readonly field: TransferParamsField;
}

/**
 * Where vLLM would read `kv_transfer_params` or `ec_transfer_params`: `CompletionRequest`/`ChatCompletionRequest`'s
 * fields of those names, and `vllm_xargs`, whose entries become `SamplingParams.extra_args`, from which the engine's
 * `Request` takes `extra_args["kv_transfer_params"]` and `extra_args["ec_transfer_params"]` (vllm-project/vllm:
 * vllm/entrypoints/openai/protocol.py `to_sampling_params`, `extra_args = self.vllm_xargs or {}` then
 * `extra_args["kv_transfer_params"] = self.kv_transfer_params`; vllm/v1/request.py
 * `sampling_params.extra_args.get("kv_transfer_params")`; v0.10 to main, 2026). `ec_transfer_params` is the
 * encoder-cache sibling for encode/prefill/decode disaggregation: the request's field goes to `extra_args` the same
 * way (vllm/entrypoints/openai/chat_completion/protocol.py and completion/protocol.py `to_sampling_params` @002032ee;
 * tests/v1/ec_connector/unit/test_ec_transfer_params.py @03103032), and an EC connector then loads each media item's
 * encoder output from the host and port its entry names (vllm/distributed/ec_transfer/ec_connector/*
 * `has_caches`/`update_state_after_alloc`). Pydantic field names are case-sensitive, but a proxy or a future version
 * may not be, so any key that spells either name in any case, with `_`, `-` or neither, at any depth, counts.
 * `skipTopLevelKv`: a top-level key spelled exactly `kv_transfer_params` is the caller's to judge (a sidecar's).
 * Returns the first one found, or undefined.
 */
export function findTransferParams(value: unknown, skipTopLevelKv = false): TransferParamsFound | undefined {
  const stack: { v: unknown; path: string; top: boolean }[] = [{ v: value, path: '', top: true }];
  while (stack.length > 0) {
    const { v, path, top } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    // Only objects and arrays are walked further (a string or number has no keys), and a path is spelled only for
    // them: a body's prompt text and scalars cost no stack entry.
    if (Array.isArray(v)) {
      v.forEach((x, i) => {
        if (x !== null && typeof x === 'object') stack.push({ v: x, path: `${path}[${i}]`, top: false });
      });
      continue;
    }
    for (const k in v) {
      if (!Object.hasOwn(v, k)) continue;
      const x = (v as Record<string, unknown>)[k];
      const field = transferParamsField(k);
      if (field !== undefined && !(top && skipTopLevelKv && k === 'kv_transfer_params'))
        return { path: (path === '' ? k : `${path}.${k}`).slice(0, 128), field };
      if (x !== null && typeof x === 'object') stack.push({ v: x, path: path === '' ? k : `${path}.${k}`, top: false });
    }
  }
  return undefined;
}

/**
 * The field a key spells, in any case, with `_`, `-` or neither. `kvtransferparams` and `ectransferparams` have 16
 * letters, so a shorter key never spells one (most keys: no lower-casing, no regex).
 */
function transferParamsField(key: string): TransferParamsField | undefined {
  if (key.length < 16 || key.length > 32) return undefined;
  const bare = key.toLowerCase().replace(/[-_]/g, '');
  if (bare === 'kvtransferparams') return 'kv_transfer_params';
  return bare === 'ectransferparams' ? 'ec_transfer_params' : undefined;
}

/** A client-supplied value as it may appear in an error message or an audit line: JSON-quoted, at most 128
 * characters of it. */
export function quoteClientValue(value: string): string {
  return JSON.stringify(value.length > 128 ? `${value.slice(0, 128)}…` : value);
}

/** The longest `reason` an audit line carries: kvgate's own sentence, quoting client values at most 128 characters. */
export const AUDIT_REASON_MAX = 512;

/** Cut a string for an audit line field. */
export function auditCut(value: string, max = 128): string {
  return value.length > max ? `${value.slice(0, max)}…` : value;
}
