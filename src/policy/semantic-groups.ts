/**
 * Semantic checks about compatibility groups: what each revision fingerprints to, which clusters and endpoints
 * belong to which group, and whether the KV connector can actually move blocks between a group's prefill and
 * decode pools. These are the checks that keep a mixed-revision or untransferable route from ever being loaded.
 */
import { canonicalJson } from '../compat/canonical-json.js';
import { checkDescriptor, checkTransfer, type CompatVerdict } from '../compat/connector-rules.js';
import type { CompatDescriptor } from '../compat/descriptor.js';
import { describeFingerprintDiff, tryFingerprintOf } from '../compat/fingerprint.js';
import { cacheDtypeWarning } from '../compat/vllm-cache-dtypes.js';
import { issue, listOf, type PathSegment, type ConfigIssue } from '../config/issues.js';
import type { Pool, RouteTable } from './schema.js';

/** Shared state of one `checkRouteTable` run. */
export interface CheckContext {
  readonly table: RouteTable;
  readonly file: string;
  /** Fingerprint per revision; absent when the descriptor cannot be fingerprinted (already reported). */
  readonly fingerprints: ReadonlyMap<string, string>;
  /** Connector rules' verdict per fingerprinted revision (whether its KV may move between workers). */
  readonly connector: ReadonlyMap<string, CompatVerdict>;
  add(path: readonly PathSegment[], message: string, fix: string, severity?: 'error' | 'warning'): void;
}

const short = (fp: string): string => fp.slice(0, 12);

/**
 * Every revision's fingerprint and connector verdict, computed once per load (the compiled table reuses both); a
 * descriptor that cannot be normalised is reported here, once.
 */
export function fingerprintRevisions(
  table: RouteTable,
  out: ConfigIssue[],
): { fingerprints: Map<string, string>; connector: Map<string, CompatVerdict> } {
  const fps = new Map<string, string>();
  const connector = new Map<string, CompatVerdict>();
  for (const [name, rev] of Object.entries(table.revisions)) {
    const r = tryFingerprintOf(rev.descriptor);
    if (r.ok) {
      fps.set(name, r.value);
      connector.set(name, checkDescriptor(rev.descriptor, table.connectorMode));
    } else {
      const at = rev.descriptorFile === null ? ['revisions', name, 'descriptor'] : ['revisions', name, 'descriptorFile'];
      out.push(issue(table.source, at, `revision "${name}": ${r.error.reason}`, 'correct the descriptor fields named above'));
    }
  }
  return { fingerprints: fps, connector };
}

/** Per-endpoint declared descriptors must fingerprint exactly like their pool's revision. */
export function checkEndpointDescriptors(ctx: CheckContext): void {
  ctx.table.pools.forEach((pool, i) => {
    const fp = ctx.fingerprints.get(pool.revision);
    const rev = ctx.table.revisions[pool.revision];
    if (fp === undefined || rev === undefined) return;
    pool.endpoints.forEach((ep, j) => {
      if (ep.descriptor === undefined) return;
      const at = ['pools', i, 'endpoints', j, 'descriptor'];
      const r = tryFingerprintOf(ep.descriptor);
      if (!r.ok) {
        ctx.add(at, `endpoint ${ep.address}: ${r.error.reason}`, 'correct the descriptor fields named above');
        return;
      }
      if (r.value === fp) return;
      const diff = describeFingerprintDiff(rev.descriptor, ep.descriptor, { a: `revision ${pool.revision}`, b: ep.address });
      ctx.add(
        at,
        `endpoint ${ep.address} of pool "${pool.name}" declares fingerprint ${short(r.value)}…, but the pool's revision ` +
          `"${pool.revision}" is ${short(fp)}…, so one pool would mix two compatibility groups (${diff.join('; ')})`,
        `move ${ep.address} to a pool of its own revision, or redeploy it with revision "${pool.revision}"'s configuration`,
      );
    });
  });
}

