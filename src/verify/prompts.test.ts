import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatIssues } from '../config/issues.js';
import { loadPromptsFile, parsePrompts } from './prompts.js';

describe('parsePrompts', () => {
  it('accepts strings, { prompt } and { messages } with optional id and max_tokens', () => {
    const r = parsePrompts(
      [
        'The capital of France is',
        { id: 'haiku', prompt: 'Write a haiku', max_tokens: 4 },
        { messages: [{ role: 'user', content: 'Hi' }] },
      ],
      'p.yaml',
    );
    expect(r).toEqual({
      ok: true,
      value: [
        { id: 'p1', kind: 'completion', prompt: 'The capital of France is' },
        { id: 'haiku', kind: 'completion', prompt: 'Write a haiku', maxTokens: 4 },
        { id: 'p3', kind: 'chat', messages: [{ role: 'user', content: 'Hi' }] },
      ],
    });
  });

  it('names the file, the path and a fix for each problem', () => {
    const r = parsePrompts(
      [
        '',
        { prompt: 'x', max_token: 4 },
        { prompt: 'a', messages: [{ role: 'user', content: 'b' }] },
        { id: 'only-id' },
        { messages: [{ role: 'user', content: 'b', name: 'z' }] },
        { prompt: 'y', max_tokens: 0 },
        42,
      ],
      'prompts.yaml',
    );
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const text = formatIssues(r.error);
    expect(text).toContain('prompts.yaml: error: [0]: empty prompt');
    expect(text).toContain('prompts.yaml: error: [1].max_token: unknown key "max_token". Fix: did you mean "max_tokens"?');
    expect(text).toContain('prompts.yaml: error: [2]: has both "prompt" and "messages"');
    expect(text).toContain('prompts.yaml: error: [3]: has neither "prompt" nor "messages"');
    expect(text).toContain('prompts.yaml: error: [4].messages[0].name: unknown key "name"');
    expect(text).toMatch(/prompts\.yaml: error: \[5\]\.max_tokens: .*Fix: use a value (of at least|greater than) /);
    expect(text).toContain('prompts.yaml: error: [6]: must be a string or a mapping; got a number');
    expect(r.error).toHaveLength(7);
  });

  it('explains a prompt that ends in a colon and so reads as a YAML key', () => {
    const r = parsePrompts([{ 'List three prime numbers': null }], 'p.yaml');
    expect(!r.ok && formatIssues(r.error)).toBe(
      'p.yaml: error: [0]: reads as the YAML key "List three prime numbers" with no value, not as a prompt. Fix: quote it: - "List three prime numbers:"',
    );
  });

  it('refuses duplicate ids, a non-list and an empty list', () => {
    const dup = parsePrompts(
      [
        { id: 'a', prompt: 'x' },
        { id: 'a', prompt: 'y' },
      ],
      'f',
    );
    expect(!dup.ok && formatIssues(dup.error)).toContain('f: error: [1].id: duplicate id "a" (also item [0])');
    const map = parsePrompts({ prompts: [] }, 'f');
    expect(!map.ok && formatIssues(map.error)).toMatch(
      /f: error: \(root\): must be a list of prompts; got a mapping\. Fix: write a YAML\/JSON list/,
    );
    const empty = parsePrompts([], 'f');
    expect(!empty.ok && formatIssues(empty.error)).toContain('lists no prompts');
    const nothing = parsePrompts(null, 'f');
    expect(!nothing.ok && formatIssues(nothing.error)).toContain('got an empty document');
  });
});

describe('loadPromptsFile', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-verify-prompts-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('reads YAML and JSON', async () => {
    await writeFile(path.join(dir, 'p.yaml'), '- Hello there\n- id: chat1\n  messages:\n    - { role: user, content: Hi }\n');
    await writeFile(path.join(dir, 'p.json'), JSON.stringify([{ prompt: 'Hello', id: 'j' }]));
    const y = await loadPromptsFile(path.join(dir, 'p.yaml'));
    expect(y.ok && y.value.map((p) => `${p.id}:${p.kind}`)).toEqual(['p1:completion', 'chat1:chat']);
    const j = await loadPromptsFile(path.join(dir, 'p.json'));
    expect(j.ok && j.value).toEqual([{ id: 'j', kind: 'completion', prompt: 'Hello' }]);
  });

  it('reports a missing file and a syntax error with the file name', async () => {
    const missing = await loadPromptsFile(path.join(dir, 'nope.yaml'));
    expect(!missing.ok && formatIssues(missing.error)).toMatch(
      /nope\.yaml: error: \(root\): cannot read: .*ENOENT.*\. Fix: check the path passed to --prompts/,
    );
    await writeFile(path.join(dir, 'bad.yaml'), '- [unclosed\n');
    const bad = await loadPromptsFile(path.join(dir, 'bad.yaml'));
    expect(!bad.ok && formatIssues(bad.error)).toMatch(/bad\.yaml: error: \(root\): not valid YAML\/JSON/);
  });
});
