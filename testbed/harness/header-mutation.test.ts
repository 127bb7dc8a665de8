/**
 * Unit tests for the pure mutation code, after Envoy's mutation_utils_test.cc / mutation_rules_test.cc.
 */
import { describe, expect, it } from 'vitest';
import type { MutationRulesConfig } from './envoy-config-types.js';
import type { WireHeaderMutation } from './ext-proc-messages.js';
import { setHeader } from './fake-ext-proc.js';
import { HeaderMap, sanitizeUtf8 } from './header-map.js';
import { applyHeaderMutation, type AppendSemantics } from './header-mutation.js';
import { DEFAULT_MUTATION_RULES, createMutationChecker } from './mutation-rules.js';

const base = (): HeaderMap =>
  new HeaderMap([
    [':authority', 'example.com'],
    [':path', '/v1/chat'],
    [':method', 'POST'],
    [':scheme', 'http'],
    ['x-existing', 'one'],
    ['content-length', '10'],
  ]);

function apply(
  mutation: WireHeaderMutation,
  opts: {
    rules?: Partial<MutationRulesConfig>;
    semantics?: AppendSemantics;
    replacing?: boolean;
    headers?: HeaderMap;
    rawValue?: boolean;
  } = {},
): { headers: HeaderMap; out: ReturnType<typeof applyHeaderMutation> } {
  const headers = opts.headers ?? base();
  const out = applyHeaderMutation(mutation, headers, {
    checker: createMutationChecker({ ...DEFAULT_MUTATION_RULES, ...opts.rules }),
    replacingMessage: opts.replacing ?? false,
    removeContentLength: false,
    semantics: opts.semantics ?? 'envoy',
    rawValue: opts.rawValue ?? true,
  });
  return { headers, out };
}

describe('values', () => {
  it('reads raw_value; value alone sets the header to the empty string (envoy#31555)', () => {
    const { headers, out } = apply({
      set_headers: [{ header: { key: 'x-raw', raw_value: Buffer.from('r') } }, { header: { key: 'x-text', value: 'ignored' } }],
    });
    expect(out.error).toBeUndefined();
    expect(headers.get('x-raw')).toBe('r');
    expect(headers.get('x-text')).toBe('');
  });

  it('with send_header_raw_value off it reads value and ignores raw_value; both set is still an error', () => {
    const { headers, out } = apply(
      { set_headers: [{ header: { key: 'x-raw', raw_value: Buffer.from('r') } }, { header: { key: 'x-text', value: 'tenant-é' } }] },
      { rawValue: false },
    );
    expect(out.error).toBeUndefined();
    expect(headers.get('x-raw')).toBe('');
    expect(Buffer.from(headers.get('x-text') ?? '', 'latin1').toString('utf8')).toBe('tenant-é');
    const both = apply({ set_headers: [{ header: { key: 'x', value: 'a', raw_value: Buffer.from('b') } }] }, { rawValue: false });
    expect(both.out.error).toBe('Only one of value or raw_value in the HeaderValue message should be set.');
  });

  it('both value and raw_value is an error', () => {
    const { out } = apply({ set_headers: [{ header: { key: 'x', value: 'a', raw_value: Buffer.from('b') } }] });
    expect(out.error).toBe('Only one of value or raw_value in the HeaderValue message should be set.');
    expect(out.rejected).toBe(1);
  });

  it('invalid characters in a name or value are errors', () => {
    expect(apply({ set_headers: [setHeader('bad name', 'v')] }).out.error).toBe('Invalid character in set_headers mutation.');
    expect(apply({ set_headers: [setHeader('x-ok', 'line\nbreak')] }).out.error).toBe('Invalid character in set_headers mutation.');
    expect(apply({ remove_headers: ['bad name'] }).out.error).toBe('Invalid character in remove_headers mutation.');
  });
});

