import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareTokens, positionsCompared, textContext } from './compare.js';

const id = fc.integer({ min: 0, max: 200_000 });
const ids = fc.array(id, { maxLength: 64 });

describe('compareTokens', () => {
  it('calls equal sequences equal, with their length', () => {
    fc.assert(
      fc.property(ids, (a) => {
        expect(compareTokens(a, [...a])).toEqual({ kind: 'equal', length: a.length });
      }),
    );
  });

  it('finds any single changed token at its position, with both ids', () => {
    fc.assert(
      fc.property(
        fc.array(id, { minLength: 1, maxLength: 64 }).chain((a) => fc.tuple(fc.constant(a), fc.nat({ max: a.length - 1 }), id)),
        ([a, pos, replacement]) => {
          fc.pre(a[pos] !== replacement);
          const b = [...a];
          b[pos] = replacement;
          expect(compareTokens(b, a)).toEqual({
            kind: 'diverged',
            position: pos,
            via: replacement,
            baseline: a[pos],
            differing: 1,
            viaLength: a.length,
            baselineLength: a.length,
          });
        },
      ),
    );
  });

  it('reports the FIRST divergence: everything before it is equal, and counts every differing position', () => {
    fc.assert(
      fc.property(ids, ids, (a, b) => {
        const c = compareTokens(a, b);
        const shared = Math.min(a.length, b.length);
        const diffs = [...Array(shared).keys()].filter((i) => a[i] !== b[i]);
        if (diffs.length === 0) {
          expect(c.kind).toBe(a.length === b.length ? 'equal' : 'length_mismatch');
          return;
        }
        expect(c.kind).toBe('diverged');
        if (c.kind !== 'diverged') return;
        expect(c.position).toBe(diffs[0]);
        expect(a.slice(0, c.position)).toEqual(b.slice(0, c.position));
        expect([c.via, c.baseline]).toEqual([a[c.position], b[c.position]]);
        expect(c.differing).toBe(diffs.length);
        expect(positionsCompared(c)).toBe(shared);
      }),
    );
  });

  it('reports a strict prefix as a length mismatch at the shorter length, naming the longer side and its next token', () => {
    fc.assert(
      fc.property(ids, fc.array(id, { minLength: 1, maxLength: 8 }), fc.boolean(), (a, tail, viaLonger) => {
        const long = [...a, ...tail];
        const c = viaLonger ? compareTokens(long, a) : compareTokens(a, long);
        expect(c).toEqual({
          kind: 'length_mismatch',
          position: a.length,
          longer: viaLonger ? 'via' : 'baseline',
          next: tail[0],
          viaLength: viaLonger ? long.length : a.length,
          baselineLength: viaLonger ? a.length : long.length,
        });
        expect(positionsCompared(c)).toBe(a.length);
      }),
    );
  });

  it('never calls two sequences equal unless they are identical', () => {
    fc.assert(
      fc.property(ids, ids, (a, b) => {
        expect(compareTokens(a, b).kind === 'equal').toBe(JSON.stringify(a) === JSON.stringify(b));
      }),
    );
  });
});

describe('textContext', () => {
  it('shows the shared text and what each side wrote next', () => {
    expect(textContext('The capital of France is Paris.', 'The capital of France is a river.', 10)).toEqual({
      common: '...France is ',
      via: 'Paris.',
      baseline: 'a river.',
      sameText: false,
    });
  });

  it('does not cut a short common prefix and flags identical texts', () => {
    expect(textContext('abc', 'abd')).toEqual({ common: 'ab', via: 'c', baseline: 'd', sameText: false });
    expect(textContext('same', 'same')).toEqual({ common: 'same', via: '', baseline: '', sameText: true });
  });

  it('never splits a character outside the basic plane', () => {
    const c = textContext('x😀a', 'x😀b', 1);
    expect(c).toEqual({ common: '...😀', via: 'a', baseline: 'b', sameText: false });
  });
});
