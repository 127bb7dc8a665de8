/**
 * Canonical JSON: one byte string per value, whatever order its keys were written in.
 *
 * A fingerprint is a hash of bytes, so two descriptors that mean the same must serialise to the same bytes. Object
 * keys are sorted recursively (by UTF-16 code unit, as `Array.prototype.sort` does), no whitespace is written, and
 * `undefined` members are dropped exactly as `JSON.stringify` drops them. Numbers that JSON cannot represent are a
 * bug in the caller and throw.
 */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite numbers have no JSON form');
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
      const record = value as Record<string, unknown>;
      const parts: string[] = [];
      for (const key of Object.keys(record).sort()) {
        const member = record[key];
        if (member === undefined) continue;
        parts.push(`${JSON.stringify(key)}:${canonicalJson(member)}`);
      }
      return `{${parts.join(',')}}`;
    }
    default:
      throw new TypeError(`canonicalJson: unsupported value of type ${typeof value}`);
  }
}
