import { copyTree } from '../../functions/copy/worker.js';
import { rmSync } from 'node:fs';
const [src, dst, threads, chunk] = process.argv.slice(2);
rmSync(dst, { recursive: true, force: true });
const t = performance.now();
const r = await copyTree({ source: src!, destination: dst!, operationId: 'x', threads: Number(threads), chunkBytes: Number(chunk) * 1024 });
console.log(r.status, r.error?.message ?? '', r.progress.filesDone, ((performance.now() - t) / 1000).toFixed(2), 's');
