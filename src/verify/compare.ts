/**
 * Token-level comparison of a disaggregated answer against the non-disaggregated baseline. Pure.
 *
 * Token ids are the evidence because text is not: KV computed by another revision decodes into fluent, wrong text,
 * and two different id sequences can even render the same string (an EOS, another segmentation). So the verdict
 * depends on ids alone; text only helps a person see where the answers parted.
 */

/** How two id sequences relate. Positions are 0-based indices into the generated tokens. */
export type Comparison =
  | { readonly kind: 'equal'; readonly length: number }
  | {
      readonly kind: 'diverged';
      /** The first position where both have a token and the tokens differ. */
      readonly position: number;
      readonly via: number;
      readonly baseline: number;
      /** How many of the positions both sequences have differ (a measure of how far apart they ran). */
      readonly differing: number;
      readonly viaLength: number;
      readonly baselineLength: number;
    }
  | {
      /** One sequence is a strict prefix of the other: equal as far as the shorter goes. */
      readonly kind: 'length_mismatch';
      /** = the shorter length: the first position only one side has. */
      readonly position: number;
      readonly longer: 'via' | 'baseline';
      /** The token the longer side has at `position`. */
      readonly next: number;
      readonly viaLength: number;
      readonly baselineLength: number;
    };

/** Compare the via path's ids with the baseline's: equal, the first divergent position, or a length mismatch. */
export function compareTokens(via: readonly number[], baseline: readonly number[]): Comparison {
  const shared = Math.min(via.length, baseline.length);
  let first = -1;
  let differing = 0;
  for (let i = 0; i < shared; i++) {
    if (via[i] !== baseline[i]) {
      differing++;
      if (first < 0) first = i;
    }
  }
  const lengths = { viaLength: via.length, baselineLength: baseline.length };
  if (first >= 0) return { kind: 'diverged', position: first, via: via[first]!, baseline: baseline[first]!, differing, ...lengths };
  if (via.length === baseline.length) return { kind: 'equal', length: via.length };
  const longer = via.length > baseline.length ? 'via' : 'baseline';
  const next = (longer === 'via' ? via : baseline)[shared]!;
  return { kind: 'length_mismatch', position: shared, longer, next, ...lengths };
}

/** Positions both sides had, i.e. how many token pairs the comparison looked at. */
export function positionsCompared(c: Comparison): number {
  return c.kind === 'equal' ? c.length : Math.min(c.viaLength, c.baselineLength);
}

/** A short, human-readable view of where the two texts part (ids decide; this only helps a person look). */
export interface TextContext {
  /** The tail of the text both answers share, up to `width` characters (prefixed with "..." when cut). */
  readonly common: string;
  /** What each side wrote next, up to `width` characters. */
  readonly via: string;
  readonly baseline: string;
  /** True when the texts are identical although the ids are not (EOS, segmentation, special tokens). */
  readonly sameText: boolean;
}

/** Where the response texts first differ, with a little context either side. */
export function textContext(viaText: string, baselineText: string, width = 32): TextContext {
  const via = [...viaText];
  const base = [...baselineText];
  let i = 0;
  while (i < via.length && i < base.length && via[i] === base[i]) i++;
  const start = Math.max(0, i - width);
  const common = `${start > 0 ? '...' : ''}${via.slice(start, i).join('')}`;
  return {
    common,
    via: via.slice(i, i + width).join(''),
    baseline: base.slice(i, i + width).join(''),
    sameText: viaText === baselineText,
  };
}
