import { readFileSync } from 'fs';
import { resolve } from 'path';
import { describe, expect, it } from 'vitest';

import { METRIC_KINDS } from '../src/model';

describe('METRIC_KINDS', () => {
  it('is the list in jupyter_dl/data/metric_kinds.json, in the same order', () => {
    const file = resolve(__dirname, '..', '..', 'jupyter_dl', 'data', 'metric_kinds.json');
    const shared = JSON.parse(readFileSync(file, 'utf-8')) as { kinds: string[] };
    expect([...METRIC_KINDS]).toEqual(shared.kinds);
  });
});
