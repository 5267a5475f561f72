// The plugin's entry: Airflow's UI imports this bundle and renders its default export with the route's DAG id,
// run id, task id and map index. Airflow 3.2+ shares its Chakra system (globalThis.ChakraUISystem): the view is
// drawn with Airflow's own theme, colour mode included. Airflow 3.1 does not: a local system then draws it with
// Chakra's defaults, its variables scoped to the view so the host page is left as it is.
import { ChakraProvider, createSystem, defaultConfig, type SystemContext } from "@chakra-ui/react";

import { CommitStatusView, type CommitStatusProps } from "./CommitStatusView";

declare global {
  var ChakraUISystem: SystemContext | undefined;
}

const ROOT_CLASS = "commit-status-root";

let localSystem: SystemContext | undefined;
const system = (): SystemContext => {
  if (globalThis.ChakraUISystem) return globalThis.ChakraUISystem;
  localSystem ??= createSystem(defaultConfig, { cssVarsRoot: `.${ROOT_CLASS}`, globalCss: {}, preflight: false });
  return localSystem;
};

const CommitStatusPlugin = (props: CommitStatusProps) => (
  <ChakraProvider value={system()}>
    <div className={ROOT_CLASS}>
      <CommitStatusView {...props} />
    </div>
  </ChakraProvider>
);

export default CommitStatusPlugin;
