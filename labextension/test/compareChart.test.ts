import { describe, expect, it } from 'vitest';

import { compareChartSvg, curveLabel } from '../src/compareChart';
import { ICompareReply } from '../src/model';

const data: ICompareReply = {
  x: 'step',
  x_titles: { step: 'step (optimizer updates)', epoch: 'epoch', time: 'seconds since training began' },
  runs: [
    { id: 'a1', name: 'cmp', label: 'cmp -n 1', state: 'succeeded', ranks: 1, cell: 'k', elapsed: 10 },
    { id: 'b2', name: 'cmp', label: 'cmp -n 2', state: 'succeeded', ranks: 2, cell: 'k', elapsed: 6 }
  ],
  curves: [
    { run: 'a1', metric: 'loss', kind: 'epoch', step: [10, 20], epoch: [1, 2], time: [1, 2], y: [1, 0.5] },
    { run: 'b2', metric: 'loss', kind: 'epoch', step: [5, 10], epoch: [1, 2], time: [0.6, 1.2], y: [0.9, 0.4] },
    { run: 'b2', metric: 'accuracy', kind: 'epoch', step: [5, 10], epoch: [1, 2], time: [0.6, 1.2], y: [0.5, 0.7] }
  ],
  table: []
};

describe('compareChartSvg', () => {
  it('draws one line per run and metric, coloured by run, with a legend entry each', () => {
    const svg = compareChartSvg(data, 'epoch', { width: 600, height: 300 });
    expect(svg.match(/class="jp-dl-compare-line"/g)).toHaveLength(3);
    const strokes = [...svg.matchAll(/class="jp-dl-compare-line"[^>]*stroke="(#[0-9a-f]+)"/g)].map(m => m[1]);
    expect(strokes[1]).toBe(strokes[2]); // same run, same colour
    expect(strokes[0]).not.toBe(strokes[1]);
    expect(svg).toContain('cmp -n 2 · accuracy');
    expect(svg).toContain('>epoch</text>'); // the axis title of the chosen x
  });

  it('labels curves by run label and says so when there is nothing to draw', () => {
    expect(curveLabel(data, data.curves[0])).toBe('cmp -n 1 · loss');
    expect(compareChartSvg({ ...data, curves: [] }, 'step', { width: 400, height: 200 })).toContain(
      'No curves to compare'
    );
  });
});
