/**
 * Full-size load-with-faults run: `npm run load [-- --requests N --concurrency C --no-faults]`.
 * Prints the report; exits 1 if any completion was silently wrong or any request got no response.
 */
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { formatLoadReport, runLoadWithFaults } from '../../testbed/demo/load.js';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '50' },
    'no-faults': { type: 'boolean' },
  },
});
const report = await runLoadWithFaults({
  requests: Number(values.requests),
  concurrency: Number(values.concurrency),
  faults: !values['no-faults'],
  logger: pino({ level: 'silent' }),
  print: (l) => process.stdout.write(`${l}\n`),
});
process.stdout.write(`\n${formatLoadReport(report)}\n`);
process.exitCode = report.silentlyWrong === 0 && report.noResponse === 0 ? 0 : 1;
