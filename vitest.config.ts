import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Integration and e2e files each start their own DynamoDB Local / local stack (a JVM each):
    // two at a time keeps a 2-core machine responsive.
    maxWorkers: 2,
    setupFiles: ['test/support/setup.ts'],
  },
});
