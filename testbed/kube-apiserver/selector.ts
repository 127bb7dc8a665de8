/**
 * The API's label selector, parsed and matched as kube-apiserver does, so a selector the real server refuses is
 * refused here too (and one it accepts is accepted).
 *
 * Followed: kubernetes/kubernetes v1.33 `staging/src/k8s.io/apimachinery/pkg/labels/selector.go` (`Lexer`, `Parser`,
 * `NewRequirement`, `Requirement.Matches`) and `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`
 * (`IsQualifiedName` for keys, `IsValidLabelValue` for values). The server turns a parse error into 400 BadRequest
 * (`pkg/endpoints/handlers/get.go`, `ListResource`: `DecodeParameters` fails → `errors.NewBadRequest`), for a list
 * and a watch alike. Error texts are shortened; the structure (which inputs fail) is upstream's.
 */

export type LabelSelector = (labels: Readonly<Record<string, string>>) => boolean;

type Tok = 'err' | 'eos' | ')' | ',' | '!' | '==' | '=' | '>' | 'id' | 'in' | '<' | '!=' | 'notin' | '(';

const KEYWORDS: Readonly<Record<string, Tok>> = {
  ')': ')',
  ',': ',',
  '!': '!',
  '==': '==',
  '=': '=',
  '>': '>',
  in: 'in',
  '<': '<',
  '!=': '!=',
  notin: 'notin',
  '(': '(',
};

const isWhitespace = (c: string): boolean => c === ' ' || c === '\t' || c === '\r' || c === '\n';
const isSpecial = (c: string): boolean => '=!(),><'.includes(c);

/** selector.go `Lexer.Lex`: whitespace separates; runs of special symbols are the longest known operator. */
function lex(s: string): { tok: Tok; lit: string }[] {
  const out: { tok: Tok; lit: string }[] = [];
  let pos = 0;
  for (;;) {
    while (pos < s.length && isWhitespace(s[pos]!)) pos++;
    if (pos >= s.length) {
      out.push({ tok: 'eos', lit: '' });
      return out;
    }
    if (isSpecial(s[pos]!)) {
      let buf = '';
      let last: { tok: Tok; lit: string } | null = null;
      while (pos < s.length && isSpecial(s[pos]!)) {
        buf += s[pos]!;
        const t = Object.hasOwn(KEYWORDS, buf) ? KEYWORDS[buf]! : undefined;
        if (t !== undefined) last = { tok: t, lit: buf };
        else if (last !== null) break;
        pos++;
      }
      out.push(last ?? { tok: 'err', lit: `error expected: keyword found '${buf}'` });
      continue;
    }
    let buf = '';
    while (pos < s.length && !isSpecial(s[pos]!) && !isWhitespace(s[pos]!)) buf += s[pos++]!;
    out.push(Object.hasOwn(KEYWORDS, buf) ? { tok: KEYWORDS[buf]!, lit: buf } : { tok: 'id', lit: buf });
  }
}

const DNS1123_LABEL = '[a-z0-9]([-a-z0-9]*[a-z0-9])?';
const DNS1123_SUBDOMAIN = new RegExp(`^${DNS1123_LABEL}(\\.${DNS1123_LABEL})*$`);
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** validation.go `IsQualifiedName`: `[prefix/]name`, prefix a DNS-1123 subdomain (≤253), name ≤63. */
function keyError(k: string): string | null {
  const parts = k.split('/');
  let name: string;
  if (parts.length === 1) name = parts[0]!;
  else if (parts.length === 2) {
    const [prefix, n] = parts as [string, string];
    if (prefix.length === 0) return `Invalid value: "${k}": prefix part must be non-empty`;
    if (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) return `Invalid value: "${k}": prefix part must be a DNS-1123 subdomain`;
    name = n;
  } else return `Invalid value: "${k}": a qualified name must consist of alphanumeric characters, '-', '_' or '.'`;
  if (name.length === 0) return `Invalid value: "${k}": name part must be non-empty`;
  if (name.length > 63) return `Invalid value: "${k}": name part must be no more than 63 characters`;
  if (!QUALIFIED_NAME.test(name)) return `Invalid value: "${k}": name part must consist of alphanumeric characters, '-', '_' or '.'`;
  return null;
}

/** validation.go `IsValidLabelValue`: empty, or ≤63 of `[-A-Za-z0-9_.]` starting and ending alphanumeric. */
function valueError(key: string, v: string): string | null {
  if (v.length > 63) return `values[][${key}]: Invalid value: "${v}": must be no more than 63 characters`;
  if (!LABEL_VALUE.test(v))
    return `values[][${key}]: Invalid value: "${v}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`;
  return null;
}

type Op = 'exists' | '!' | 'in' | 'notin' | '=' | '==' | '!=' | '>' | '<';
interface Requirement {
  readonly key: string;
  readonly op: Op;
  readonly values: readonly string[];
}

/** selector.go `NewRequirement`. */
function requirement(key: string, op: Op, values: readonly string[]): Requirement {
  const errs: string[] = [];
  const ke = keyError(key);
  if (ke !== null) errs.push(`key: ${ke}`);
  if ((op === 'in' || op === 'notin') && values.length === 0) errs.push("for 'in', 'notin' operators, values set can't be empty");
  if ((op === '=' || op === '==' || op === '!=') && values.length !== 1) errs.push('exact-match compatibility requires one single value');
  if ((op === 'exists' || op === '!') && values.length !== 0) errs.push('values set must be empty for exists and does not exist');
  if (op === '>' || op === '<') {
    if (values.length !== 1) errs.push("for 'Gt', 'Lt' operators, exactly one value is required");
    for (const v of values) if (!/^[+-]?\d+$/.test(v) || !fitsInt64(v)) errs.push("for 'Gt', 'Lt' operators, the value must be an integer");
  }
  for (const v of values) {
    const ve = valueError(key, v);
    if (ve !== null) errs.push(ve);
  }
  if (errs.length > 0) throw new Error(errs.length === 1 ? errs[0]! : `[${errs.join(', ')}]`);
  return { key, op, values };
}

