/**
 * Where a process gets its key ring: the same three choices for the gate and every sidecar (they must hold the
 * same keys), validated by one schema and loaded by one function.
 */
import { z } from 'zod';
import { err, ok, type Result } from '../errors.js';
import { createDevKeyRing, loadKeyRing, parseKeyRing, type KeyRing } from './keys.js';

export const KeySourceSchema = z
  .object({
    /** JSON/YAML key file: { current, keys: { id: base64 }, salt: base64 }. */
    file: z.string().min(1).optional(),
    /** Read the same JSON from this environment variable instead. */
    env: z.string().min(1).optional(),
    /** Deterministic INSECURE keys derived from this seed: for the local demo and tests only. */
    devSeed: z.string().min(1).optional(),
  })
  .strict()
  .refine((k) => [k.file, k.env, k.devSeed].filter((v) => v !== undefined).length === 1, {
    message: 'set exactly one of keys.file, keys.env or keys.devSeed',
  });

export type KeySource = z.infer<typeof KeySourceSchema>;

/** The key ring a key source names; a dev seed gives INSECURE deterministic keys (the caller warns). */
export function keyRingFrom(k: KeySource, env: Readonly<Record<string, string | undefined>>): Result<KeyRing, string> {
  if (k.devSeed !== undefined) return ok(createDevKeyRing(k.devSeed));
  if (k.env !== undefined && (env[k.env] ?? '').trim() === '') {
    return err(
      `keys.env names the environment variable ${k.env}, which is not set; export it with the key-file JSON ` +
        '{"current":"k1","keys":{"k1":"<base64>"},"salt":"<base64>"}',
    );
  }
  // The variable keys.env names, in its own name: an error must point at the variable the operator set.
  const loaded = k.file !== undefined ? loadKeyRing({ file: k.file }) : parseKeyRing(env[k.env!]!, `environment variable ${k.env}`);
  return loaded.ok ? loaded : err(loaded.error.reason);
}
