import { StateDB } from '@jupyterlab/statedb';
import { describe, expect, it } from 'vitest';

import { JobsApi } from '../src/api';
import { CLEARED_JOBS_KEY, JobsModel, readClearedIds } from '../src/jobsModel';
import { IJob } from '../src/model';

/** An api that lists these jobs and no cluster. */
function fakeApi(jobs: Partial<IJob>[]): JobsApi {
  return {
    listJobs: async () => jobs as IJob[],
    cluster: async () => ({ clusters: [], gpus: [] })
  } as unknown as JobsApi;
}

const JOBS: Partial<IJob>[] = [
  { id: 'a', state: 'succeeded' },
  { id: 'b', state: 'running' },
  { id: 'c', state: 'cancelled' }
];

describe('jobs cleared from the panel', () => {
  it('are kept in the state database and hidden again by the next model (a reload)', async () => {
    const state = new StateDB();
    const first = new JobsModel({ api: fakeApi(JOBS), state, isVisible: () => false });
    await first.fetchNow();
    first.clearFinished();
    expect(first.jobs.map(job => job.id)).toEqual(['b']);
    first.dispose();
    expect(await state.fetch(CLEARED_JOBS_KEY)).toEqual(['a', 'c']);

    const second = new JobsModel({ api: fakeApi(JOBS), state, isVisible: () => false });
    await second.fetchNow();
    expect(second.jobs.map(job => job.id)).toEqual(['b']);
    expect(second.hiddenCount).toBe(2);
    second.showCleared();
    expect(second.jobs).toHaveLength(3);
    second.dispose();
    expect(await state.fetch(CLEARED_JOBS_KEY)).toEqual([]);
  });

  it('drop the ids of jobs gone from the store', async () => {
    const state = new StateDB();
    await state.save(CLEARED_JOBS_KEY, ['a', 'gone']);
    const model = new JobsModel({ api: fakeApi(JOBS), state, isVisible: () => false });
    await model.fetchNow();
    expect(model.hiddenCount).toBe(1);
    model.dispose();
    expect(await state.fetch(CLEARED_JOBS_KEY)).toEqual(['a']);
  });

  it('come back on reload without a state database', async () => {
    const model = new JobsModel({ api: fakeApi(JOBS), isVisible: () => false });
    await model.fetchNow();
    model.clearFinished();
    expect(model.jobs).toHaveLength(1);
    model.dispose();
  });

  it('read as none from anything but a list of ids', () => {
    expect(readClearedIds(['a', 3, null, 'b'])).toEqual(['a', 'b']);
    expect(readClearedIds(undefined)).toEqual([]);
    expect(readClearedIds({ a: 1 })).toEqual([]);
    expect(readClearedIds('a')).toEqual([]);
  });
});
