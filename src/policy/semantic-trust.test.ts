import { describe, expect, it } from 'vitest';
import type { ConfigIssue } from '../config/issues.js';
import { routeTableFromValue } from './load.js';
import { twoRevisionTableValue } from './testing.js';

type Value = Record<string, any>;

function load(mutate: (v: Value) => void): { ok: boolean; issues: ConfigIssue[]; value?: ReturnType<typeof routeTableFromValue> } {
  const v = twoRevisionTableValue() as Value;
  mutate(v);
  const r = routeTableFromValue(v, { file: 't.yaml' });
  return { ok: r.ok, issues: r.ok ? [...r.value.warnings] : r.error, value: r };
}

describe('a routable revision needs recorded behaviour (safe by default)', () => {
  it('refuses to load a table whose routable revision has no canaries, and says how to record them', () => {
    const r = load((v) => delete v['revisions']['llama-b']['descriptor']['canaries']);
    expect(r.ok).toBe(false);
    const i = r.issues.find((x) => x.path === 'revisions.llama-b.descriptor.canaries')!;
    expect(i.severity).toBe('error');
    expect(i.message).toMatch(/revision "llama-b" has pools but no recorded tokenizer, chatTemplate, generation canary digests/);
    expect(i.fix).toMatch(/kvgate verify .*--record llama-b/);
    expect(i.fix).toMatch(/kvgate fingerprint --worker/);
    expect(i.fix).toMatch(/trust: declared-only/);
  });

  it('names the one missing digest', () => {
    const r = load((v) => delete v['revisions']['llama-a']['descriptor']['canaries']['generation']);
    expect(r.ok).toBe(false);
    expect(r.issues.map((i) => i.message).join('\n')).toMatch(/"llama-a" has pools but no recorded generation canary digest[^s]/);
  });

  it('says the digests of an adapter revision are probed under the adapter', () => {
    const r = load((v) => {
      v['revisions']['llama-b']['descriptor']['adapter'] = { id: 'acme/support-lora', revision: 'r1' };
      delete v['revisions']['llama-b']['descriptor']['canaries'];
    });
    expect(r.issues.map((i) => i.message).join('\n')).toMatch(/for adapter acme\/support-lora, probed under the adapter's model name/);
  });

  it('ignores a revision without pools (it takes no traffic)', () => {
    const r = load(
      (v) => (v['revisions']['llama-c'] = { descriptor: { ...v['revisions']['llama-a']['descriptor'], canaries: undefined } }),
    );
    expect(r.ok).toBe(true);
  });

  it('trust: declared-only is the loud way around: a warning, and the compiled revision carries it', () => {
    const r = load((v) => {
      delete v['revisions']['llama-b']['descriptor']['canaries'];
      v['revisions']['llama-b']['trust'] = 'declared-only';
    });
    expect(r.ok).toBe(true);
    const w = r.issues.find((x) => x.path === 'revisions.llama-b.trust')!;
    expect(w.severity).toBe('warning');
    expect(w.message).toMatch(/routed on its declaration alone \(trust: declared-only\).*NOT detected/);
    const v = r.value!;
    if (!v.ok) throw new Error('unreachable');
    const compiled = v.value;
    expect(compiled.revisions.get('llama-b')!.trust).toBe('declared-only');
    expect(compiled.revisions.get('llama-a')!.trust).toBe('recorded');
  });

  it('rejects an unknown trust value', () => {
    const r = load((v) => (v['revisions']['llama-b']['trust'] = 'yolo'));
    expect(r.ok).toBe(false);
    expect(r.issues[0]!.path).toBe('revisions.llama-b.trust');
  });

  it('warns when two routable revisions that declare other weights record the same generation digest (a copied descriptor)', () => {
    // Copying llama-a's descriptor for llama-b and changing only the weights revision keeps llama-a's canaries: a
    // worker that still runs llama-a's weights would then pass llama-b's sidecar check.
    const r = load((v) => {
      v['revisions']['llama-b']['descriptor']['canaries'] = { ...v['revisions']['llama-a']['descriptor']['canaries'] };
    });
    expect(r.ok).toBe(true);
    const w = r.issues.filter((x) => x.message.includes('same canary'));
    expect(w.map((x) => [x.severity, x.path])).toEqual([['warning', 'revisions.llama-b.descriptor.canaries']]);
    expect(w[0]!.message).toMatch(
      /revision "llama-b" records the same canary digest as "llama-a" for generation, although they declare different weights: a worker of one passes the other's sidecar check/,
    );
    expect(w[0]!.fix).toMatch(/--record llama-b/);
    // The examples share tokenizer and chat-template digests legitimately: the same tokenizer and template.
    expect(load(() => {}).issues.filter((x) => x.message.includes('same canary'))).toEqual([]);
  });
});
