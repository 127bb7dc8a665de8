/**
 * The test API server against what kube-apiserver does (the upstream file and version are cited in the sources):
 * label selector syntax and its 400.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseLabelSelector } from './selector.js';
import { startKubeApiServer, type KubeApiServer } from './server.js';

const NS = 'ns';
let api: KubeApiServer | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

async function get(path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${api!.url}${path}`, { headers: { authorization: 'Bearer test-token' } });
  return { status: res.status, body: await res.text() };
}

describe('label selectors (apimachinery labels/selector.go, v1.33)', () => {
  const m = (sel: string, labels: Record<string, string>): boolean => parseLabelSelector(sel)(labels);

  it('matches equality, inequality, set-based, existence and numeric requirements as upstream does', () => {
    expect(m('', {})).toBe(true);
    expect(m('app=x', { app: 'x' })).toBe(true);
    expect(m('app==x', { app: 'y' })).toBe(false);
    // `!=` and `notin` match a pod that lacks the key altogether.
    expect(m('app!=x', {})).toBe(true);
    expect(m('env notin (a,b)', {})).toBe(true);
    expect(m('env notin (a,b)', { env: 'a' })).toBe(false);
    expect(m('env in (a, b)', { env: 'b' })).toBe(true);
    expect(m('env in (a,b)', {})).toBe(false);
    expect(m('env', { env: '' })).toBe(true);
    expect(m('!env', { env: '' })).toBe(false);
    expect(m('!env,app=x', { app: 'x' })).toBe(true);
    // An empty value is a value: `a=` needs the label present and empty; `a in ()` is `a in ("")`.
    expect(m('a=', { a: '' })).toBe(true);
    expect(m('a=', {})).toBe(false);
    expect(m('a in ()', { a: '' })).toBe(true);
    // `in`/`notin` are identifiers where a value is expected.
    expect(m('in in (in)', { in: 'in' })).toBe(true);
    expect(m('gpu>2', { gpu: '4' })).toBe(true);
    expect(m('gpu<2', { gpu: 'x' })).toBe(false);
    expect(m('kvgate.io/revision=llama-a,app=llama', { app: 'llama', 'kvgate.io/revision': 'llama-a' })).toBe(true);
  });

  it('refuses what kube-apiserver refuses', () => {
    for (const bad of [
      'a=b,', // a comma needs a requirement after it
      ',a=b',
      'a=b c',
      '!a=b', // `!key` takes no operator
      'a in (x',
      'a in x',
      'a in (x) y',
      'a>x', // gt/lt take an integer
      'a>',
      'rev=a@b', // not a label value
      'rev=a/b',
      'rev=-a',
      `rev=${'a'.repeat(64)}`, // 63 at most
      'a/b/c=x', // at most one prefix
      '/a=x',
      'Example.com/a=x', // the prefix is a lowercase DNS subdomain
      `${'a'.repeat(64)}=x`,
      '=x',
    ])
      expect(() => parseLabelSelector(bad), bad).toThrow();
    expect(() => parseLabelSelector(`rev=${'a'.repeat(63)}`)).not.toThrow();
  });

  it('answers 400 BadRequest with a Status for an invalid selector, on a list and on a watch', async () => {
    api = await startKubeApiServer();
    for (const watch of ['', '&watch=true']) {
      const r = await get(`/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent('kvgate.io/revision=llama@1')}${watch}`);
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body)).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'BadRequest', code: 400 });
    }
  });
});
