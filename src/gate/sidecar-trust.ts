/**
 * The gate's check that a sidecar verifies its worker against what the route table recorded. A sidecar's `verified`
 * means "my worker matches MY descriptor, by MY trust setting"; the gate's /status and `kvgate_revision_trust` promise
 * the table's: a revision with `trust: recorded` (the default) is routed only to workers checked against its recorded
 * canary digests. A sidecar configured with `trust: declared-only`, or given another copy of the descriptor whose
 * canaries differ (an old file, digests of another revision), would vouch for a worker serving other weights, adapter,
 * tokenizer or chat template under the revision's fingerprint, since canaries are not part of it. Such an endpoint
 * is not routed, and the reason names the sidecar and what to change.
 */
import type { CompiledRevision } from '../policy/compile.js';

const CANARY_KINDS = ['tokenizer', 'chatTemplate', 'generation'] as const;
type Canaries = { readonly [K in (typeof CANARY_KINDS)[number]]?: string | undefined };

/** What a sidecar's status says about how it checks its worker (src/sidecar/status.ts `trust`, `descriptor.canaries`). */
export interface SidecarChecks {
  readonly trust?: 'recorded' | 'declared-only';
  readonly canaries?: Canaries;
}

/** `trust` and `descriptor.canaries` of a sidecar status body, as far as they are well-formed. */
export function sidecarChecksOf(body: Record<string, unknown>): SidecarChecks | undefined {
  const trust = body['trust'] === 'recorded' || body['trust'] === 'declared-only' ? body['trust'] : undefined;
  const d = body['descriptor'];
  const raw = d !== null && typeof d === 'object' ? (d as Record<string, unknown>)['canaries'] : undefined;
  let canaries: Canaries | undefined;
  if (raw !== null && typeof raw === 'object') {
    const r = raw as Record<string, unknown>;
    canaries = Object.fromEntries(CANARY_KINDS.filter((k) => typeof r[k] === 'string').map((k) => [k, r[k] as string]));
  }
  if (trust === undefined && canaries === undefined) return undefined;
  return { ...(trust === undefined ? {} : { trust }), ...(canaries === undefined ? {} : { canaries }) };
}

/**
 * Why this endpoint's sidecar does not check what the table recorded for `rev`, or null. `ownDescriptor`: the
 * endpoint declares its own descriptor (a heterogeneous pool), whose canaries are its own, so only trust is compared.
 */
export function sidecarTrustProblem(
  checks: SidecarChecks | undefined,
  rev: CompiledRevision,
  address: string,
  ownDescriptor: boolean,
): string | null {
  if (checks === undefined || rev.trust !== 'recorded') return null;
  if (checks.trust === 'declared-only') {
    return (
      `the sidecar at ${address} checks its worker on its declaration alone (trust: declared-only), but the route table ` +
      `routes revision ${rev.name} on recorded canaries; set trust: recorded in that sidecar's config and give it the ` +
      "revision's descriptor file"
    );
  }
  if (ownDescriptor || checks.canaries === undefined) return null;
  const recorded: Canaries = rev.descriptor.canaries ?? {};
  const differing = CANARY_KINDS.filter((k) => recorded[k] !== undefined && checks.canaries![k] !== recorded[k]);
  if (differing.length === 0) return null;
  const both = differing.map((k) => `${k}: table ${short(recorded[k])}, sidecar ${short(checks.canaries![k])}`).join('; ');
  return (
    `the sidecar at ${address} checks its worker against other canary digests than the route table records for ` +
    `revision ${rev.name} (${both}); give that sidecar the revision's descriptor file`
  );
}

function short(digest: string | undefined): string {
  return digest === undefined ? 'none' : `${digest.slice(0, 12)}…`;
}
