import { describe, expect, it } from 'vitest';
import type { CompiledRouteTable } from './compile.js';
import { diffRouteTables, formatRouteTableDiff } from './diff.js';
import { clone, tableFromValue, testDescriptorInput, twoRevisionTableValue } from './testing.js';

type Value = Record<string, any>;
const base = (): Value => clone(twoRevisionTableValue()) as Value;
const compiled = (v: Value): CompiledRouteTable => tableFromValue(v);
function diffAfter(mutate: (v: Value) => void, from: (v: Value) => void = () => {}): string[] {
  const a = base();
  from(a);
  const b = clone(a);
  mutate(b);
  return diffRouteTables(compiled(a), compiled(b)).map((l) => `${l.area}: ${l.text}`);
}

describe('diffRouteTables', () => {
  it('says nothing routes differently for an identical table', () => {
    expect(diffRouteTables(compiled(base()), compiled(base()))).toEqual([]);
    expect(formatRouteTableDiff([])).toBe('no routing changes\n');
  });

  it('describes a cohort weight change as who moves where, and that bindings stay', () => {
    expect(diffAfter((v) => (v['models']['llama-3-8b']['rollout']['weight'] = 25))).toEqual([
      'models: llama-b cohort 10% -> 25%: about 15% of new sessions move to llama-b; sessions holding a binding stay',
    ]);
    expect(diffAfter((v) => (v['models']['llama-3-8b']['rollout']['weight'] = 4))).toEqual([
      'models: llama-b cohort 10% -> 4%: about 6% of new sessions move back to llama-a; sessions holding a binding stay',
    ]);
  });

  it('names media origins added and removed', () => {
    const allow = (origins: string[]) => (v: Value) => (v['media'] = { allowedOrigins: origins });
    expect(diffAfter(allow(['https://media.example.com']))).toEqual([
      'settings: media.allowedOrigins: workers may now fetch client media from https://media.example.com',
    ]);
    expect(diffAfter(allow(['https://cdn.example.com']), allow(['https://media.example.com']))).toEqual([
      'settings: media.allowedOrigins: workers may now fetch client media from https://cdn.example.com',
      'settings: media.allowedOrigins: client media URLs on https://media.example.com are now refused',
    ]);
  });

  it("names priority changes: a tenant's, the default's, and a pool's scheduling policy", () => {
    const set = (priorities: Value) => (v: Value) => (v['priorities'] = priorities);
    expect(diffAfter(set({ tenants: { acme: -10 } }))).toEqual(['tenancy: tenant acme priority the default 0 -> -10 (lower goes first)']);
    expect(diffAfter(set({ tenants: { acme: -20 }, default: 5 }), set({ tenants: { acme: -10 } }))).toEqual([
      'tenancy: default priority 0 -> 5 (lower goes first; tenants without their own priority)',
      'tenancy: tenant acme priority -10 -> -20 (lower goes first)',
    ]);
    expect(diffAfter((v) => delete v['priorities'], set({ tenants: { acme: -10 } }))).toEqual([
      'tenancy: tenant acme priority -10 -> the default 0 (lower goes first)',
    ]);
    const declare = (v: Value) => ((v['pools'] as Value[])[1]!['schedulingPolicy'] = 'priority');
    expect(diffAfter(declare)).toEqual([
      "pools: pool a-decode schedulingPolicy fcfs -> priority: tenants' priorities now reach its workers (they must run vllm serve --scheduling-policy priority)",
    ]);
    expect(diffAfter((v) => delete (v['pools'] as Value[])[1]!['schedulingPolicy'], declare)).toEqual([
      'pools: pool a-decode schedulingPolicy priority -> fcfs: requests routed through it now run at priority 0',
    ]);
  });

  it('names the fingerprinted fields of a redeclared revision', () => {
    const lines = diffAfter(
      (v) => (v['revisions']['llama-b'] = { descriptor: testDescriptorInput({ weights: 'b', tokenizer: { revision: 'tok-2024-06-01' } }) }),
    );
    expect(lines[0]).toMatch(
      /^revisions: revision llama-b redeclared with another fingerprint \([0-9a-f]{12}… -> [0-9a-f]{12}…\): tokenizer revision: old runs "main", new runs "tok-2024-06-01"\. It is a new compatibility group/,
    );
  });

  it('says a revision redeclared under the same pools empties them until every worker runs the new declaration (a vLLM upgrade in place)', () => {
    const lines = diffAfter((v) => {
      v['revisions']['llama-b'] = { descriptor: testDescriptorInput({ weights: 'b', engine: { name: 'vllm', version: '0.13.0' } }) };
    });
    const line = lines.find((l) => l.includes('redeclared in place'));
    expect(line).toMatch(
      /^revisions: revision llama-b is redeclared in place under the same pools \(b-prefill, b-decode\): from this reload on, every endpoint whose worker and sidecar still run the old declaration is unverified for it and takes no traffic/,
    );
    expect(line).toContain('llama-3-8b routes new sessions to it, so that is an outage of this revision');
    expect(line).toContain('declare them as a new revision with their own pools and move the rollout weight');
    // The safe order: a new revision beside the old one changes no pool's declaration.
    expect(
      diffAfter((v) => {
        v['revisions']['llama-c'] = { descriptor: testDescriptorInput({ weights: 'b', engine: { name: 'vllm', version: '0.13.0' } }) };
      }).filter((l) => l.includes('redeclared')),
    ).toEqual([]);
  });

  it("flags a redeclared revision that keeps the old declaration's canaries or verification record", () => {
    // A copied descriptor whose weights changed but whose canaries did not lets a worker still running the old
    // weights pass its sidecar's check as the new revision; a carried-over `verified: true` opens the cohort on
    // evidence gathered for another fingerprint.
    const verified = { required: true, verified: true, evidence: 'verify #42' };
    const lines = diffAfter(
      (v) => {
        v['revisions']['llama-b']['descriptor']['model']['revision'] = 'f00dcafe';
        v['revisions']['llama-b']['descriptor']['tokenizer']['revision'] = 'tok-2';
      },
      (v) => (v['revisions']['llama-b']['verification'] = verified),
    );
    expect(lines.slice(1).filter((l) => !l.includes('redeclared in place'))).toEqual([
      "revisions: revision llama-b keeps the old declaration's tokenizer, generation canary digests although its tokenizer, weights changed: a worker still running the old declaration passes its sidecar's check as the new one; record the canaries from a worker of the new declaration (kvgate verify --record, or kvgate fingerprint --worker)",
      'revisions: revision llama-b keeps the verification record of its old declaration (verified (verify #42)): that evidence is for fingerprint ' +
        `${compiled(base()).revisions.get('llama-b')!.fingerprint.slice(0, 12)}…, not the new one; run kvgate verify against the new declaration and record its evidence`,
    ]);
    // New canaries and new evidence: only the redeclaration itself.
    const clean = diffAfter(
      (v) => {
        v['revisions']['llama-b']['descriptor']['model']['revision'] = 'f00dcafe';
        v['revisions']['llama-b']['descriptor']['canaries']['generation'] = 'e'.repeat(64);
        v['revisions']['llama-b']['verification'] = { ...verified, evidence: 'verify #43' };
      },
      (v) => (v['revisions']['llama-b']['verification'] = verified),
    );
    expect(
      clean.filter(
        (l) => !l.includes('verification: verified (verify #42) -> verified (verify #43)') && !l.includes('redeclared in place'),
      ),
    ).toHaveLength(1);
  });

  it('notes descriptor changes outside the fingerprint as the same group', () => {
    expect(diffAfter((v) => (v['revisions']['llama-b']['descriptor']['kvCache']['blockSize'] = 32))).toEqual([
      'revisions: revision llama-b descriptor changed outside the fingerprint (same group): kvCache.blockSize: 16 -> 32',
    ]);
  });

  it('covers revisions and pools added, removed and drained, endpoints and tenants', () => {
    const lines = diffAfter((v) => {
      v['revisions']['llama-c'] = { descriptor: testDescriptorInput({ chatTemplate: { revision: 'tmpl-9' } }) };
      v['pools'][3]['draining'] = true;
      v['pools'][1]['endpoints'].push({ address: '10.0.2.3:9090' });
      v['pools'][0]['tenants'] = ['acme'];
      v['models']['llama-3-8b']['tenants'] = ['acme'];
      v['pools'].push({ name: 'c-both', cluster: 'c_both', role: 'both', revision: 'llama-c', endpoints: [{ address: '10.0.9.1:9090' }] });
    });
    expect(lines).toEqual([
      expect.stringMatching(/^revisions: revision llama-c added \(fingerprint [0-9a-f]{12}…\)$/),
      'models: model llama-3-8b: tenants removed: globex (their requests are refused with 403)',
      'pools: pool a-prefill: tenants added: acme',
      'pools: pool a-prefill: tenants removed: * (this pool takes none of their requests: another pool or revision that serves them does, else they are refused with 403; kvgate explain --tenant T shows which)',
      'pools: pool a-decode endpoints added: 10.0.2.3:9090',
      'pools: pool b-decode now draining: it takes no new requests; requests in flight there finish',
      'pools: pool c-both added: role both, revision llama-c, cluster c_both, 1 endpoint(s)',
    ]);
  });

  it('describes rollout moves: candidate promoted to stable, verification passing, fallback chain, prefix scope', () => {
    expect(diffAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' }))).toEqual([
      'models: model llama-3-8b stable llama-a -> llama-b: new sessions outside the candidate cohort go to llama-b; bindings to llama-a are no longer honoured (it left the rollout)',
      'models: model llama-3-8b candidate llama-b removed (was 10%): it is now stable and takes every new session',
    ]);
    const verified = diffAfter(
      (v) => (v['revisions']['llama-b']['verification'] = { required: true, verified: true, evidence: 'verify #42' }),
      (v) => (v['revisions']['llama-b']['verification'] = { required: true }),
    );
    expect(verified).toEqual([
      'revisions: revision llama-b verification: required, not passed -> verified (verify #42)',
      'models: llama-b cohort now receives traffic (0% -> 10% effective, verification passed): about 10% of new sessions move to llama-b; sessions holding a binding stay',
    ]);
    expect(
      diffAfter((v) => {
        v['fallback'] = [
          { queue: { deadlineMs: 2000, maxDepth: 50 } },
          { routeVia: { revisions: ['llama-a'] } },
          { refuse: { retryAfterSeconds: 3 } },
        ];
        v['tenancy']['prefixScope'] = 'shared';
      }),
    ).toEqual([
      'tenancy: prefix scope tenant -> shared: every group id changes, so prefix caches start cold, bindings are re-checked and queued requests are refused',
      'fallback: fallback chain [refuse, retry after 5 s] -> [queue 2000 ms, depth 50, fifo -> routeVia llama-a (not pinned, no adapter) -> refuse, retry after 3 s]',
    ]);
  });

  it('formats areas in a fixed order', () => {
    const a = base();
    const b = clone(a);
    b['models']['llama-3-8b']['rollout']['weight'] = 20;
    b['pools'][2]['draining'] = true;
    expect(formatRouteTableDiff(diffRouteTables(compiled(a), compiled(b)))).toBe(
      'models:\n  - llama-b cohort 10% -> 20%: about 10% of new sessions move to llama-b; sessions holding a binding stay\n' +
        'pools:\n  - pool b-prefill now draining: it takes no new requests; requests in flight there finish\n',
    );
  });
});
