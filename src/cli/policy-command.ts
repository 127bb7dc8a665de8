/**
 * `kvgate policy check FILE [--json]` and `kvgate policy diff OLD NEW [--json]`: the policy author's tools.
 *
 * check: exit 0 when the table is valid (warnings are printed, still 0), 1 with every issue when it is not.
 * diff: what routing changes from OLD to NEW, in words; exit 0 whatever changed, 1 when either file is invalid.
 * Exit 2 on usage errors. The logic lives in src/policy/check-report.ts and diff.ts; this is the shell.
 */
import { parseArgs } from 'node:util';
import { checkPolicyFile, formatCheckReport, type PolicyCheckReport } from '../policy/check-report.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { diffRouteTables, formatRouteTableDiff } from '../policy/diff.js';
import { formatIssues } from '../config/issues.js';

export interface CommandIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

const HELP = `usage: kvgate policy check FILE [--json]
       kvgate policy diff OLD NEW [--json]

  check   validate a route table as the gate would before loading it: every issue with its line, path and fix
          (exit 1 on errors; warnings are printed and exit 0)
  diff    what routing changes from OLD to NEW: revisions, cohorts, pools, tenants, the fallback chain
`;

/** Run `kvgate policy <check|diff>`; returns the exit code. */
export async function policyCommand(argv: readonly string[], io: CommandIo = defaultIo()): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { json: { type: 'boolean' }, help: { type: 'boolean' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    io.err(`kvgate policy: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  const [sub, ...files] = parsed.positionals;
  const json = parsed.values.json === true;
  if (parsed.values.help || sub === 'help') {
    io.out(HELP);
    return 0;
  }
  if (sub === 'check' && files.length === 1) return check(files[0]!, json, io);
  if (sub === 'diff' && files.length === 2) return diff(files[0]!, files[1]!, json, io);
  const wrong =
    sub === undefined
      ? 'name a subcommand'
      : sub === 'check'
        ? `check takes one FILE, got ${files.length}`
        : sub === 'diff'
          ? `diff takes two files, OLD and NEW, got ${files.length}`
          : `unknown subcommand ${JSON.stringify(sub)}: check or diff`;
  io.err(`kvgate policy: ${wrong}\n\n${HELP}`);
  return 2;
}

async function check(file: string, json: boolean, io: CommandIo): Promise<number> {
  const { report } = await checkPolicyFile(file);
  io.out(json ? `${JSON.stringify(report, null, 2)}\n` : formatCheckReport(report));
  return report.ok ? 0 : 1;
}

async function diff(oldFile: string, newFile: string, json: boolean, io: CommandIo): Promise<number> {
  const [a, b] = await Promise.all([checkPolicyFile(oldFile), checkPolicyFile(newFile)]);
  const invalid = [a, b].filter((x) => !x.ok).map((x) => x.report);
  if (!a.ok || !b.ok) {
    io.err(invalid.map(invalidText).join(''));
    return 1;
  }
  const lines = diffRouteTables(a.table, b.table);
  io.out(
    json
      ? `${JSON.stringify({ old: oldFile, new: newFile, changes: lines }, null, 2)}\n`
      : `${header(oldFile, newFile, a.table, b.table)}${formatRouteTableDiff(lines)}`,
  );
  return 0;
}

function invalidText(r: PolicyCheckReport): string {
  return `kvgate policy diff: ${r.file} is not a valid route table:\n${formatIssues([...r.errors, ...r.warnings])}\n`;
}

function header(oldFile: string, newFile: string, a: CompiledRouteTable, b: CompiledRouteTable): string {
  const count = (k: number, word: string) => `${k} ${word}${k === 1 ? '' : 's'}`;
  const n = (t: CompiledRouteTable) =>
    `${count(t.revisions.size, 'revision')}, ${count(t.pools.size, 'pool')}, ${count(t.models.size, 'served model')}`;
  return `kvgate policy diff ${oldFile} (${n(a)}) -> ${newFile} (${n(b)})\n`;
}

function defaultIo(): CommandIo {
  return { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) };
}
