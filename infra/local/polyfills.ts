/**
 * aws-local-stepfunctions calls Promise.withResolvers, which Node 20 lacks (Node 22 has it).
 * Importing this module installs it; it changes nothing where the runtime already has one.
 */
const promiseStatics = Promise as unknown as { withResolvers?: () => unknown };
promiseStatics.withResolvers ??= function withResolvers() {
  let resolvePromise!: (v: unknown) => void;
  let rejectPromise!: (e: unknown) => void;
  const promise = new Promise((res, rej) => {
    resolvePromise = res;
    rejectPromise = rej;
  });
  return { promise, resolve: resolvePromise, reject: rejectPromise };
};

export {};
