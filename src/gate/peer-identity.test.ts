import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { identitiesOf, parseSubjectAltName, roleOf } from './peer-identity.js';

const raw = Buffer.from('not really DER, only hashed');
const sha = createHash('sha256').update(raw).digest('hex');
/** A certificate with these SANs; its own bytes (so its fingerprint is not `sha`) unless it is the fingerprinted one. */
const cert = (san: string, bytes: Buffer = Buffer.from(`cert with ${san}`)) => ({ raw: bytes, subjectaltname: san });
const allow = {
  public: ['spiffe://cluster.local/ns/kvgate/sa/envoy-public', 'dns:edge.example.com'],
  internal: ['spiffe://cluster.local/ns/kvgate/sa/envoy-internal', `sha256:${sha.toUpperCase().match(/../g)!.join(':')}`],
};

describe('parseSubjectAltName', () => {
  it("reads Node's format, JSON-quoted values included, so a SAN cannot smuggle a second entry", () => {
    expect(parseSubjectAltName('DNS:a.example, URI:spiffe://x/y, IP Address:10.0.0.1')).toEqual([
      { type: 'DNS', value: 'a.example' },
      { type: 'URI', value: 'spiffe://x/y' },
      { type: 'IP Address', value: '10.0.0.1' },
    ]);
    expect(parseSubjectAltName('URI:"spiffe://evil, URI:spiffe://cluster.local/ns/kvgate/sa/envoy-internal"')).toEqual([
      { type: 'URI', value: 'spiffe://evil, URI:spiffe://cluster.local/ns/kvgate/sa/envoy-internal' },
    ]);
  });
});

describe('roleOf', () => {
  it('derives the role from the verified certificate: SPIFFE URI, DNS name or fingerprint', () => {
    expect(roleOf(cert('URI:spiffe://cluster.local/ns/kvgate/sa/envoy-public'), allow)).toMatchObject({ ok: true, role: 'public' });
    expect(roleOf(cert('DNS:EDGE.example.com'), allow)).toMatchObject({ ok: true, role: 'public' });
    expect(roleOf(cert('URI:spiffe://cluster.local/ns/kvgate/sa/envoy-internal'), allow)).toMatchObject({ ok: true, role: 'internal' });
    expect(roleOf(cert('', raw), allow)).toMatchObject({ ok: true, role: 'internal', matched: expect.stringMatching(/^sha256:/) });
    expect(identitiesOf(cert('', raw)).sha256).toBe(sha);
  });

  it('refuses a peer in no allowlist, a peer in both, and no certificate', () => {
    const other = { raw: Buffer.from('another cert'), subjectaltname: 'URI:spiffe://cluster.local/ns/default/sa/curl' };
    expect(roleOf(other, allow)).toMatchObject({ ok: false, reason: 'not_allowed' });
    expect(
      roleOf(cert('URI:spiffe://cluster.local/ns/kvgate/sa/envoy-public', raw), { public: allow.public, internal: [`sha256:${sha}`] }),
    ).toMatchObject({ ok: false, reason: 'ambiguous' });
    expect(roleOf(undefined, allow)).toMatchObject({ ok: false, reason: 'no_certificate' });
    // The smuggled SAN above is one URI, not the internal identity.
    expect(
      roleOf(
        { raw: Buffer.from('x'), subjectaltname: 'URI:"spiffe://evil, URI:spiffe://cluster.local/ns/kvgate/sa/envoy-internal"' },
        allow,
      ),
    ).toMatchObject({ ok: false });
  });
});
