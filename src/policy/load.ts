/**
 * Loading a route table: text -> schema -> descriptor files -> semantic checks -> the compiled, frozen table.
 *
 * Every stage reports all of its issues at once (path, what, fix, line), and nothing partial is ever returned: a
 * table either passes every error-level check or is rejected whole, so hot reload can never swap in a bad file.
 * Parsing is pure; only `loadRouteTable` touches the file system (the table and its `descriptorFile`s).
 */
import { dirname, isAbsolute, join } from 'node:path';
import { CompatDescriptorSchema, deepFreeze, type CompatDescriptor } from '../compat/descriptor.js';
import { err, ok, type Result } from '../errors.js';
import { hasErrors, issue, type ConfigIssue } from '../config/issues.js';
import {
  NO_VERIFICATION,
  RouteTableSchema,
  type ResolvedRevision,
  type RevisionVerification,
  type RouteTable,
  type RouteTableDocument,
} from './schema.js';
import { compileRouteTable, type CompiledRouteTable } from './compile.js';
import { checkRouteTable } from './semantic.js';
import { notARouteTable } from './other-kind.js';
import { formatOf, parseStructuredText, type TextFormat } from '../config/text.js';
import { fromZodIssues, type Locate } from '../config/from-zod.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';

/** A descriptor file's text as read, or why it could not be read. Keyed by the path as written in the table. */
export type DescriptorFileContents = Readonly<Record<string, string | { readonly error: string }>>;

export interface RouteTableSource {
  /** The table's file name, for issue messages (and the base of relative `descriptorFile` paths). */
  readonly file: string;
  /** Defaults from the file extension: `.json` is JSON, anything else YAML. */
  readonly format?: TextFormat;
  /** Contents of the `descriptorFile`s the table names (read by `loadRouteTable`). */
  readonly descriptorFiles?: DescriptorFileContents;
}

export interface RouteTableOptions {
  /**
   * Run every semantic check of `semantic.ts` (default true). With false only what compiling needs is checked (see
   * `CheckOptions.referencesOnly`): for `kvgate explain --allow-invalid` and tests of the decision core's guards.
   */
  readonly semantic?: boolean;
}

/** Parse route-table text. Pure: descriptor files come in `source.descriptorFiles`. */
export function parseRouteTable(
  text: string,
  source: RouteTableSource,
  options: RouteTableOptions = {},
): Result<CompiledRouteTable, ConfigIssue[]> {
  const parsed = parseStructuredText(text, source.file, formatOf(source.file, source.format));
  if (!parsed.ok) return parsed;
  return routeTableFromValue(parsed.value.value, source, { ...options, locate: parsed.value.locate });
}

/** Validate an already-parsed value (e.g. built in a test) exactly as `parseRouteTable` validates text. */
export function routeTableFromValue(
  value: unknown,
  source: RouteTableSource,
  options: RouteTableOptions & { readonly locate?: Locate } = {},
): Result<CompiledRouteTable, ConfigIssue[]> {
  const file = source.file;
  const schema = RouteTableSchema.safeParse(value);
  if (!schema.success) {
    const other = notARouteTable(value, file);
    if (other !== undefined) return err([other]);
    const ctx = { file, root: RouteTableSchema, data: value, ...(options.locate ? { locate: options.locate } : {}) };
    return err(fromZodIssues(schema.error.issues, ctx));
  }
  const doc = schema.data as RouteTableDocument;
  const resolved = resolveRevisions(doc, source, options.locate);
  if (!resolved.ok) return resolved;
  const draft: RouteTable = { ...doc, revisions: resolved.value, source: file, warnings: [] };
  const checked = checkRouteTable(draft, {
    ...(options.locate ? { locate: options.locate } : {}),
    ...(options.semantic === false ? { referencesOnly: true } : {}),
  });
  if (hasErrors(checked.issues)) return err(checked.issues);
  return ok(compileRouteTable(deepFreeze({ ...draft, warnings: checked.issues }), checked));
}

