/**
 * `node dist/bench/profile-summary.js FILE.cpuprofile [--top N]`: what is hot in a `node --cpu-prof` profile,
 * as text (self time, and inclusive time of kvgate's own functions). Benches call the same code when they
 * profile themselves; this entry is for profiles taken by hand.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { formatProfileSummary, type CpuProfile } from './lib/cpu-profile.js';

const { values, positionals } = parseArgs({ args: process.argv.slice(2), options: { top: { type: 'string' } }, allowPositionals: true });
const file = positionals[0];
if (file === undefined) {
  process.stderr.write('usage: node dist/bench/profile-summary.js FILE.cpuprofile [--top N]\n');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
process.stdout.write(`${formatProfileSummary(profile, Number(values.top ?? 20))}\n`);
