import { LabIcon } from '@jupyterlab/ui-components';

/** One coordinator fanning out to three workers; `jp-icon3` makes it follow the theme. */
const jobsSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <circle cx="12" cy="4.5" r="2.5"/>
    <circle cx="4.5" cy="18.5" r="2.5"/>
    <circle cx="12" cy="18.5" r="2.5"/>
    <circle cx="19.5" cy="18.5" r="2.5"/>
    <path d="M11 6.5h2V11h7.5v5h-2v-3H13v3h-2v-3H5.5v3h-2v-5H11z"/>
  </g>
</svg>`;

export const jobsIcon = new LabIcon({ name: 'jupyter-dl:jobs', svgstr: jobsSvg });
