/**
 * Checks for the payloads minted and verified on every routed request (contract, binding, attestation), written by
 * hand rather than run through their zod schemas. Each builder (contract.ts `contractPayload`, binding.ts
 * `bindingPayload`, attestation.ts `attestationPayload`) applies its schema's rules one for one (non-empty strings,
 * lowercase sha256 hex, safe non-negative integer times and counts, a non-empty window, at most 8 alternates, no
 * unknown keys) and writes the payload in the schema's key order, so a token is byte for byte what `Schema.parse`
 * then `signToken` wrote (mint-payload.test.ts holds both to that on generated inputs). Why: zod's generic parse
 * cost more than the HMAC itself, in the gate and on the sidecars' time to first token. Verification (token.ts
 * `openToken`) tries the builder first and lets the zod schema speak for a payload the builder refuses, so refusals
 * keep the schema's wording.
 */
const SHA256_HEX = /^[0-9a-f]{64}$/;

/** `decode.alternates` holds at most this many (TransferContractSchema). */
export const MAX_ALTERNATES = 8;

/** Thrown for fields their schema would refuse; names the field. A caller bug: a verifier would refuse the token. */
export class InvalidPayloadError extends Error {
  constructor(kind: string, where: string, what: string) {
    super(`cannot mint the ${kind}: ${where} ${what}`);
    this.name = 'InvalidPayloadError';
  }
}

export type Fail = (where: string, what: string) => never;

export const failFor =
  (kind: string): Fail =>
  (where, what) => {
    throw new InvalidPayloadError(kind, where, what);
  };

export function onlyKeys(v: object, allowed: ReadonlySet<string>, where: string, fail: Fail): void {
  for (const k of Object.keys(v)) if (!allowed.has(k)) fail(`${where}${k}`, 'is not a field of it');
}

export function text(v: unknown, where: string, fail: Fail): string {
  if (typeof v !== 'string' || v.length === 0) fail(where, 'must be a non-empty string');
  return v as string;
}

export function textOrNull(v: unknown, where: string, fail: Fail): string | null {
  return v === null ? null : text(v, where, fail);
}

export function epoch(v: unknown, where: string, fail: Fail): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(where, 'must be a non-negative integer (ms)');
  return v as number;
}

/** `z.number().int().nonnegative()`: a safe integer, zero or more (zod 4's `int()` admits safe integers only). */
export function count(v: unknown, where: string, fail: Fail): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(where, 'must be a non-negative integer');
  return v as number;
}

/** `z.number().int().positive()`. */
export function positive(v: unknown, where: string, fail: Fail): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) fail(where, 'must be a positive integer');
  return v as number;
}

export function digest(v: unknown, where: string, fail: Fail): string {
  if (typeof v !== 'string' || !SHA256_HEX.test(v)) fail(where, 'must be a lowercase hex sha256 digest (64 characters)');
  return v as string;
}

export function object(v: unknown, where: string, fail: Fail): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) fail(where, 'must be an object');
  return v as Record<string, unknown>;
}

export function window(issuedAtMs: number, expiresAtMs: number, fail: Fail): void {
  if (!(expiresAtMs > issuedAtMs)) fail('expiresAtMs', 'must be after issuedAtMs');
}
