/**
 * Reading a request: the OpenAI body (only what routing needs, strictly), and the tenant, user and session the
 * route table's tenancy config says to trust. Pure: bytes and header maps in, values or refusal errors out.
 */
import { BoundedCache } from '../bounded-cache.js';
import { refusedRequestField } from '../client-request-fields.js';
import { err, KvgateError, ok, type Result } from '../errors.js';
import { findTransferParams, hasNonFiniteNumber, jsonNestingExceeds, MAX_JSON_DEPTH, quoteClientValue } from '../json-limits.js';
import { type MediaPolicy, NO_MEDIA_ORIGINS } from '../media-url.js';
import type { PrefixScope, SessionConfig, Tenancy } from '../policy/schema.js';
import { rewrittenFieldError } from '../rewritten-fields.js';
import type { OpenAiRequest, RequestFacts } from './types.js';

const ENDPOINTS: Readonly<Record<string, OpenAiRequest['endpoint']>> = {
  '/v1/completions': 'completions',
  '/v1/chat/completions': 'chat',
};

export interface BodyLimits {
  readonly maxBodyBytes: number;
}

/** Strict: invalid UTF-8 throws instead of becoming U+FFFD. One decoder for every request (it keeps no state between calls). */
const utf8 = new TextDecoder('utf-8', { fatal: true });

const bad = (message: string): { ok: false; error: KvgateError } => err(new KvgateError('bad_request', message));

/**
 * Parse and check an OpenAI completions or chat body. Refuses before any worker sees it: oversized bodies,
 * non-JSON, wrong field types, and any client-sent `kv_transfer_params` (only kvgate's sidecars may set it) or
 * `ec_transfer_params` (kvgate sets none). `media`: the route table's media origins (default none: only `data:` media).
 */
export function parseOpenAiBody(
  path: string,
  body: Uint8Array,
  limits: BodyLimits,
  media: MediaPolicy = NO_MEDIA_ORIGINS,
): Result<OpenAiRequest, KvgateError> {
  // Exactly the paths the sidecars serve (src/sidecar/openai-body.ts ENDPOINT_PATHS), as vLLM does: a trailing slash
  // read away here would be routed, minted a contract, and answered 404 by the sidecar with no code and no audit line.
  const route = path.split('?')[0]!;
  const endpoint = ENDPOINTS[route];
  if (endpoint === undefined) {
    return bad(
      `kvgate routes only POST /v1/completions and /v1/chat/completions, not ${quoteClientValue(route || '/')}; send the request to one of those`,
    );
  }
  if (body.byteLength > limits.maxBodyBytes) {
    return err(
      new KvgateError(
        'body_too_large',
        `the request body is ${body.byteLength} bytes, over this gateway's limit of ${limits.maxBodyBytes} bytes; shorten the prompt or ask the operator to raise limits.maxBodyBytes`,
        { detail: { maxBodyBytes: limits.maxBodyBytes } },
      ),
    );
  }
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return bad('the request body is not valid UTF-8; send a UTF-8 encoded JSON object');
  }
  if (text.trim() === '') return bad('the request body is empty; send a JSON object with at least "model"');
  // Before parsing: a body nested deeper than any OpenAI request would overflow every recursive walk after the parse.
  if (jsonNestingExceeds(text)) {
    return bad(
      `the request body nests objects or arrays more than ${MAX_JSON_DEPTH} levels deep; no OpenAI request needs that, flatten it`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    // Only the position: the parser's own message quotes the body, and prompt text never goes into errors or logs.
    const at = /position (\d+)/.exec(e instanceof Error ? e.message : '')?.[1];
    return bad(
      `the request body is not valid JSON${at === undefined ? '' : ` (syntax error at byte ${at})`}; send a JSON object such as {"model": "...", "messages": [...]}`,
    );
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    return bad('the request body must be a JSON object, e.g. {"model": "...", "messages": [...]}');
  }
  const obj = json as Record<string, unknown>;
  const transfer = findTransferParams(obj);
  if (transfer !== undefined) {
    const at = quoteClientValue(transfer.path);
    return err(
      new KvgateError(
        'kv_params_forbidden',
        transfer.field === 'kv_transfer_params'
          ? `kv_transfer_params is set by kvgate's sidecars, never by a client (found at ${at}); remove it from the request`
          : `ec_transfer_params would make the worker load encoder outputs from wherever they point; kvgate routes no encoder disaggregation and never takes them from a client (found at ${at}); remove it from the request`,
      ),
    );
  }
  // As at the sidecars (src/sidecar/http-io.ts parseJsonObject): no digest can be computed over Infinity, so minting
  // the contract would fail as an internal error, and every sidecar would refuse the body anyway.
  if (hasNonFiniteNumber(obj)) {
    return bad('the request body holds a number beyond the range of a double (such as 1e400); send finite numbers');
  }
  const fieldError = checkFields(obj, endpoint, media);
  if (fieldError !== undefined) return bad(fieldError);
  const user = optionalString(obj['user']);
  const cacheSalt = optionalString(obj['cache_salt']);
  return ok(
    Object.freeze({
      endpoint,
      model: obj['model'] as string,
      stream: obj['stream'] === true,
      ...(user === undefined ? {} : { user }),
      ...(cacheSalt === undefined ? {} : { cacheSalt }),
      json: obj,
    }),
  );
}

