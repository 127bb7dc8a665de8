/**
 * Progress for long runs on stderr: a bar redrawn in place on a terminal, one plain line per prompt otherwise (CI
 * logs and pipes get no carriage returns). A few lines instead of a dependency.
 */
import type { PromptOutcome } from './verdict.js';

export interface ProgressSink {
  write(chunk: string): unknown;
  readonly isTTY?: boolean;
}

export interface Progress {
  /** One prompt finished. */
  update(outcome: PromptOutcome, done: number, total: number): void;
  /** Leave the terminal on a fresh line. */
  finish(): void;
}

const WIDTH = 24;

export function createProgress(sink: ProgressSink): Progress {
  const tty = sink.isTTY === true;
  let drawn = false;
  return {
    update(outcome, done, total) {
      const status = statusWord(outcome);
      if (!tty) {
        sink.write(`verify: ${done}/${total} ${outcome.id} ${status}\n`);
        return;
      }
      const filled = total === 0 ? WIDTH : Math.round((done / total) * WIDTH);
      sink.write(`\r[${'#'.repeat(filled)}${'.'.repeat(WIDTH - filled)}] ${done}/${total} ${outcome.id} ${status}\x1b[K`);
      drawn = true;
    },
    finish() {
      if (drawn) sink.write('\n');
      drawn = false;
    },
  };
}

/** One word for a prompt's outcome, shared by the progress line and the table. */
export function statusWord(o: PromptOutcome): string {
  if (o.comparison === undefined) return 'error';
  return o.comparison.kind === 'equal' ? 'equal' : o.comparison.kind === 'diverged' ? 'DIVERGED' : 'LENGTH';
}
