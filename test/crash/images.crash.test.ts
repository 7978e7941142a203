/** The crash matrix of the web-download import (test/crash/scenarios/images.ts). */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { IMAGE_SCENARIOS, imageScenarios } from './scenarios/images.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

crashMatrix('images', IMAGE_SCENARIOS, imageScenarios);