function fitsInt64(v: string): boolean {
  const n = BigInt(v);
  return n >= -(2n ** 63n) && n < 2n ** 63n;
}

/** selector.go `Parser.parse` and friends; throws with upstream's error structure. */
function parse(selector: string): Requirement[] {
  const items = lex(selector);
  let p = 0;
  // Context `Values`: `in` and `notin` are identifiers there (selector.go `lookahead`/`consume`).
  const look = (values = true): { tok: Tok; lit: string } => {
    const it = items[p]!;
    return values && (it.tok === 'in' || it.tok === 'notin') ? { tok: 'id', lit: it.lit } : it;
  };
  const take = (values = true): { tok: Tok; lit: string } => {
    const it = look(values);
    p++;
    return it;
  };

  const parseValues = (): string[] => {
    const open = take();
    if (open.tok !== '(') throw new Error(`found '${open.lit}' expected: '('`);
    const first = look();
    if (first.tok === ')') {
      take();
      return [''];
    }
    if (first.tok !== 'id' && first.tok !== ',') throw new Error(`found '${first.lit}', expected: ',', ')' or identifier`);
    const s = new Set<string>();
    for (;;) {
      const t = take();
      if (t.tok === 'id') {
        s.add(t.lit);
        const n = look();
        if (n.tok === ',') continue;
        if (n.tok === ')') break;
        throw new Error(`found '${n.lit}', expected: ',' or ')'`);
      } else if (t.tok === ',') {
        if (s.size === 0) s.add('');
        const n = look();
        if (n.tok === ')') {
          s.add('');
          break;
        }
        if (n.tok === ',') s.add('');
      } else throw new Error(`found '${t.lit}', expected: ',', or identifier`);
    }
    const close = take();
    if (close.tok !== ')') throw new Error(`found '${first.lit}', expected: ')'`);
    return [...s].sort();
  };

  const parseExactValue = (): string[] => {
    const n = look();
    if (n.tok === 'eos' || n.tok === ',') return [''];
    const t = take();
    if (t.tok === 'id') return [t.lit];
    throw new Error(`found '${t.lit}', expected: identifier`);
  };

  const parseRequirement = (): Requirement => {
    let t = take();
    let negated = false;
    if (t.tok === '!') {
      negated = true;
      t = take();
    }
    if (t.tok !== 'id') throw new Error(`found '${t.lit}', expected: identifier`);
    const key = t.lit;
    const ke = keyError(key);
    if (ke !== null) throw new Error(ke);
    // `!key` is complete as it stands: whatever follows it must be a comma or the end (`!a=b` is refused by the
    // caller's separator check, as upstream's `parseRequirement` returns DoesNotExist before reading an operator).
    if (negated) return requirement(key, '!', []);
    const after = look();
    if (after.tok === 'eos' || after.tok === ',') return requirement(key, 'exists', []);
    const opTok = take(false);
    const ops: Partial<Record<Tok, Op>> = { in: 'in', notin: 'notin', '=': '=', '==': '==', '!=': '!=', '>': '>', '<': '<' };
    const op = ops[opTok.tok];
    if (op === undefined) throw new Error(`found '${opTok.lit}', expected: in, notin, =, ==, !=, gt, lt`);
    const values = op === 'in' || op === 'notin' ? parseValues() : parseExactValue();
    return requirement(key, op, values);
  };

  const reqs: Requirement[] = [];
  for (;;) {
    const t = look();
    if (t.tok === 'eos') return reqs;
    if (t.tok !== 'id' && t.tok !== '!') throw new Error(`found '${t.lit}', expected: !, identifier, or 'end of string'`);
    try {
      reqs.push(parseRequirement());
    } catch (e) {
      throw new Error(`unable to parse requirement: ${(e as Error).message}`);
    }
    const sep = take();
    if (sep.tok === 'eos') return reqs;
    if (sep.tok !== ',') throw new Error(`found '${sep.lit}', expected: ',' or 'end of string'`);
    const n = look();
    if (n.tok !== 'id' && n.tok !== '!') throw new Error(`found '${n.lit}', expected: identifier after ','`);
  }
}

/** selector.go `Requirement.Matches`. */
function matches(r: Requirement, labels: Readonly<Record<string, string>>): boolean {
  const has = Object.hasOwn(labels, r.key);
  const v = has ? labels[r.key]! : undefined;
  switch (r.op) {
    case 'in':
    case '=':
    case '==':
      return v !== undefined && r.values.includes(v);
    case 'notin':
    case '!=':
      return v === undefined || !r.values.includes(v);
    case 'exists':
      return has;
    case '!':
      return !has;
    case '>':
    case '<': {
      if (v === undefined || !/^[+-]?\d+$/.test(v) || !fitsInt64(v)) return false;
      const have = BigInt(v);
      const want = BigInt(r.values[0]!);
      return r.op === '>' ? have > want : have < want;
    }
  }
}

/** Parse a `labelSelector` query value; throws (the server answers 400) where kube-apiserver would. */
export function parseLabelSelector(text: string): LabelSelector {
  const reqs = parse(text);
  return (labels) => reqs.every((r) => matches(r, labels));
}
