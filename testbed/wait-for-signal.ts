/** Resolves with the name of the first SIGTERM or SIGINT, and stops listening for the other: how testbed servers stop. */
export function waitForSignal(): Promise<string> {
  return new Promise((resolve) => {
    const on = (sig: string) => () => {
      process.off('SIGTERM', term);
      process.off('SIGINT', int);
      resolve(sig);
    };
    const term = on('SIGTERM');
    const int = on('SIGINT');
    process.once('SIGTERM', term);
    process.once('SIGINT', int);
  });
}
