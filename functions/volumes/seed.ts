/**
 * The sandbox the local stack seeds on first start. TODO(volumes helper): backends ferry@lvm-a,
 * ferry@lvm-b (local driver, under <dataDir>/backends/<name>), volume types default and multiattach.
 * Idempotent: running it on every start changes nothing the second time.
 */
export async function seedVolumeSandbox(_options: { dataDir: string }): Promise<void> {}