/** One Envoy cluster is one group: Envoy load-balances inside a cluster, so all its pools need one revision. */
export function checkClusters(ctx: CheckContext): void {
  const firstByCluster = new Map<string, { pool: Pool; index: number }>();
  ctx.table.pools.forEach((pool, i) => {
    const first = firstByCluster.get(pool.cluster);
    if (first === undefined) {
      firstByCluster.set(pool.cluster, { pool, index: i });
      return;
    }
    if (first.pool.revision !== pool.revision) {
      ctx.add(
        ['pools', i, 'cluster'],
        `pools "${first.pool.name}" (revision ${first.pool.revision}) and "${pool.name}" (revision ${pool.revision}) ` +
          `share Envoy cluster "${pool.cluster}"; a cluster must hold one compatibility group, or Envoy could send a ` +
          'request of one revision to a worker of the other',
        `give pool "${pool.name}" its own Envoy cluster (e.g. "${pool.cluster}_${pool.revision}")`,
      );
    }
  });
}

/**
 * Two revision names for one descriptor are one compatibility group under two names: a rollout between them changes
 * nothing a worker computes, and verifying one says nothing new. Mostly a descriptor copied for a new revision and
 * not yet edited, so a warning (a deliberate alias is possible).
 */
export function checkDuplicateGroups(ctx: CheckContext): void {
  const byFingerprint = new Map<string, string>();
  for (const name of Object.keys(ctx.table.revisions)) {
    const fp = ctx.fingerprints.get(name);
    if (fp === undefined) continue;
    const first = byFingerprint.get(fp);
    if (first === undefined) {
      byFingerprint.set(fp, name);
      continue;
    }
    const rev = ctx.table.revisions[name]!;
    ctx.add(
      rev.descriptorFile === null ? ['revisions', name, 'descriptor'] : ['revisions', name, 'descriptorFile'],
      `revisions "${first}" and "${name}" declare the same descriptor (fingerprint ${short(fp)}…): they are one compatibility group under two names, so a rollout between them changes no weights, adapter, tokenizer or template, and verifying one proves nothing about the other`,
      `give "${name}" its own descriptor (its weights revision, adapter, tokenizer, chat template), or use one revision name for both`,
      'warning',
    );
  }
}

/** Addresses must not appear twice in a pool, nor in pools of different revisions (one worker runs one revision). */
export function checkAddresses(ctx: CheckContext): void {
  const seen = new Map<string, { pool: Pool; index: number }>();
  ctx.table.pools.forEach((pool, i) => {
    const inPool = new Set<string>();
    pool.endpoints.forEach((ep, j) => {
      const at = ['pools', i, 'endpoints', j, 'address'];
      if (inPool.has(ep.address)) {
        ctx.add(at, `endpoint ${ep.address} is listed twice in pool "${pool.name}"`, 'remove the duplicate entry');
        return;
      }
      inPool.add(ep.address);
      const other = seen.get(ep.address);
      if (other !== undefined && other.pool.revision !== pool.revision) {
        ctx.add(
          at,
          `endpoint ${ep.address} is in pool "${other.pool.name}" (revision ${other.pool.revision}) and in pool ` +
            `"${pool.name}" (revision ${pool.revision}); one worker serves one revision`,
          `remove ${ep.address} from the pool whose revision it does not run`,
        );
      }
      if (other === undefined) seen.set(ep.address, { pool, index: i });
    });
  });
}

/** Revisions split into prefill and decode pools must be transferable by their connector (e.g. no dynamic FP8 scales). */
export function checkConnectorRules(ctx: CheckContext): void {
  const { table } = ctx;
  for (const [name, rev] of Object.entries(table.revisions)) {
    const split = table.pools.filter((p) => p.revision === name && p.role !== 'both');
    const v = ctx.connector.get(name);
    if (split.length === 0 || v === undefined) continue;
    const at = rev.descriptorFile === null ? ['revisions', name, 'descriptor'] : ['revisions', name, 'descriptorFile'];
    const pools = listOf(split.map((p) => p.name));
    if (v.verdict === 'refuse') {
      ctx.add(
        at,
        `revision "${name}" cannot be disaggregated, but pools ${pools} split it into prefill and decode: ${v.reasons.join('; ')}`,
        `serve revision "${name}" from role: both pools only, or change its KV configuration so the connector can transfer it`,
      );
    }
    for (const w of v.warnings) {
      ctx.add(at, `revision "${name}": ${w}`, 'recheck the connector rules for this engine version', 'warning');
    }
  }
}