function resolveRevisions(
  doc: RouteTableDocument,
  source: RouteTableSource,
  locate: Locate | undefined,
): Result<Record<string, ResolvedRevision>, ConfigIssue[]> {
  const out: Record<string, ResolvedRevision> = {};
  const issues: ConfigIssue[] = [];
  for (const [name, rev] of Object.entries(doc.revisions)) {
    const v = rev.verification;
    const verification: RevisionVerification =
      v === undefined ? NO_VERIFICATION : { required: v.required, verified: v.verified, evidence: v.evidence ?? null };
    if (rev.descriptor !== undefined) {
      out[name] = { descriptor: rev.descriptor as CompatDescriptor, descriptorFile: null, verification, trust: rev.trust };
      continue;
    }
    const ref = rev.descriptorFile!;
    const r = readDescriptorFile(ref, name, source, locate);
    if (r.ok) out[name] = { descriptor: r.value, descriptorFile: ref, verification, trust: rev.trust };
    else issues.push(...r.error);
  }
  return issues.length > 0 ? err(issues) : ok(out);
}

function readDescriptorFile(
  ref: string,
  revision: string,
  source: RouteTableSource,
  locate: Locate | undefined,
): Result<CompatDescriptor, ConfigIssue[]> {
  const at = ['revisions', revision, 'descriptorFile'];
  // The table's line naming the file: an author fixes the reference there, not in a file that does not exist.
  const pos = locate?.(at) ?? {};
  const resolvedPath = descriptorPath(source.file, ref);
  const contents = source.descriptorFiles?.[ref];
  if (contents === undefined) {
    return err([
      issue(
        source.file,
        at,
        `descriptor file "${ref}" was not read (parseRouteTable does no file I/O)`,
        'load the table with loadRouteTable(file), or pass the file text in source.descriptorFiles',
        pos,
      ),
    ]);
  }
  if (typeof contents !== 'string') {
    return err([
      issue(
        source.file,
        at,
        `descriptor file "${ref}" (${resolvedPath}) cannot be read: ${contents.error}`,
        'check the path: it is relative to the route table file',
        pos,
      ),
    ]);
  }
  const parsed = parseStructuredText(contents, resolvedPath, formatOf(ref));
  if (!parsed.ok) return parsed;
  const d = CompatDescriptorSchema.safeParse(parsed.value.value);
  if (!d.success) {
    const ctx = { file: resolvedPath, root: CompatDescriptorSchema, data: parsed.value.value, locate: parsed.value.locate };
    return err(fromZodIssues(d.error.issues, ctx));
  }
  return ok(d.data);
}

/** Where a `descriptorFile` lives: absolute as written, else relative to the table's directory. */
export function descriptorPath(tableFile: string, ref: string): string {
  return isAbsolute(ref) ? ref : join(dirname(tableFile), ref);
}

/** The `descriptorFile` paths a raw table value names (before validation), so they can be read up front. */
export function descriptorFilesOf(value: unknown): string[] {
  const revisions = (value as { revisions?: unknown } | null)?.revisions;
  if (revisions === null || typeof revisions !== 'object') return [];
  const files = Object.values(revisions as Record<string, unknown>)
    .map((r) => (r !== null && typeof r === 'object' ? (r as { descriptorFile?: unknown }).descriptorFile : undefined))
    .filter((f): f is string => typeof f === 'string' && f.length > 0);
  return [...new Set(files)];
}

export interface LoadOptions extends RouteTableOptions {
  readonly format?: TextFormat;
  /** Injected for tests; defaults to reading UTF-8 from disk. */
  readonly readText?: (path: string) => Promise<string>;
}

/** Read and validate a route table file and the descriptor files it names. I/O errors become issues. */
export async function loadRouteTable(file: string, options: LoadOptions = {}): Promise<Result<CompiledRouteTable, ConfigIssue[]>> {
  const read = options.readText ?? readConfigText;
  let text: string;
  try {
    text = await read(file);
  } catch (e) {
    const fix =
      (e as NodeJS.ErrnoException | undefined)?.code === 'EISDIR'
        ? 'name the route table file itself, not its folder (e.g. route-table.yaml in it)'
        : 'check the path and its permissions';
    return err([issue(file, '(file)', `the route table cannot be read: ${ioReason(e)}`, fix)]);
  }
  const format = formatOf(file, options.format);
  const pre = parseStructuredText(text, file, format);
  if (!pre.ok) return pre;
  const descriptorFiles: Record<string, string | { error: string }> = {};
  for (const ref of descriptorFilesOf(pre.value.value)) {
    try {
      descriptorFiles[ref] = await read(descriptorPath(file, ref));
    } catch (e) {
      descriptorFiles[ref] = { error: ioReason(e) };
    }
  }
  const semantic = options.semantic === undefined ? {} : { semantic: options.semantic };
  return routeTableFromValue(pre.value.value, { file, format, descriptorFiles }, { ...semantic, locate: pre.value.locate });
}

const ioReason = readErrorReason;
