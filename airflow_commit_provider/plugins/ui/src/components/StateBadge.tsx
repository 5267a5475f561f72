import { Badge } from "@chakra-ui/react";

import type { StageState, TaskStatus } from "../api";
import { STAGE_COLORS, STATUS_COLORS, STATUS_HELP } from "../terms";

export const StageBadge = ({ state }: { readonly state: StageState }) => (
  <Badge colorPalette={STAGE_COLORS[state]} data-testid="stage-state" size="lg" variant="solid">{state}</Badge>
);

export const StatusBadge = ({ status, why }: { readonly status: TaskStatus; readonly why?: string }) => (
  <Badge colorPalette={STATUS_COLORS[status]} data-testid="task-status" title={why ?? STATUS_HELP[status]}
    variant="subtle">{status}</Badge>
);