const optionalString = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function checkFields(obj: Record<string, unknown>, endpoint: OpenAiRequest['endpoint'], media: MediaPolicy): string | undefined {
  const model = obj['model'];
  if (typeof model !== 'string' || model.trim() === '') {
    return model === undefined
      ? 'the request has no "model"; add "model": "<served model name>"'
      : '"model" must be a non-empty string naming a served model (or LoRA adapter)';
  }
  for (const key of ['user', 'cache_salt'] as const) {
    const v = obj[key];
    if (v !== undefined && v !== null && typeof v !== 'string') return `"${key}" must be a string; got ${typeName(v)}`;
  }
  if (obj['cache_salt'] === '') return '"cache_salt" must not be empty; remove it or give it a value';
  const stream = obj['stream'];
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') {
    return `"stream" must be true or false; got ${typeName(stream)}`;
  }
  const shape = endpoint === 'chat' ? checkMessages(obj['messages']) : checkPrompt(obj);
  // On either path: client media ids and media URLs, beam search, a client priority, the other path's prompt (src/client-request-fields.ts),
  // and what vLLM would refuse in a field a prefill leg rewrites, before any prefill leg (src/rewritten-fields.ts).
  return shape ?? refusedRequestField(obj, endpoint, media) ?? rewrittenFieldError(endpoint, obj, { echoOnly: true });
}

function checkMessages(messages: unknown): string | undefined {
  if (messages === undefined) return 'a chat completion needs "messages": [{"role": "user", "content": "..."}]';
  if (!Array.isArray(messages) || messages.length === 0) {
    return '"messages" must be a non-empty array of {"role": ..., "content": ...} objects';
  }
  const i = messages.findIndex(
    (m) => m === null || typeof m !== 'object' || Array.isArray(m) || typeof (m as { role?: unknown }).role !== 'string',
  );
  if (i !== -1) return `messages[${i}] must be an object with a string "role"`;
  return undefined;
}

function checkPrompt(obj: Record<string, unknown>): string | undefined {
  const prompt = obj['prompt'];
  if (prompt === undefined || prompt === null) {
    return obj['prompt_embeds'] === undefined ? 'a completion needs "prompt": a string, a list of strings or token ids' : undefined;
  }
  const isInt = (x: unknown) => Number.isInteger(x);
  const valid =
    typeof prompt === 'string' ||
    (Array.isArray(prompt) &&
      prompt.length > 0 &&
      (prompt.every((p) => typeof p === 'string') ||
        prompt.every(isInt) ||
        prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isInt))));
  return valid ? undefined : '"prompt" must be a string, a non-empty list of strings, a list of token ids, or a list of token-id lists';
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `${typeof v} ${typeof v === 'string' ? quoteClientValue(v) : JSON.stringify(v)}`;
}

/** Where the tenant came from (for traces and the audit log), or why there is none. */
export type TenantLookup =
  | { readonly kind: 'found'; readonly tenant: string; readonly from: string }
  | { readonly kind: 'missing'; readonly from: string }
  | { readonly kind: 'ambiguous'; readonly from: string; readonly detail: string }
  | { readonly kind: 'invalid'; readonly from: string; readonly why: string };

/**
 * A header value without the whitespace HTTP itself strips around field values (RFC 9110 section 5.5: SP and HTAB),
 * which Envoy's codecs already remove. Not `String.prototype.trim`, which also strips U+00A0, U+FEFF, U+2028, U+3000
 * and the other Unicode spaces: an identity ending in one of those (two or three bytes of valid UTF-8 that Envoy passes
 * as they are) would become another tenant's, with its prefix cache and its model access.
 */
function trimOws(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  let start = 0;
  let end = value.length;
  while (start < end && isOws(value.charCodeAt(start))) start++;
  while (end > start && isOws(value.charCodeAt(end - 1))) end--;
  return start === 0 && end === value.length ? value : value.slice(start, end);
}

