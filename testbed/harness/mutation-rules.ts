/**
 * Envoy's header-mutation `Checker` (source/extensions/filters/common/mutation_rules/mutation_rules.cc), pure.
 * Decides whether an ext_proc server may set, append or remove a header, and whether a refusal is silent
 * (IGNORE, counted) or an error (FAIL, a 500) under `disallow_is_error`.
 */
import type { MutationRulesConfig } from './envoy-config-types.js';

export type CheckOperation = 'SET' | 'APPEND' | 'REMOVE';
export type CheckResult = 'OK' | 'IGNORE' | 'FAIL';

/** `host` and the pseudo-headers that choose a route or upstream; need `allow_all_routing`. */
const ROUTING_HEADERS = new Set(['host', ':authority', ':method', ':scheme']);
/** Envoy's bootstrap `header_prefix` default. */
const ENVOY_PREFIX = 'x-envoy';

/** RFC 7230 token characters: what Envoy's `headerNameIsValid` accepts for ordinary names. */
const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Pseudo-header names: `:` then lower-case token characters (the HTTP/2 rule). */
const PSEUDO_RE = /^:[!#$%&'*+\-.^_`|~0-9a-z]+$/;
/** nghttp2's value rule: HTAB, SP, VCHAR and obs-text; no other control characters, no DEL. */
const VALUE_RE = /^[\t\x20-\x7e\x80-\xff]*$/;
const SCHEME_RE = /^[A-Za-z][A-Za-z0-9+.-]*$/;

export function headerNameIsValid(name: string): boolean {
  return name.startsWith(':') ? PSEUDO_RE.test(name) : TOKEN_RE.test(name);
}

export function headerValueIsValid(value: string): boolean {
  return VALUE_RE.test(value);
}

/** `HeaderUtility::authorityIsValid`, approximately: no whitespace, controls or URI delimiters that break routing. */
function authorityIsValid(value: string): boolean {
  return value.length > 0 && /^[^\s/?#@\\"<>{}|^`]+$/.test(value) && VALUE_RE.test(value);
}

export interface MutationChecker {
  check(op: CheckOperation, name: string, value: string): CheckResult;
}

/** Builds a checker; `allow_expression` / `disallow_expression` are full-match regexes, as RE2 in Envoy. */
export function createMutationChecker(rules: MutationRulesConfig): MutationChecker {
  const allow = rules.allowExpression === undefined ? undefined : new RegExp(`^(?:${rules.allowExpression})$`);
  const disallow = rules.disallowExpression === undefined ? undefined : new RegExp(`^(?:${rules.disallowExpression})$`);

  const isAllowed = (op: CheckOperation, name: string): boolean => {
    // No rule relaxes this: the host and pseudo-headers can never be removed.
    if (op === 'REMOVE' && (name.startsWith(':') || name === 'host')) return false;
    if (disallow?.test(name)) return false;
    if (allow?.test(name)) return true;
    if (rules.disallowAll) return false;
    if (!rules.allowAllRouting && ROUTING_HEADERS.has(name)) return false;
    // Pseudo-headers carry one value: appending is refused, and disallow_system refuses all changes.
    if (name.startsWith(':') && (op === 'APPEND' || rules.disallowSystem)) return false;
    if (!rules.allowEnvoy && name.startsWith(ENVOY_PREFIX)) return false;
    return true;
  };

  const isValidValue = (name: string, value: string): boolean => {
    if (!name.startsWith(':') && !headerValueIsValid(value)) return false;
    if ((name === 'host' || name === ':authority') && !authorityIsValid(value)) return false;
    if (name === ':scheme' && !SCHEME_RE.test(value)) return false;
    if (name === ':status') {
      if (!/^\d+$/.test(value)) return false;
      if (Number(value) < 200) return false;
    }
    return true;
  };

  return {
    check(op, rawName, value) {
      const name = rawName.toLowerCase();
      if (isAllowed(op, name) && (op === 'REMOVE' || isValidValue(name, value))) return 'OK';
      return rules.disallowIsError ? 'FAIL' : 'IGNORE';
    },
  };
}

/** The permissive defaults (every flag false, no expressions) — what a filter without `mutation_rules` uses. */
export const DEFAULT_MUTATION_RULES: MutationRulesConfig = Object.freeze({
  allowAllRouting: false,
  allowEnvoy: false,
  disallowSystem: false,
  disallowAll: false,
  disallowIsError: false,
  allowExpression: undefined,
  disallowExpression: undefined,
});
