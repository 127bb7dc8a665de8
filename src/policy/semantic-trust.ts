/**
 * Safe by default: a revision takes traffic only once its behaviour is recorded. The descriptor's canary digests
 * (what a known-good worker of the revision answers to kvgate's fixed tokenizer, chat-template and greedy-generation
 * probes) are what let a sidecar tell a worker serving other weights, another adapter, tokenizer or template from one
 * that serves the declared revision; without them every one of those fields is taken on trust. The only way around it
 * is the per-revision `trust: declared-only`, reported here as a warning every time the table is checked.
 */
import { canonicalJson } from '../compat/canonical-json.js';
import type { CompatDescriptor } from '../compat/descriptor.js';
import type { CheckContext } from './semantic-groups.js';

const CANARY_KINDS = ['tokenizer', 'chatTemplate', 'generation'] as const;

/** Which declared fields each canary digest stands for: when they differ, a worker's answer to that probe should too. */
export const CANARY_MEANING = [
  { canary: 'tokenizer', what: 'tokenizer', fields: (d: CompatDescriptor): unknown => [d.tokenizer] },
  { canary: 'chatTemplate', what: 'chat template', fields: (d: CompatDescriptor): unknown => [d.chatTemplate] },
  { canary: 'generation', what: 'weights', fields: (d: CompatDescriptor): unknown => [d.model.id, d.model.revision, d.adapter] },
] as const;

/** The canary kinds two descriptors record the same digest for although the fields behind them differ. */
export function sharedCanaries(a: CompatDescriptor, b: CompatDescriptor): (typeof CANARY_MEANING)[number][] {
  return CANARY_MEANING.filter(({ canary, fields }) => {
    const digest = a.canaries?.[canary];
    return digest !== undefined && digest === b.canaries?.[canary] && canonicalJson(fields(a)) !== canonicalJson(fields(b));
  });
}

/** How to record the digests, in the words `policy check` prints (README and docs/operator-guide.md show the same flow). */
export function recordCanariesFix(revision: string): string {
  return (
    `record them from a known-good worker of "${revision}": kvgate verify --via <kvgate URL> --baseline <worker URL> ` +
    `--prompts <file> --record ${revision} --policy <this file> (writes them on a pass), or kvgate fingerprint --worker <URL> ` +
    `--descriptor <its descriptor> and paste the printed canaries: block into the revision's descriptor; ` +
    `only if you accept unverified workers, set revisions.${revision}.trust: declared-only`
  );
}

/** Which canary digests a descriptor lacks. */
export function missingCanaries(canaries: { readonly [K in (typeof CANARY_KINDS)[number]]?: string | undefined } | undefined): string[] {
  return CANARY_KINDS.filter((k) => canaries?.[k] === undefined);
}

/** A routable revision (one with pools) needs recorded canaries, unless it opts out loudly. */
export function checkRecordedBehaviour(ctx: CheckContext): void {
  const { table } = ctx;
  for (const [name, rev] of Object.entries(table.revisions)) {
    if (!table.pools.some((p) => p.revision === name)) continue; // not routable: nothing to trust yet
    const missing = missingCanaries(rev.descriptor.canaries);
    const adapter =
      rev.descriptor.adapter === null ? '' : ` (for adapter ${rev.descriptor.adapter.id}, probed under the adapter's model name)`;
    if ((rev.trust ?? 'recorded') === 'declared-only') {
      ctx.add(
        ['revisions', name, 'trust'],
        `revision "${name}" is routed on its declaration alone (trust: declared-only): a worker serving other weights, ` +
          `adapter, tokenizer or chat template than declared is NOT detected${missing.length === 0 ? ', although canaries are recorded' : ''}`,
        `record its canaries${adapter} and remove trust: declared-only`,
        'warning',
      );
      continue;
    }
    if (missing.length === 0) {
      sameCanariesAsEarlier(ctx, name);
      continue;
    }
    ctx.add(
      rev.descriptorFile === null ? ['revisions', name, 'descriptor', 'canaries'] : ['revisions', name, 'descriptorFile'],
      `revision "${name}" has pools but no recorded ${missing.join(', ')} canary digest${missing.length > 1 ? 's' : ''}${adapter}` +
        `${rev.descriptorFile === null ? '' : ` in ${rev.descriptorFile}`}; without them no sidecar can tell its workers from ones serving ` +
        'other weights, adapter, tokenizer or chat template, so it takes no traffic',
      recordCanariesFix(name),
    );
  }
}

/**
 * A routable revision whose digest equals an earlier routable revision's although the fields behind it differ: the
 * canaries were copied with the descriptor, so a worker of the one passes the other's sidecar check (the very mix-up
 * the canaries exist to catch). A warning: a tokenizer revision bump with identical files can answer the same.
 */
function sameCanariesAsEarlier(ctx: CheckContext, name: string): void {
  const { table } = ctx;
  const rev = table.revisions[name]!;
  for (const [other, o] of Object.entries(table.revisions)) {
    if (other === name) break; // each pair once, reported on the later revision
    if (!table.pools.some((p) => p.revision === other)) continue;
    const shared = sharedCanaries(o.descriptor, rev.descriptor);
    if (shared.length === 0) continue;
    ctx.add(
      rev.descriptorFile === null ? ['revisions', name, 'descriptor', 'canaries'] : ['revisions', name, 'descriptorFile'],
      `revision "${name}" records the same canary digest as "${other}" for ${shared.map((c) => c.canary).join(', ')}, although they ` +
        `declare different ${shared.map((c) => c.what).join(', ')}: a worker of one passes the other's sidecar check, so a ` +
        'worker deployed with the wrong weights, tokenizer or template goes unnoticed (were the canaries copied with the descriptor?)',
      recordCanariesFix(name),
      'warning',
    );
  }
}
