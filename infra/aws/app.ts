/**
 * The CDK app (`npx cdk synth`, `npx cdk deploy`; cdk.json runs this file with tsx). Everything
 * it deploys comes from functions/wiring.ts and functions/core/tables.ts through FerryStack.
 * The CLI sets CDK_OUTDIR, so the App synthesizes itself when this module finishes.
 */
import { buildFerryApp } from './ferry-stack.js';

buildFerryApp();
