// Words the view uses, explained once (the help panel; column headers carry the same text on hover), and the
// colour of each state (Chakra palettes that Airflow's theme and Chakra's default both have).
import type { StageState, TaskStatus } from "./api";

export const STAGE_COLORS: Record<StageState, string> = {
  purged: "orange", committed: "green", committing: "orange", failed: "red", refused: "red", running: "blue",
  unreadable: "red",
};

export const STATUS_COLORS: Record<TaskStatus, string> = {
  committed: "green", committing: "orange", failed: "red", kept: "cyan", recovered: "teal", refused: "red", retrying: "yellow",
  running: "blue", unfinished: "purple", waiting: "gray", withdrawn: "orange",
};

export const STATUS_ORDER: TaskStatus[] = [
  "committed", "recovered", "kept", "committing", "running", "retrying", "waiting", "unfinished", "withdrawn", "refused",
  "failed",
];

export const STATUS_HELP: Record<TaskStatus, string> = {
  committed: "an attempt of the task committed: its commit record decides the task's output",
  committing: "an attempt claimed the task's commit (no other attempt can take it now) and is writing its record",
  failed: "no attempt of the task committed, and no try of it can follow: Airflow's task failed",
  kept: "committed, and kept hidden under _temporary by the failed run's teardown: a clear recovers it",
  recovered: "committed in an earlier application attempt and adopted without running your code",
  refused: "committed, but a job commit refused its files for good (e.g. another schema): a clear of the whole run "
    + "runs it again with the code of then; it is not recovered",
  retrying: "a try failed; Airflow runs the next one, which first records the failed one failed",
  running: "a try is set up and has no fate yet: it is writing",
  unfinished: "a try was set up and has no fate: killed, or a zombie; the next try or the teardown records it failed",
  waiting: "not started yet",
  withdrawn: "committed (v2: visible at once), then removed by the failed run's teardown: v2 cannot keep it",
};

export const TERMS: [string, string][] = [
  ["attempt A.T", "application attempt A (one run of the stage's setup: 0 first, +1 on every clear of the run), "
    + "Airflow try T of the task"],
  ["committed attempt", "the attempt whose files are the task's output; for a recovered task, the attempt that "
    + "committed in an earlier application attempt"],
  ["failed attempts", "recorded failed: aborted, fenced by a newer try before it could commit, or removed by the "
    + "teardown. A recorded attempt can never commit"],
  ["denied attempts", "claimed the task's commit and lost to another attempt of the task"],
  ["unfinished attempts", "set up, with no fate yet: running, or killed and not yet seen by a newer try"],
  ["generation", "0 for the job's first commit; a clear after a successful commit recomputes the stage as the "
    + "next generation, whose commit replaces this job's earlier files"],
  ["application attempt", "one run of the stage's setup task; tasks committed in an earlier one are recovered"],
  ["algorithm", "1: files are published at job commit (atomic); 2: at each task commit (faster, readers may see "
    + "partial output); magic: S3 multipart uploads completed at job commit"],
];