describe('rules', () => {
  it('refuses routing and x-envoy headers by default, silently, counting each', () => {
    const { headers, out } = apply({
      set_headers: [
        setHeader('host', 'evil'),
        setHeader(':authority', 'evil'),
        setHeader('x-envoy-original-dst-host', '1.2.3.4:80'),
        setHeader(':method', 'GET'),
        setHeader(':scheme', 'https'),
      ],
    });
    expect(out.error).toBeUndefined();
    expect(out.rejected).toBe(5);
    expect(headers.get(':authority')).toBe('example.com');
    expect(headers.has('x-envoy-original-dst-host')).toBe(false);
    expect(headers.get(':method')).toBe('POST');
  });

  it('allows them when relaxed (allow_all_routing, allow_envoy)', () => {
    const { headers, out } = apply(
      { set_headers: [setHeader(':authority', 'other.example'), setHeader('x-envoy-original-dst-host', '1.2.3.4:80')] },
      { rules: { allowAllRouting: true, allowEnvoy: true } },
    );
    expect(out.rejected).toBe(0);
    expect(headers.get(':authority')).toBe('other.example');
    expect(headers.get('x-envoy-original-dst-host')).toBe('1.2.3.4:80');
  });

  it(':path is mutable; removing :path or host is always refused', () => {
    const { headers, out } = apply(
      { set_headers: [setHeader(':path', '/rewritten')], remove_headers: [':path', 'host'] },
      { rules: { allowAllRouting: true } },
    );
    expect(headers.get(':path')).toBe('/rewritten');
    expect(out.rejected).toBe(2);
  });

  it('disallow_is_error turns a refusal into an error', () => {
    const { out } = apply({ set_headers: [setHeader('x-envoy-foo', 'x')] }, { rules: { disallowIsError: true } });
    expect(out.error).toBe('Invalid attempt to modify x-envoy-foo');
  });

  it('disallow_system, disallow_all and the expressions (disallow wins over allow)', () => {
    expect(apply({ set_headers: [setHeader(':path', '/x')] }, { rules: { disallowSystem: true } }).out.rejected).toBe(1);
    expect(apply({ set_headers: [setHeader('x-a', '1')] }, { rules: { disallowAll: true } }).out.rejected).toBe(1);
    const { headers, out } = apply(
      { set_headers: [setHeader('x-a', '1'), setHeader('x-b', '2')] },
      { rules: { disallowAll: true, allowExpression: 'x-.*', disallowExpression: 'x-b' } },
    );
    expect(headers.get('x-a')).toBe('1');
    expect(headers.has('x-b')).toBe(false);
    expect(out.rejected).toBe(1);
  });

  it(':status must be a number >= 200', () => {
    const headers = new HeaderMap([[':status', '200']]);
    expect(apply({ set_headers: [setHeader(':status', '100')] }, { headers }).out.rejected).toBe(1);
    expect(apply({ set_headers: [setHeader(':status', 'abc')] }, { headers }).out.rejected).toBe(1);
    apply({ set_headers: [setHeader(':status', '201')] }, { headers });
    expect(headers.get(':status')).toBe('201');
  });

  it('CONTINUE_AND_REPLACE may change :method', () => {
    const { headers } = apply({ set_headers: [setHeader(':method', 'PUT')] }, { replacing: true });
    expect(headers.get(':method')).toBe('PUT');
  });
});

describe('append semantics', () => {
  const cases: Array<[Parameters<typeof setHeader>[2], AppendSemantics, string[]]> = [
    // Released Envoy reads only the legacy `append` (default false = overwrite) and ignores append_action.
    ['default', 'envoy', ['new']],
    ['append', 'envoy', ['new']],
    ['add_if_absent', 'envoy', ['new']],
    ['legacy_append', 'envoy', ['one', 'new']],
    // The documented append_action semantics, on request.
    ['default', 'append_action', ['one', 'new']],
    ['append', 'append_action', ['one', 'new']],
    ['add_if_absent', 'append_action', ['one']],
    ['overwrite', 'append_action', ['new']],
    ['overwrite_if_exists', 'append_action', ['new']],
    ['legacy_append', 'append_action', ['one', 'new']],
  ];
  it.each(cases)('%s under %s semantics on an existing header', (action, semantics, expected) => {
    const { headers } = apply({ set_headers: [setHeader('x-existing', 'new', action)] }, { semantics });
    expect(headers.getAll('x-existing')).toEqual(expected);
  });

  it('OVERWRITE_IF_EXISTS on an absent header does nothing (append_action semantics) and counts the divergence', () => {
    const { headers, out } = apply({ set_headers: [setHeader('x-absent', 'v', 'overwrite_if_exists')] }, { semantics: 'append_action' });
    expect(headers.has('x-absent')).toBe(false);
    expect(out.divergent).toBe(1);
  });

  it('overwrite is the same under both readings and is not counted as divergent', () => {
    expect(apply({ set_headers: [setHeader('x-existing', 'v', 'overwrite')] }).out.divergent).toBe(0);
    expect(apply({ set_headers: [setHeader('x-existing', 'v', 'default')] }).out.divergent).toBe(1);
  });

  it('appending to a pseudo-header is refused', () => {
    const { headers, out } = apply({ set_headers: [setHeader(':path', '/x', 'legacy_append')] });
    expect(out.rejected).toBe(1);
    expect(headers.getAll(':path')).toEqual(['/v1/chat']);
  });
});

describe('limits', () => {
  it('more than 100 set entries is an error', () => {
    const many = Array.from({ length: 101 }, (_, i) => setHeader(`x-${i}`, 'v'));
    expect(apply({ set_headers: many }).out.error).toMatch(/exceed the HCM header countlimit 100/);
  });
});

describe('sanitizeUtf8 (Envoy MessageUtil::sanitizeUtf8String, for send_header_raw_value off)', () => {
  it("keeps well-formed UTF-8 and writes '!' for each byte of an ill-formed sequence, one at a time", () => {
    const s = (...b: number[]) => sanitizeUtf8(new Uint8Array(b));
    expect(s(0x61, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80)).toBe('aé€😀');
    expect(s(0x61, 0xff)).toBe('a!');
    expect(s(0xc0, 0x80)).toBe('!!'); // overlong NUL
    expect(s(0xed, 0xa0, 0x80)).toBe('!!!'); // a surrogate
    expect(s(0xf4, 0x90, 0x80, 0x80)).toBe('!!!!'); // above U+10FFFF
    expect(s(0xe2, 0x82, 0x61)).toBe('!!a'); // cut short
  });

  it('HeaderMap.toProto(false) sends value only, sanitised; toProto() raw_value bytes as they are', () => {
    const h = new HeaderMap([['x-tenant', 't-\xff']]);
    expect(h.toProto(false).headers).toEqual([{ key: 'x-tenant', value: 't-!' }]);
    expect(h.toProto().headers).toEqual([{ key: 'x-tenant', raw_value: Buffer.from([0x74, 0x2d, 0xff]) }]);
  });
});
