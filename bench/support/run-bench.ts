/** How a bench script runs: the SDK's Node-version warning is not the bench's output (as npm start, infra/local/quiet-sdk.ts), and a failure ends the process with its error. */
import { quietAwsSdk } from '../../infra/local/quiet-sdk.js';

export function runBench(main: () => Promise<void>): void {
  quietAwsSdk();
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
