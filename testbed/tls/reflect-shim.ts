/**
 * The part of the `reflect-metadata` API that tsyringe (a dependency of @peculiar/x509) checks for at load and uses
 * for its decorators: metadata per target and key. Imported before @peculiar/x509, so the testbed needs no extra
 * package. Test support only.
 */
type Target = object;
const store = new WeakMap<Target, Map<unknown, unknown>>();
const r = Reflect as unknown as Record<string, unknown>;
if (typeof r['getMetadata'] !== 'function') {
  const own = (t: Target): Map<unknown, unknown> => {
    let m = store.get(t);
    if (m === undefined) store.set(t, (m = new Map()));
    return m;
  };
  const lookup = (key: unknown, t: Target | null): unknown => {
    for (let cur = t; cur !== null && cur !== undefined; cur = Object.getPrototypeOf(cur) as Target | null) {
      const m = store.get(cur);
      if (m?.has(key) === true) return m.get(key);
    }
    return undefined;
  };
  r['defineMetadata'] = (key: unknown, value: unknown, t: Target) => void own(t).set(key, value);
  r['getOwnMetadata'] = (key: unknown, t: Target) => store.get(t)?.get(key);
  r['getMetadata'] = (key: unknown, t: Target) => lookup(key, t);
  r['hasMetadata'] = (key: unknown, t: Target) => lookup(key, t) !== undefined;
  r['metadata'] = (key: unknown, value: unknown) => (t: Target) => void own(t).set(key, value);
}
export {};