const isOws = (c: number): boolean => c === 0x20 || c === 0x09;

const NOT_UTF8 = 'is not valid UTF-8';

/**
 * Why a `!` in a header that came in `value` is no identity. Envoy with `send_header_raw_value` off sends values
 * through `MessageUtil::sanitizeUtf8String`, which writes `!` for every byte that is not UTF-8 (envoyproxy/envoy
 * `source/common/protobuf/utility.cc`; `mutation_utils.cc` `headersToProto` at 4519ef40).
 */
export const SANITIZED =
  "holds a '!' and came from an Envoy whose runtime guard envoy.reloadable_features.send_header_raw_value is off, " +
  "which writes '!' for every byte that is not UTF-8, so it cannot be told from another identity; turn the guard back on " +
  "(Envoy's default since 1.27) or keep '!' out of identity headers";

/** Read the tenant from the one source the table trusts (a header set by auth, or Envoy dynamic metadata). */
export function tenantOf(
  facts: Pick<RequestFacts, 'headers' | 'metadata' | 'invalidHeaders' | 'sanitizedHeaders'>,
  tenancy: Tenancy,
): TenantLookup {
  const { header, metadata } = tenancy.source;
  if (header !== undefined) {
    const from = `header ${header}`;
    // Decoded strictly: a lossy decoding would make `t-\xE9` and `t-\xFF` the same tenant, sharing a cache.
    if (facts.invalidHeaders?.includes(header) === true) return { kind: 'invalid', from, why: NOT_UTF8 };
    if (facts.sanitizedHeaders?.includes(header) === true) return { kind: 'invalid', from, why: SANITIZED };
    const v = trimOws(facts.headers[header]);
    if (v === undefined || v === '') return { kind: 'missing', from };
    if (v.includes(',')) return { kind: 'ambiguous', from, detail: 'it carries more than one value' };
    return { kind: 'found', tenant: v, from };
  }
  const ns = metadata!.namespace;
  const from = `metadata ${ns} ${metadata!.path.join('.')}`;
  // Own properties only, at every step: an inherited one (`constructor`, `toString`, or whatever a prototype carries)
  // is never a tenant.
  let cur: unknown = Object.hasOwn(facts.metadata, ns) ? facts.metadata[ns] : undefined;
  for (const key of metadata!.path) {
    cur =
      cur !== null && typeof cur === 'object' && !Array.isArray(cur) && Object.hasOwn(cur, key)
        ? (cur as Record<string, unknown>)[key]
        : undefined;
  }
  if (cur === undefined || cur === null || cur === '') return { kind: 'missing', from };
  if (typeof cur === 'string') return { kind: 'found', tenant: cur, from };
  if (typeof cur === 'number' && Number.isFinite(cur)) return { kind: 'found', tenant: String(cur), from };
  return { kind: 'ambiguous', from, detail: `it is ${Array.isArray(cur) ? 'a list' : typeof cur}, not a string` };
}

/** The user for `tenant-user` prefix scope: the trusted user header if configured, else the body's `user`. */
export function userOf(facts: Pick<RequestFacts, 'headers' | 'body'>, tenancy: Tenancy): string | null {
  if (tenancy.userHeader !== undefined) {
    const v = trimOws(facts.headers[tenancy.userHeader]);
    return v === undefined || v === '' ? null : v;
  }
  const u = facts.body?.user;
  return u === undefined || u === '' ? null : u;
}

/** The session key (cohort and stickiness), from the configured session header. */
export function sessionOf(facts: Pick<RequestFacts, 'headers'>, session: SessionConfig): string | null {
  const v = trimOws(facts.headers[session.header]);
  return v === undefined || v === '' ? null : v;
}

/**
 * The tenant prefix scope: which requests may share cached prefixes. Components are URI-encoded so no tenant or
 * user id can forge a separator (`acme/x` never collides with tenant `acme`, user `x`). Requests without a tenant
 * share the `anonymous` scope, which no named tenant can reach.
 */
export function tenantScopeOf(scope: PrefixScope, tenant: string | null, user: string | null): string {
  if (scope === 'shared') return 'shared';
  if (tenant === null) return 'anonymous';
  // Per tenant the scope is one string, kept: a routed stream holds it until its response (in its binding), and a
  // string built per request would be one more per open stream.
  if (scope === 'tenant') return tenantScopes.get(tenant, tenantScopeText);
  return `tenant-user:${encodeURIComponent(tenant)}/${encodeURIComponent(user ?? '')}`;
}

const tenantScopes = new BoundedCache<string>(4096);
const tenantScopeText = (tenant: string): string => `tenant:${encodeURIComponent(tenant)}`;
