/**
 * `kvgate verify --record REVISION`: on a pass, record the revision's behaviour. The baseline worker just proved
 * (token ids equal through P/D and without it) to serve the revision, so its answers to kvgate's canaries are the
 * digests every sidecar of that revision checks its worker against (src/sidecar/canaries.ts). With `--policy FILE`
 * they are written into the route table (or into the revision's `descriptorFile`), comments kept; without it the
 * exact YAML to paste is printed. Nothing is written on a failed run.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseDocument, isMap } from 'yaml';
import type { CanaryDigests } from '../sidecar/canaries.js';

const KINDS = ['tokenizer', 'chatTemplate', 'generation'] as const;

/** The YAML block an operator pastes into the revision's descriptor. */
export function canariesYaml(revision: string, digests: CanaryDigests, model: string): string {
  const lines = [
    `# revision ${revision}: canary digests recorded by kvgate verify from the baseline (model ${model}); paste under`,
    `# revisions.${revision}.descriptor (or into its descriptorFile):`,
    'canaries:',
    ...KINDS.map((k) => `  ${k}: ${digests[k] ?? '(not measured)'}`),
  ];
  return `${lines.join('\n')}\n`;
}

/** Where the digests were written, or why not (the caller prints the YAML instead). */
export type RecordResult = { readonly ok: true; readonly file: string } | { readonly ok: false; readonly error: string };

/**
 * Write `digests` into revision `revision` of the route table at `policyFile`: into its inline descriptor, or into
 * the descriptor file it names (relative to the table). Comments and formatting elsewhere are kept.
 */
export async function recordCanaries(policyFile: string, revision: string, digests: Required<CanaryDigests>): Promise<RecordResult> {
  let tableText: string;
  try {
    tableText = await readFile(policyFile, 'utf8');
  } catch (e) {
    return { ok: false, error: `cannot read ${policyFile}: ${(e as Error).message}` };
  }
  const table = parseDocument(tableText);
  if (table.errors.length > 0) return { ok: false, error: `${policyFile} is not valid YAML: ${table.errors[0]!.message}` };
  const rev = table.getIn(['revisions', revision]);
  if (!isMap(rev)) {
    const known = table.getIn(['revisions']);
    const names = isMap(known) ? known.items.map((p) => String((p.key as { value?: unknown })?.value ?? p.key)).join(', ') : 'none';
    return { ok: false, error: `${policyFile} declares no revision "${revision}" (revisions: ${names})` };
  }
  const ref = rev.get('descriptorFile');
  if (typeof ref === 'string') {
    const file = path.isAbsolute(ref) ? ref : path.join(path.dirname(path.resolve(policyFile)), ref);
    return writeInto(file, [], digests);
  }
  if (!isMap(rev.get('descriptor', true)))
    return { ok: false, error: `revision "${revision}" in ${policyFile} has neither descriptor nor descriptorFile` };
  return writeInto(policyFile, ['revisions', revision, 'descriptor'], digests, table);
}

async function writeInto(
  file: string,
  at: readonly string[],
  digests: Required<CanaryDigests>,
  parsed?: ReturnType<typeof parseDocument>,
): Promise<RecordResult> {
  let doc = parsed;
  if (doc === undefined) {
    try {
      doc = parseDocument(await readFile(file, 'utf8'));
    } catch (e) {
      return { ok: false, error: `cannot read ${file}: ${(e as Error).message}` };
    }
  }
  if (file.endsWith('.json')) {
    const value = doc.toJS() as Record<string, unknown>;
    const target = at.reduce<Record<string, unknown>>((o, k) => o[k] as Record<string, unknown>, value);
    target['canaries'] = { ...digests };
    await writeFile(file, `${JSON.stringify(value, null, 2)}\n`);
    return { ok: true, file };
  }
  doc.setIn([...at, 'canaries'], doc.createNode({ ...digests }));
  await writeFile(file, doc.toString({ lineWidth: 0 }));
  return { ok: true, file };
}
