import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, showDialog, Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

/** Command ids, stable for keyboard shortcuts and tests. */
export const CommandIDs = {
  gettingStarted: 'jupyter-dl:getting-started'
};

/** The text of the getting-started dialog: the two lines a user needs. */
export function gettingStartedText(): string {
  return [
    '%load_ext jupyter_dl',
    '%%distribute -n 2   # on top of an unchanged Keras cell'
  ].join('\n');
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-dl:plugin',
  description: 'Distributed deep learning from notebooks.',
  autoStart: true,
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, palette: ICommandPalette | null) => {
    app.commands.addCommand(CommandIDs.gettingStarted, {
      label: 'Distributed training: getting started',
      execute: () => {
        const body = new Widget({ node: document.createElement('pre') });
        body.addClass('jp-dl-about');
        body.node.textContent = gettingStartedText();
        return showDialog({
          title: 'jupyter-dl',
          body,
          buttons: [Dialog.okButton()]
        });
      }
    });
    palette?.addItem({
      command: CommandIDs.gettingStarted,
      category: 'Distributed training'
    });
    console.log('jupyter-dl extension activated');
  }
};

export default plugin;
