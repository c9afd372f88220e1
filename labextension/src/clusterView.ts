/**
 * The sidebar's cluster section: each running cluster (its owning notebook, engines per host, a Stop button) and
 * each GPU's utilisation and memory. Rebuilt from the cluster endpoint's reply; the panel skips unchanged replies.
 */
import { h } from './dom';
import { basename, clampFraction, formatMemory, formatPercent, hostLabel } from './format';
import { ICluster, IClusterInfo, IGpu } from './model';

export interface IClusterActions {
  isStopping(clusterId: string): boolean;
  stop(cluster: ICluster): void;
}

/** Fills `body` with the clusters and GPUs of `info` (or says why there are none). */
export function renderCluster(
  body: HTMLElement,
  info: IClusterInfo | null,
  error: string | null,
  actions: IClusterActions
): void {
  body.textContent = '';
  if (error && !info) {
    body.appendChild(h('div', { className: 'jp-dl-muted' }, `Cluster status unavailable: ${error}`));
    return;
  }
  if (!info) {
    return;
  }
  if (info.clusters.length === 0) {
    body.appendChild(h('div', { className: 'jp-dl-muted' }, 'No cluster running; %%distribute starts one.'));
  }
  for (const cluster of info.clusters) {
    body.appendChild(clusterRow(cluster, actions));
  }
  if (info.gpus.length === 0) {
    body.appendChild(h('div', { className: 'jp-dl-muted' }, 'No GPUs found (CPU only).'));
  }
  for (const gpu of info.gpus) {
    body.appendChild(gpuRow(gpu));
  }
}

function clusterRow(cluster: ICluster, actions: IClusterActions): HTMLElement {
  const engines = cluster.engines ?? 0;
  const stopping = actions.isStopping(cluster.cluster_id);
  const owner = cluster.owner;
  const notebook = owner?.notebook ?? null;
  const stop = h(
    'button',
    {
      className: 'jp-dl-text-button jp-dl-cluster-stop',
      type: 'button',
      title: `Stop cluster ${cluster.cluster_id}: its engines and controller`
    },
    stopping ? 'Stopping…' : 'Stop'
  );
  stop.disabled = stopping;
  stop.addEventListener('click', () => actions.stop(cluster));
  const hosts = Object.entries(cluster.engines_by_host ?? {});
  return h(
    'div',
    {
      className: 'jp-dl-cluster-row',
      'data-cluster-id': cluster.cluster_id,
      'data-running': String(!!cluster.running),
      title: `cluster ${cluster.cluster_id}${cluster.profile ? ` (profile ${cluster.profile})` : ''}`
    },
    h(
      'div',
      { className: 'jp-dl-cluster-head' },
      h('span', { className: `jp-dl-dot ${cluster.running ? 'jp-dl-dot-on' : 'jp-dl-dot-off'}` }),
      h(
        'span',
        {
          className: `jp-dl-cluster-owner${notebook ? '' : ' jp-dl-muted'}`,
          title: notebook
            ? `started by the kernel of ${notebook} (pid ${owner?.kernel_pid})`
            : owner
              ? `started by kernel pid ${owner.kernel_pid}, not a notebook of this server`
              : 'started outside jupyter-dl (ipcluster, a scheduler job, ...)'
        },
        notebook ? basename(notebook) : owner ? `kernel ${owner.kernel_pid}` : cluster.cluster_id
      ),
      h('span', { className: 'jp-dl-cluster-engines' }, `${engines} ${engines === 1 ? 'engine' : 'engines'}`),
      stop
    ),
    h(
      'ul',
      { className: 'jp-dl-cluster-hosts', 'aria-label': 'Engines by host' },
      ...hosts.map(([host, count]) =>
        h(
          'li',
          {
            className: 'jp-dl-cluster-host',
            'data-host': host,
            title: `${count} ${count === 1 ? 'engine runs' : 'engines run'} on ${hostLabel(host)}`
          },
          // "host vm: 2 engines": a bare "vm 2 engines" did not say that vm is the machine's name.
          hostLabel(host) === host ? null : h('span', { className: 'jp-dl-cluster-host-label' }, 'host '),
          h('span', { className: 'jp-dl-cluster-host-name' }, host),
          h('span', { className: 'jp-dl-cluster-host-engines' }, `: ${count} ${count === 1 ? 'engine' : 'engines'}`)
        )
      )
    )
  );
}

function gpuRow(gpu: IGpu): HTMLElement {
  const util = clampFraction(typeof gpu.utilization === 'number' ? gpu.utilization / 100 : null);
  const used = gpu.memory_used_mb;
  const total = gpu.memory_total_mb;
  const mem = clampFraction(typeof used === 'number' && typeof total === 'number' && total > 0 ? used / total : null);
  return h(
    'div',
    { className: 'jp-dl-gpu', 'data-gpu-index': gpu.index },
    h('div', { className: 'jp-dl-gpu-name' }, `GPU ${gpu.index} · ${gpu.name}`),
    meter('util', util, util === null ? '?' : formatPercent(util)),
    meter('mem', mem, `${formatMemory(used)} / ${formatMemory(total)}`)
  );
}

function meter(label: string, fraction: number | null, text: string): HTMLElement {
  const fill = h('div', { className: 'jp-dl-meter-fill' });
  fill.style.width = `${((fraction ?? 0) * 100).toFixed(1)}%`;
  return h(
    'div',
    { className: `jp-dl-meter jp-dl-meter-${label}`, 'data-fraction': fraction === null ? '' : fraction },
    h('span', { className: 'jp-dl-meter-label' }, label),
    h('div', { className: 'jp-dl-meter-track' }, fill),
    h('span', { className: 'jp-dl-meter-text' }, text)
  );
}
