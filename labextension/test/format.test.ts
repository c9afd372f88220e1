import { describe, expect, it } from 'vitest';

import {
  basename,
  clampFraction,
  formatDuration,
  formatEpochStep,
  formatEta,
  formatMemory,
  formatMetric,
  formatPercent,
  formatQueue,
  formatRanks,
  formatRate,
  isActive,
  isFinal,
  stateBadgeClass
} from '../src/format';
import { JOB_STATES } from '../src/model';

describe('formatDuration', () => {
  it('formats seconds, minutes, hours and days', () => {
    expect(formatDuration(0)).toBe('0s');
    expect(formatDuration(42.9)).toBe('42s');
    expect(formatDuration(60)).toBe('1m 00s');
    expect(formatDuration(185)).toBe('3m 05s');
    expect(formatDuration(3600)).toBe('1h 00m');
    expect(formatDuration(3720)).toBe('1h 02m');
    expect(formatDuration(86400 * 2 + 3 * 3600 + 59)).toBe('2d 03h');
  });

  it('shows a dash for unknown or negative durations', () => {
    expect(formatDuration(null)).toBe('—');
    expect(formatDuration(undefined)).toBe('—');
    expect(formatDuration(NaN)).toBe('—');
    expect(formatDuration(Infinity)).toBe('—');
    expect(formatDuration(-1)).toBe('—');
  });
});

describe('formatEta', () => {
  it('shows the estimate for jobs still going', () => {
    expect(formatEta(65, 'running')).toBe('ETA 1m 05s');
    expect(formatEta(5, 'starting')).toBe('ETA 5s');
  });

  it('is empty for finished jobs or unknown estimates', () => {
    expect(formatEta(65, 'succeeded')).toBe('');
    expect(formatEta(null, 'running')).toBe('');
    expect(formatEta(-3, 'running')).toBe('');
  });
});

describe('states', () => {
  it('maps every state to its badge class', () => {
    for (const state of JOB_STATES) {
      expect(stateBadgeClass(state)).toBe(`jp-dl-badge jp-dl-state-${state}`);
    }
  });

  it('maps unknown states to a neutral class rather than arbitrary text', () => {
    expect(stateBadgeClass('cancelling')).toBe('jp-dl-badge jp-dl-state-unknown');
    expect(stateBadgeClass('x" onclick="y')).toBe('jp-dl-badge jp-dl-state-unknown');
  });

  it('knows which states can be cancelled', () => {
    expect(['queued', 'starting', 'running'].every(isActive)).toBe(true);
    expect(['succeeded', 'failed', 'cancelled', 'lost'].some(isActive)).toBe(false);
    expect(['succeeded', 'failed', 'cancelled', 'lost'].every(isFinal)).toBe(true);
    expect(isFinal('running')).toBe(false);
  });
});

describe('progress text', () => {
  it('clamps and formats fractions', () => {
    expect(clampFraction(0.5)).toBe(0.5);
    expect(clampFraction(1.2)).toBe(1);
    expect(clampFraction(-0.1)).toBe(0);
    expect(clampFraction(null)).toBeNull();
    expect(formatPercent(0.426)).toBe('43%'); // rounded, not floored
    expect(formatPercent(1)).toBe('100%');
    expect(formatPercent(undefined)).toBe('');
  });

  it('shows the one-based epoch and the step as the server reports them', () => {
    expect(formatEpochStep({ epoch: 3, epochs: 10, step: 40, steps: 100 })).toBe('epoch 3/10 · step 40/100');
    expect(formatEpochStep({ epoch: 1 })).toBe('epoch 1');
    expect(formatEpochStep({ epoch: 0, epochs: 5, step: 0, steps: 100 })).toBe('');
    expect(formatEpochStep({})).toBe('');
    expect(formatEpochStep(null)).toBe('');
  });

  it('says where a queued job stands in the GPU queue', () => {
    expect(formatQueue({ state: 'queued', progress: { queue_position: 2, reason: 'waiting' } })).toBe(
      'position 2 in the GPU queue'
    );
    expect(formatQueue({ state: 'running', progress: { queue_position: 2 } })).toBe('');
    expect(formatQueue({ state: 'queued', progress: {} })).toBe('');
  });

  it('formats ranks and GPUs', () => {
    expect(formatRanks({ n: 1, gpus: [] })).toBe('1 rank');
    expect(formatRanks({ n: 2, gpus: [0, 1] })).toBe('2 ranks · 2 GPUs');
    expect(formatRanks({ n: 4, gpus: [3] })).toBe('4 ranks · 1 GPU');
    const grew = { n: 2, reason: 'started', t: 1 };
    expect(formatRanks({ n: 4, gpus: [], membership: [grew, { n: 4, reason: 'grew: 2 engines free', t: 2 }] })).toBe(
      '2→4 ranks'
    );
    expect(formatRanks({ n: 2, gpus: [], membership: [grew] })).toBe('2 ranks');
    expect(formatRanks({ n: 2, gpus: [], restarts: [{ attempt: 1, reason: 'x', t: 0 }] })).toBe(
      '2 ranks · restarted 1×'
    );
  });

  it('formats rates, memory and metrics', () => {
    expect(formatRate(1234)).toBe('1.2k samples/s');
    expect(formatRate(2.5e6)).toBe('2.5M samples/s');
    expect(formatRate(42.4)).toBe('42 samples/s');
    expect(formatRate(3.21)).toBe('3.2 samples/s');
    expect(formatRate(null)).toBe('');
    expect(formatMemory(812.4)).toBe('812 MiB');
    expect(formatMemory(10444.8)).toBe('10.2 GiB');
    expect(formatMemory(null)).toBe('?');
    expect(formatMetric(0.123456)).toBe('0.1235');
    expect(formatMetric(12)).toBe('12');
    expect(formatMetric(0.00001234)).toBe('1.23e-5');
    expect(formatMetric(undefined)).toBe('—');
  });

  it('takes the basename of notebook paths', () => {
    expect(basename('a/b/train.ipynb')).toBe('train.ipynb');
    expect(basename('train.ipynb')).toBe('train.ipynb');
    expect(basename(null)).toBe('');
  });
});
