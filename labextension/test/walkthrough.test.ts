import { describe, expect, it } from 'vitest';

import { hostLabel, shortJobId } from '../src/format';
import { jobCellClass, jobCellIndex } from '../src/jobCell';
import { emptyLogText, logChoiceKey, readLogChoice } from '../src/logChoice';

// Issue 30's walk-through, the parts that need no browser.
describe('the walk-through of a new user', () => {
  it('finds the cell that ran a job: by its outputs, or by a running job’s progress area', () => {
    const cell = (metadata: unknown[], classes: string[] = []) => ({
      outputMetadata: metadata,
      hasClass: (name: string) => classes.includes(name)
    });
    const cells = [
      cell([]),
      cell([{ jupyter_dl: { job: 'aaa' } }, {}]),
      cell([{}], [jobCellClass('bbb')]),
      cell([{ jupyter_dl: { job: 'other' } }])
    ];
    expect(jobCellIndex(cells, 'aaa')).toBe(1);
    expect(jobCellIndex(cells, 'bbb')).toBe(2);
    expect(jobCellIndex(cells, 'gone')).toBe(-1);
    expect(jobCellIndex([...cells, cell([{ jupyter_dl: { job: 'aaa' } }])], 'aaa')).toBe(4); // the last copy
  });

  it('says "yet" of an empty log only while the job runs', () => {
    expect(emptyLogText('stderr', 0, 'running')).toBe('No stderr output from rank 0 yet.');
    expect(emptyLogText('stderr', 0, 'failed')).toBe('Rank 0 wrote nothing to stderr.');
    expect(emptyLogText('stdout', 1, 'succeeded')).not.toContain('yet');
  });

  it('reads back a logs tab’s rank and stream, and nothing else', () => {
    expect(logChoiceKey('abc')).toBe('jupyter-dl:logs:abc');
    expect(readLogChoice({ rank: 1, stream: 'stderr' })).toEqual({ rank: 1, stream: 'stderr' });
    expect(readLogChoice({ rank: -1, stream: 'stderr' })).toBeNull();
    expect(readLogChoice({ rank: 1, stream: 'both' })).toBeNull();
    expect(readLogChoice({ rank: null, stream: 'stdout' })).toBeNull();
    expect(readLogChoice(undefined)).toBeNull();
  });

  it('names hosts as hosts and tells runs of one name apart by a short id', () => {
    expect(hostLabel('vm')).toBe('host vm');
    expect(hostLabel('slurm allocation')).toBe('slurm allocation');
    expect(shortJobId('3f2a1b9c0d4e')).toBe('3f2a1b');
  });
});