/**
 * A revision whose KV cache dtype its declared vLLM would refuse at start (`compat/vllm-cache-dtypes.ts`): a warning,
 * since the lists are read per release and a build may accept more; a version without a list is not checked.
 */
export function checkCacheDtypes(ctx: CheckContext): void {
  for (const [name, rev] of Object.entries(ctx.table.revisions)) {
    const w = cacheDtypeWarning(rev.descriptor);
    if (w === undefined) continue;
    const at = rev.descriptorFile === null ? ['revisions', name, 'descriptor', 'kvCache', 'dtype'] : ['revisions', name, 'descriptorFile'];
    const file = rev.descriptorFile === null ? '' : ` (in ${rev.descriptorFile})`;
    ctx.add(
      at,
      `revision "${name}"${file}: ${w}`,
      'declare the --kv-cache-dtype the workers are started with, one of the values listed, or correct engine.version if the workers run another vLLM',
      'warning',
    );
  }
}

interface Member {
  readonly label: string;
  readonly descriptor: CompatDescriptor;
  readonly path: readonly PathSegment[];
}

/**
 * Within one group, every prefill-capable pool must be able to hand KV to every decode-capable pool: block sizes
 * and vLLM's own NIXL handshake hash (which hashes the raw model path) are outside the fingerprint, so two
 * revisions or endpoints of one group can still fail the handshake at run time.
 */
export function checkGroupTransfers(ctx: CheckContext): void {
  const { table } = ctx;
  const membersOf = (pool: Pool, i: number): Member[] => {
    const rev = table.revisions[pool.revision];
    if (rev === undefined) return [];
    const own: Member[] = [
      { label: `pool "${pool.name}" (revision ${pool.revision})`, descriptor: rev.descriptor, path: ['pools', i, 'revision'] },
    ];
    const fp = ctx.fingerprints.get(pool.revision);
    pool.endpoints.forEach((ep, j) => {
      // An endpoint of another group is reported by checkEndpointDescriptors; here only true members count.
      const epFp = ep.descriptor === undefined ? undefined : tryFingerprintOf(ep.descriptor);
      if (ep.descriptor !== undefined && epFp?.ok === true && epFp.value === fp) {
        own.push({
          label: `endpoint ${ep.address} of pool "${pool.name}"`,
          descriptor: ep.descriptor,
          path: ['pools', i, 'endpoints', j, 'descriptor'],
        });
      }
    });
    return own;
  };
  const byGroup = new Map<string, { prefill: Member[]; decode: Member[]; split: boolean }>();
  table.pools.forEach((pool, i) => {
    const fp = ctx.fingerprints.get(pool.revision);
    if (fp === undefined) return;
    const g = byGroup.get(fp) ?? { prefill: [], decode: [], split: false };
    byGroup.set(fp, g);
    const members = membersOf(pool, i);
    if (pool.role !== 'decode') g.prefill.push(...members);
    if (pool.role !== 'prefill') g.decode.push(...members);
    if (pool.role !== 'both') g.split = true;
  });
  const reported = new Set<string>();
  for (const g of byGroup.values()) {
    if (!g.split) continue;
    for (const p of g.prefill) {
      for (const d of g.decode) {
        const key = `${canonicalJson(p.descriptor)}\n${canonicalJson(d.descriptor)}`;
        if (p.descriptor === d.descriptor || reported.has(key)) continue;
        const v = checkTransfer(p.descriptor, d.descriptor, table.connectorMode);
        if (v.verdict !== 'refuse') continue;
        reported.add(key);
        ctx.add(
          d.path,
          `${p.label} and ${d.label} are one compatibility group, but KV cannot move from the first to the second: ${v.reasons.join('; ')}`,
          'declare identical raw values (model path, block size, KV dtype) for every member of the group, or give them separate revisions and pools',
        );
      }
    }
  }
}
