/**
 * Fault injection: run-time faults for the whole worker (`POST /admin/faults`) and deterministic faults for one
 * request (`x-sim-fault: kind[=value], ...`). The catalogue is documented in README.md ("Faults").
 * Pure parsing; the server and engine apply them.
 */
import { z } from 'zod';
import { err, ok, type Result } from '../../src/errors.js';
import { formatIssues } from './config.js';

export const FaultStateSchema = z
  .object({
    /** Fraction of completion requests answered with `errorStatus` (randomness injected). */
    errorRate: z.number().min(0).max(1).default(0),
    errorStatus: z.number().int().min(400).max(599).default(500),
    /** The side channel refuses handshakes (D sees a failed handshake). */
    handshakeRefusal: z.boolean().default(false),
    /** The side channel answers block reads this much later. */
    transferDelayMs: z.number().int().min(0).default(0),
    /** The side channel never answers block reads (D gives up after its `transferTimeoutMs`). */
    transferTimeout: z.boolean().default(false),
    /** The side channel rejects read-completion notifications (D counts failed notifications). */
    notifyFailure: z.boolean().default(false),
    /** Cut every streamed response after this many tokens (non-streamed: drop before answering). */
    dropAfterTokens: z.number().int().min(0).nullable().default(null),
    /** Delay before each completion request is handled. */
    slowMs: z.number().int().min(0).default(0),
    /** Streams pause once this many tokens were sent, until the fault is cleared (a test looks at a stream mid-flight). */
    holdStreamAfterTokens: z.number().int().min(1).nullable().default(null),
  })
  .strict();

export type FaultState = z.infer<typeof FaultStateSchema>;

/** Body of `POST /admin/faults`: a partial state, `reset` to clear first, `expireLeasesNow` as a one-shot action. */
export const FaultPatchSchema = FaultStateSchema.partial()
  .extend({ reset: z.boolean().optional(), expireLeasesNow: z.boolean().optional() })
  .strict();
export type FaultPatch = z.input<typeof FaultPatchSchema>;

export const NO_FAULTS: FaultState = Object.freeze(FaultStateSchema.parse({}));

export function parseFaultPatch(input: unknown): Result<z.infer<typeof FaultPatchSchema>, string> {
  const r = FaultPatchSchema.safeParse(input);
  return r.success ? ok(r.data) : err(formatIssues(r.error.issues, FaultPatchSchema, input, ['faults']));
}

/** Faults one request asked for through `x-sim-fault`. */
export interface RequestFaults {
  /** Answer with this HTTP status (vLLM error shape) instead of serving. */
  readonly error?: number;
  readonly dropAfterTokens?: number;
  readonly slowMs?: number;
  /** D: this request's handshake fails as if refused (bypasses the handshake cache). */
  readonly handshakeFail?: boolean;
  /** D: this request's block read times out. */
  readonly transferTimeout?: boolean;
  /** D: extra delay on this request's block read. */
  readonly transferDelayMs?: number;
  /** P: lease duration for this request's blocks (0 = expired at once). */
  readonly leaseMs?: number;
}

const FLAG_KINDS = { 'handshake-fail': 'handshakeFail', 'transfer-timeout': 'transferTimeout' } as const;
const NUMBER_KINDS = {
  error: 'error',
  drop: 'dropAfterTokens',
  slow: 'slowMs',
  'transfer-delay': 'transferDelayMs',
  'lease-ms': 'leaseMs',
} as const;

export const FAULT_HEADER = 'x-sim-fault';

/** Parse `x-sim-fault`; errors name the bad item and the accepted kinds. */
export function parseFaultHeader(value: string | undefined): Result<RequestFaults, string> {
  const out: Record<string, number | boolean> = {};
  if (value === undefined || value.trim() === '') return ok(out);
  for (const raw of value.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const [kind = '', arg] = item.split('=', 2).map((s) => s.trim());
    if (kind in FLAG_KINDS && arg === undefined) {
      out[FLAG_KINDS[kind as keyof typeof FLAG_KINDS]] = true;
      continue;
    }
    if (kind in NUMBER_KINDS && arg !== undefined && /^\d+$/.test(arg)) {
      const n = Number(arg);
      if (kind === 'error' && (n < 400 || n > 599)) return err(`${FAULT_HEADER}: error status ${n} must be 400-599`);
      out[NUMBER_KINDS[kind as keyof typeof NUMBER_KINDS]] = n;
      continue;
    }
    return err(
      `${FAULT_HEADER}: cannot parse "${item}"; use ${Object.keys(FLAG_KINDS).join(', ')}, or ` +
        `${Object.keys(NUMBER_KINDS)
          .map((k) => `${k}=<integer>`)
          .join(', ')}, separated by commas`,
    );
  }
  return ok(out);
}
