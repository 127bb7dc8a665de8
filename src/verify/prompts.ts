/**
 * The fixed prefixes `kvgate verify` replays: a YAML or JSON list whose items are a string (a completion prompt) or
 * `{ prompt }` / `{ messages }` (chat) with an optional `id` and `max_tokens`. Fixed prefixes make a run repeatable:
 * the same file against the same revision must give the same token ids forever, so any change is a finding.
 *
 * Parsing is pure and returns every issue with the file, the path and a fix; reading the file is the only I/O.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { fromZodIssues } from '../config/from-zod.js';
import { issue, type ConfigIssue } from '../config/issues.js';
import { err, ok, type Result } from '../errors.js';

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** One prefix to verify, normalised: completions carry `prompt`, chat carries `messages`. */
export type VerifyPrompt =
  | { readonly id: string; readonly kind: 'completion'; readonly prompt: string; readonly maxTokens?: number }
  | { readonly id: string; readonly kind: 'chat'; readonly messages: readonly ChatMessage[]; readonly maxTokens?: number };

const MessageSchema = z
  .object({
    role: z.string().min(1, 'must not be empty (system, user, assistant...)'),
    content: z.string(),
  })
  .strict();

const ItemSchema = z
  .object({
    id: z.string().min(1, 'must not be empty').optional(),
    prompt: z.string().min(1, 'must not be empty').optional(),
    messages: z.array(MessageSchema).min(1, 'needs at least one message').optional(),
    max_tokens: z.number().int().positive().optional(),
  })
  .strict();

/** Validate the parsed file content (`file` names it in messages). */
export function parsePrompts(raw: unknown, file: string): Result<VerifyPrompt[], ConfigIssue[]> {
  if (!Array.isArray(raw)) {
    return err([
      issue(
        file,
        [],
        `must be a list of prompts; got ${describe(raw)}`,
        'write a YAML/JSON list: each item a string or { prompt } / { messages }',
      ),
    ]);
  }
  if (raw.length === 0) return err([issue(file, [], 'lists no prompts', 'add at least one prompt')]);
  const issues: ConfigIssue[] = [];
  const out: VerifyPrompt[] = [];
  const seen = new Map<string, number>();
  raw.forEach((value: unknown, i) => {
    const prompt = parseItem(value, i, file, issues);
    if (prompt === undefined) return;
    const first = seen.get(prompt.id);
    if (first !== undefined) {
      issues.push(issue(file, `[${i}].id`, `duplicate id "${prompt.id}" (also item [${first}])`, 'give every prompt its own id'));
      return;
    }
    seen.set(prompt.id, i);
    out.push(prompt);
  });
  return issues.length > 0 ? err(issues) : ok(out);
}

/** One item: a string, or an object checked strictly (issues carry the item index in their path). */
function parseItem(value: unknown, i: number, file: string, issues: ConfigIssue[]): VerifyPrompt | undefined {
  if (typeof value === 'string') {
    if (value.length > 0) return { id: `p${i + 1}`, kind: 'completion', prompt: value };
    issues.push(issue(file, `[${i}]`, 'empty prompt', 'write the prefix text, or remove the item'));
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    issues.push(
      issue(
        file,
        `[${i}]`,
        `must be a string or a mapping; got ${describe(value)}`,
        'write "- some prompt text" or "- { prompt: ..., id: ... }"',
      ),
    );
    return undefined;
  }
  const keys = Object.keys(value);
  if (keys.length === 1 && (value as Record<string, unknown>)[keys[0]!] === null && !(keys[0]! in ItemSchema.shape)) {
    // `- List three primes:` is YAML for the mapping { "List three primes": null }, not a string.
    issues.push(
      issue(
        file,
        `[${i}]`,
        `reads as the YAML key ${JSON.stringify(keys[0])} with no value, not as a prompt`,
        `quote it: - ${JSON.stringify(`${keys[0]}:`)}`,
      ),
    );
    return undefined;
  }
  const parsed = ItemSchema.safeParse(value);
  if (!parsed.success) {
    issues.push(...fromZodIssues(parsed.error.issues, { file, root: ItemSchema, data: value, prefix: [i] }));
    return undefined;
  }
  return toPrompt(parsed.data, i, file, issues);
}

function toPrompt(item: z.infer<typeof ItemSchema>, i: number, file: string, issues: ConfigIssue[]): VerifyPrompt | undefined {
  const id = item.id ?? `p${i + 1}`;
  const max = item.max_tokens === undefined ? {} : { maxTokens: item.max_tokens };
  if (item.prompt !== undefined && item.messages !== undefined) {
    issues.push(
      issue(file, `[${i}]`, 'has both "prompt" and "messages"', 'keep "prompt" for a completion or "messages" for chat, not both'),
    );
    return undefined;
  }
  if (item.prompt !== undefined) return { id, kind: 'completion', prompt: item.prompt, ...max };
  if (item.messages !== undefined) return { id, kind: 'chat', messages: item.messages, ...max };
  issues.push(
    issue(
      file,
      `[${i}]`,
      'has neither "prompt" nor "messages"',
      'add "prompt: <text>" (completions) or "messages: [{role, content}]" (chat)',
    ),
  );
  return undefined;
}

function describe(v: unknown): string {
  if (v === null || v === undefined) return 'an empty document';
  if (Array.isArray(v)) return 'a list';
  return typeof v === 'object' ? 'a mapping' : `a ${typeof v}`;
}

/** Read and validate a prompts file (YAML is a superset of JSON, so one parser serves both). */
export async function loadPromptsFile(file: string): Promise<Result<VerifyPrompt[], ConfigIssue[]>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    return err([issue(file, [], `cannot read: ${(e as Error).message}`, 'check the path passed to --prompts')]);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    return err([issue(file, [], `not valid YAML/JSON: ${(e as Error).message}`, 'fix the syntax at the position shown')]);
  }
  return parsePrompts(raw, file);
}
