/**
 * Names a reviewer reads as something else: a tenant, model, revision or pool name with an invisible character
 * (zero-width, bidi override, BOM, a control character) or space at either end is an error, since the name is then
 * not the one anybody sees in the file, and no request header or body writes it by accident. A name that mixes Latin
 * with Cyrillic or Greek letters (`аcme` with a Cyrillic а), or is not in Unicode NFC (`é` as e + combining accent),
 * is a warning: it may be meant, but it matches only requests that spell it byte for byte the same.
 */
import type { PathSegment } from '../config/issues.js';
import type { CheckContext } from './semantic-groups.js';

const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;
const EDGE_SPACE = /^\s|\s$/u;
const LATIN = /\p{Script=Latin}/u;
const LOOKALIKE = /[\p{Script=Cyrillic}\p{Script=Greek}]/u;

const codePoint = (ch: string): string => `U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
/** The name quoted with its invisible characters written as escapes, so the message shows what the file holds. */
const shown = (name: string): string =>
  JSON.stringify(name).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, (ch) => `\\u${ch.codePointAt(0)!.toString(16).padStart(4, '0')}`);

export function checkNameText(ctx: CheckContext): void {
  const { table } = ctx;
  const check = (kind: string, name: string, path: readonly PathSegment[]): void => {
    const invisible = [...name].find((ch) => INVISIBLE.test(ch));
    if (invisible !== undefined || EDGE_SPACE.test(name)) {
      const what = invisible !== undefined ? `an invisible character (${codePoint(invisible)})` : 'a space at one end';
      ctx.add(
        path,
        `${kind} ${shown(name)} contains ${what}: it is not the name anyone reads in this file, and only a request spelling it byte for byte matches it`,
        `write the ${kind} in plain visible text (retype it; copy-paste from a document can carry such characters)`,
      );
      return;
    }
    const lookalike = [...name].find((ch) => LOOKALIKE.test(ch));
    if (lookalike !== undefined && LATIN.test(name)) {
      ctx.add(
        path,
        `${kind} ${JSON.stringify(name)} mixes Latin letters with ${codePoint(lookalike)} (${lookalike}), a Cyrillic or Greek letter that looks like a Latin one`,
        `retype the ${kind} in one script, if the mix is not meant`,
        'warning',
      );
    } else if (name.normalize('NFC') !== name) {
      ctx.add(
        path,
        `${kind} ${JSON.stringify(name)} is not in Unicode NFC: it looks like ${JSON.stringify(name.normalize('NFC'))} but matches only requests that spell it in the same decomposed form`,
        `write it in NFC (composed characters), as clients usually send it`,
        'warning',
      );
    }
  };
  for (const name of Object.keys(table.revisions)) check('revision', name, ['revisions', name]);
  for (const [model, m] of Object.entries(table.models)) {
    check('model', model, ['models', model]);
    for (const [i, t] of m.tenants.entries()) check('tenant', t, ['models', model, 'tenants', i]);
  }
  for (const [i, p] of table.pools.entries()) {
    check('pool', p.name, ['pools', i, 'name']);
    for (const [j, t] of p.tenants.entries()) check('tenant', t, ['pools', i, 'tenants', j]);
  }
  if (table.tenancy.default !== undefined) check('tenant', table.tenancy.default, ['tenancy', 'default']);
  checkCaseTwins(ctx);
}

/**
 * Two model names, or two tenant names, that differ only in letter case: the gate matches both exactly (as vLLM
 * matches a served model name), so they are two models or two tenants, and a client or an authentication layer
 * that writes one for the other gets the other's rollout and access, or a refusal. Usually one is a typo.
 */
function checkCaseTwins(ctx: CheckContext): void {
  const { table } = ctx;
  const twins = (kind: string, names: Iterable<readonly [string, readonly PathSegment[]]>): void => {
    const first = new Map<string, string>();
    for (const [name, path] of names) {
      const seen = first.get(name.toLowerCase());
      if (seen === undefined) first.set(name.toLowerCase(), name);
      else if (seen !== name)
        ctx.add(
          path,
          `${kind} ${JSON.stringify(name)} and ${kind} ${JSON.stringify(seen)} differ only in letter case: kvgate matches ${kind} names exactly, so they are two ${kind}s and a request spelling one gets nothing of the other`,
          `spell the ${kind} the same everywhere, if one is meant; if both are, give them names that differ in more than case`,
          'warning',
        );
    }
  };
  twins(
    'model',
    Object.keys(table.models).map((m) => [m, ['models', m]] as const),
  );
  const tenants: (readonly [string, readonly PathSegment[]])[] = [];
  for (const [model, m] of Object.entries(table.models))
    for (const [i, t] of m.tenants.entries()) tenants.push([t, ['models', model, 'tenants', i]]);
  for (const [i, p] of table.pools.entries()) for (const [j, t] of p.tenants.entries()) tenants.push([t, ['pools', i, 'tenants', j]]);
  if (table.tenancy.default !== undefined) tenants.push([table.tenancy.default, ['tenancy', 'default']]);
  twins(
    'tenant',
    tenants.filter(([t]) => t !== '*'),
  );
}
