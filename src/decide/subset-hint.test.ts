import { describe, expect, it } from 'vitest';
import { inSubset, readSubsetHint } from './subset-hint.js';

describe('the GIE subset hint', () => {
  it('absent, a list, a comma string, bare IPs and IPv6', () => {
    expect(readSubsetHint({})).toBeNull();
    expect(readSubsetHint({ 'envoy.lb': { 'x-gateway-destination-endpoint-subset': ['10.0.0.1:80'] } })).toBeNull(); // wrong namespace
    const h = readSubsetHint({
      'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': ['10.0.0.1:80,10.0.0.2', '[fd00::1]:80'] },
    })!;
    expect(h.size).toBe(3);
    expect(inSubset(h, '10.0.0.1:80')).toBe(true);
    expect(inSubset(h, '10.0.0.1:81')).toBe(false);
    expect(inSubset(h, '10.0.0.2:9090')).toBe(true);
    expect(inSubset(h, '[fd00::1]:80')).toBe(true);
    expect(readSubsetHint({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': '10.0.0.3:80, 10.0.0.4:80' } })!.size).toBe(
      2,
    );
    expect(readSubsetHint({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': [] } })!.size).toBe(0);
  });
});
