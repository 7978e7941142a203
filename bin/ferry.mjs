#!/usr/bin/env node
// The `ferry` command (package.json "bin"): registers tsx so Node can load the TypeScript CLI,
// then runs it. The CLI itself is bin/ferry.ts.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./ferry.ts');
process.exitCode = await main(process.argv.slice(2));
